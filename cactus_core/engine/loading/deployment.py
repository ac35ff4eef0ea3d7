"""Who may load what: the deployment policy that makes a public Cactus Lab safe to expose.

Off by default, so `make app` and the CLI load any folder, .gguf file or hub id the operator
names. A public deployment sets environment variables (docs/deploy.md):

    CACTUS_LAB_PUBLIC=1                 visitors are not the operator
    CACTUS_LAB_ALLOWED_MODELS=a,b,...   hub ids and folders (or .gguf files) visitors may load,
                                        each optionally as "label=spec"; the embedded pair is
                                        always allowed
    CACTUS_LAB_MAX_DOWNLOAD_MB=2048     the most a hub download may fetch (default 2048 when
                                        public, no cap otherwise)

When public, `load_pair` refuses any other source before touching the disk, and every refusal
and every load error is the one fixed `PUBLIC_LOAD_ERROR`: a visitor learns nothing about the
server's folders (whether a path exists, the home folder, file contents) from the message.
The real cause goes to the server log for the operator.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cactus_core.engine.loading.embedded_drafts import FEATURE_DRAFT_DIR

PUBLIC_ENV = "CACTUS_LAB_PUBLIC"
ALLOWED_ENV = "CACTUS_LAB_ALLOWED_MODELS"
MAX_DOWNLOAD_ENV = "CACTUS_LAB_MAX_DOWNLOAD_MB"
# A public server with a network must not fetch a 100 GB repository because a visitor asked;
# 2 GB holds the SmolLM2 family up to 1.7B in bf16.
DEFAULT_PUBLIC_MAX_DOWNLOAD_MB = 2048
PUBLIC_LOAD_ERROR = (
    "This model cannot be loaded on this server. Choose one of the models it offers."
)
EMBEDDED_LABEL = "embedded pair (SmolLM2-135M + cactus draft)"

log = logging.getLogger(__name__)


class ModelLoadError(ValueError):
    """A model or tokenizer could not be loaded, or the two models cannot be paired."""


def looks_like_path(text: str) -> bool:
    """Hub ids are "name" or "org/name"; anything else with separators is meant as a path."""
    return (
        text.startswith((".", "/", "~"))
        or text.count("/") > 1
        or (os.sep != "/" and os.sep in text)
        or text.endswith(".gguf")
    )


def _real(text: str) -> str:
    # realpath resolves symlinks and "..", so "/srv/models/../../root" cannot pass for an
    # allowed folder; it reads no file contents and its result is never shown to a visitor.
    return os.path.realpath(os.path.expanduser(text))


_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """An on/off setting: 1/true/yes/on or 0/false/no/off (or unset); ValueError on anything
    else, so that `=y` or `=enabled` stops the server rather than meaning "off" in silence."""
    value = (env.get(name) or "").strip().lower()
    if value not in (*_ON, *_OFF):
        raise ValueError(f"{name} must be 1 or 0 (true/false, yes/no, on/off), got {value!r:.40}")
    return value in _ON


@dataclass(frozen=True)
class DeploymentPolicy:
    """What model sources a server accepts. The default (not public) accepts everything."""

    public: bool = False
    hub_ids: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()  # real paths of allowed folders and .gguf files
    labels: tuple[tuple[str, str], ...] = ()  # (label, spec as the operator wrote it)
    max_download_bytes: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DeploymentPolicy:
        """The policy from CACTUS_LAB_* variables; ValueError on a malformed value (the
        operator's mistake, so it fails at start-up rather than allowing too much)."""
        env = os.environ if environ is None else environ
        public = env_flag(env, PUBLIC_ENV)
        hub_ids: list[str] = []
        paths: list[str] = []
        labels: list[tuple[str, str]] = []
        for entry in (env.get(ALLOWED_ENV) or "").split(","):
            entry = entry.strip()
            if not entry:
                continue
            label, sep, spec = entry.partition("=")
            label, spec = (label.strip(), spec.strip()) if sep else (entry, entry)
            if not spec or not label:
                raise ValueError(f"{ALLOWED_ENV}: empty model in entry {entry!r}")
            (paths if looks_like_path(spec) else hub_ids).append(
                _real(spec) if looks_like_path(spec) else spec
            )
            labels.append((label, spec))
        return cls(public, tuple(hub_ids), tuple(paths), tuple(labels), _max_bytes(env, public))

    def allows(self, spec: str | os.PathLike[str] | None) -> bool:
        """True when `spec` may be loaded: always when not public; else the embedded model
        (None), the shipped feature draft, or an allow-listed hub id, folder or .gguf file."""
        if not self.public or spec is None:
            return True
        if not isinstance(spec, str | os.PathLike):
            return False
        text = os.fspath(spec)
        if isinstance(spec, os.PathLike) or looks_like_path(text):
            return _real(text) in (*self.paths, _real(str(FEATURE_DRAFT_DIR)))
        return text in self.hub_ids

    def check(self, spec: str | os.PathLike[str] | None) -> None:
        """Raise ModelLoadError(PUBLIC_LOAD_ERROR) unless `spec` is allowed."""
        if not self.allows(spec):
            log.warning("refused a model source that is not on the allow-list")
            raise ModelLoadError(PUBLIC_LOAD_ERROR)

    def is_hub_id(self, spec: str | os.PathLike[str]) -> bool:
        """When public, an allowed hub id is always fetched from the hub (cache), never read
        from a local folder that happens to have the same relative name."""
        return self.public and isinstance(spec, str) and spec in self.hub_ids

    def choices(self) -> dict[str, str | None]:
        """label -> spec of what a visitor may pick: the embedded pair (None) first, then the
        allow-list in the operator's order. Not public: only the embedded pair (the app's free
        text field stays the way to name others)."""
        out: dict[str, str | None] = {EMBEDDED_LABEL: None}
        if self.public:
            out.update(dict(self.labels))
        return out

    def public_error(self, exc: BaseException) -> ModelLoadError:
        """The error to raise for a failed load: the fixed message when public (the cause is
        logged for the operator), else the exception itself as a ModelLoadError."""
        if self.public:
            log.warning("model load failed: %s: %s", type(exc).__name__, exc)
            return ModelLoadError(PUBLIC_LOAD_ERROR)
        return exc if isinstance(exc, ModelLoadError) else ModelLoadError(str(exc))

    def check_download(self, repo_id: str, files: Iterable[tuple[str, int | None]]) -> None:
        """Refuse a hub download over the cap. files: (name, size in bytes or None) of what
        would be downloaded; an unknown size counts as over the cap (it cannot be checked)."""
        if self.max_download_bytes is None:
            return
        total = 0
        for name, size in files:
            if size is None:
                raise ModelLoadError(
                    f"model {repo_id!r}: the hub does not report the size of {name!r}, so the "
                    f"{MAX_DOWNLOAD_ENV} cap cannot be checked"
                )
            total += size
        if total > self.max_download_bytes:
            raise ModelLoadError(
                f"model {repo_id!r} is {total / 2**20:,.0f} MB, over the "
                f"{self.max_download_bytes / 2**20:,.0f} MB download cap ({MAX_DOWNLOAD_ENV})"
            )


def _max_bytes(env: Mapping[str, str], public: bool) -> int | None:
    raw = (env.get(MAX_DOWNLOAD_ENV) or "").strip()
    if not raw:
        return DEFAULT_PUBLIC_MAX_DOWNLOAD_MB * 2**20 if public else None
    try:
        mb = float(raw)
    except ValueError:
        raise ValueError(f"{MAX_DOWNLOAD_ENV} must be a number of MB, got {raw!r}") from None
    if not mb >= 0 or mb == float("inf"):
        raise ValueError(f"{MAX_DOWNLOAD_ENV} must be a finite number >= 0, got {raw!r}")
    return int(mb * 2**20)


def deployment_policy(environ: Mapping[str, str] | None = None) -> DeploymentPolicy:
    """The policy of this process, read from the environment on each call (cheap), so a test
    or a launcher that sets the variables sees them at once."""
    return DeploymentPolicy.from_env(environ)


def selected_files(
    names: Iterable[tuple[str, int | None]], patterns: Iterable[str]
) -> list[tuple[str, int | None]]:
    """The (name, size) entries a snapshot download with these allow_patterns would fetch."""
    pats = list(patterns)
    return [(n, s) for n, s in names if any(fnmatch.fnmatch(n, p) for p in pats)]
