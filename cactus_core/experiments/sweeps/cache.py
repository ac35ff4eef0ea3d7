"""On-disk cache for sweep chunks: one JSON file per (full configuration, model pair, chunk).

A key is the SHA-256 of the canonical JSON of everything that can change a chunk's numbers:
the models (names with the hash of their weights and their hub revision, `ModelPair.identity`),
the rule and its parameters, sampling, prompts, seeds, and the code version (`code_version`:
a hand-bumped constant, a hash of the sources that compute the numbers, and the torch and
transformers versions). So a finished sweep reruns with no model call, an interrupted one redoes
only the chunks it had not written, and new weights or new code never serve old numbers.

Writes go to a temporary file in the same folder and are renamed into place, so a crash leaves
either the old file or the new one, never half of one. Each record carries the SHA-256 of its
value: a file that is not exactly what `put` wrote (edited, truncated, valid JSON of another
shape, a folder in its place) is a miss with a warning, and an unwritable cache root only costs
the caching, with a warning; neither stops a sweep.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

# Bump when the stored chunk format or the meaning of a stored number changes.
CACHE_VERSION = 2
# Bump when the numbers a chunk holds change for a reason the hashed sources below do not show
# (a change of method in a file outside them, a data file the decoder reads).
NUMBERS_VERSION = 1
_PACKAGE = Path(__file__).resolve().parents[2]
# The sources whose code decides a chunk's numbers: every rule and all the maths, the engine
# (models, decoder, caches, sampling of rows) and the sweep's own accounting.
NUMBERS_SOURCES = (
    "maths",
    "engine",
    "experiments/sweeps/run.py",
    "experiments/sweeps/config.py",
    "experiments/estimates/scoring.py",
)


class CacheWarning(UserWarning):
    """The sweep cache could not read or write a record; the sweep goes on without it."""


def default_cache_dir() -> Path:
    """$CACTUS_CACHE_DIR/sweeps, else ~/.cache/cactus-lab/sweeps (the models' cache root)."""
    root = os.environ.get("CACTUS_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "cactus-lab"
    return base / "sweeps"


@functools.cache
def code_version() -> dict[str, Any]:
    """What of the code a chunk's numbers depend on; part of every chunk's key."""
    h = hashlib.sha256()
    for rel in NUMBERS_SOURCES:
        root = _PACKAGE / rel
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for path in files:
            h.update(f"{path.relative_to(_PACKAGE).as_posix()}\0".encode())
            h.update(path.read_bytes())
    return {
        "numbers": NUMBERS_VERSION,
        "sources": h.hexdigest(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
    }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def canonical_json(payload: Any) -> str:
    """Sorted keys, no whitespace: the same configuration always gives the same bytes."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)


def cache_key(payload: Any) -> str:
    return hashlib.sha256(canonical_json({"v": CACHE_VERSION, "key": payload}).encode()).hexdigest()


def _value_digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


class SweepCache:
    """A folder of JSON records addressed by configuration payloads."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self._warned: set[str] = set()

    def path(self, payload: Any) -> Path:
        key = cache_key(payload)
        return self.root / key[:2] / f"{key}.json"

    def _warn(self, kind: str, message: str) -> None:
        # Once per kind per cache: a sweep of 1,000 chunks against a read-only root should
        # say so once, not 1,000 times.
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(message, CacheWarning, stacklevel=3)

    def get(self, payload: Any, decode: Callable[[Any], Any] | None = None) -> Any | None:
        """The stored value, or None when absent, unreadable, damaged or for another payload.

        decode, when given, turns the value into what the caller uses (e.g.
        `ChunkRecord.from_dict`); a value it cannot decode is a miss with a warning too.
        """
        path = self.path(payload)
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None  # the normal miss (or a cache root that is not a folder: put says so)
        except (OSError, ValueError) as exc:
            kind = type(exc).__name__
            self._warn("read", f"sweep cache: cannot read {path} ({kind}); recomputing")
            return None
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            record = None
        ok = (
            isinstance(record, dict)
            and record.get("v") == CACHE_VERSION
            and record.get("key") == json.loads(canonical_json(payload))
            and "value" in record
            and record.get("sha256") == _value_digest(record["value"])
        )
        if not ok:
            self._warn("damaged", f"sweep cache: {path} is damaged or not a record; recomputing")
            return None
        if decode is None:
            return record["value"]
        try:
            return decode(record["value"])
        except (TypeError, KeyError, ValueError, AttributeError, IndexError):
            self._warn("damaged", f"sweep cache: {path} holds a value of another shape; redoing")
            return None

    def put(self, payload: Any, value: Any) -> Path | None:
        """Store value atomically (temporary file in the same folder, fsync, rename). Returns
        the path, or None with a CacheWarning when the cache cannot be written (the caller's
        result stands; it is only not cached)."""
        path = self.path(payload)
        text = json.dumps(
            {"v": CACHE_VERSION, "key": payload, "value": value, "sha256": _value_digest(value)},
            sort_keys=True,
            allow_nan=False,
        )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        except OSError as exc:
            self._warn("write", f"sweep cache: cannot write under {self.root} ({exc}); not cached")
            return None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            self._warn("write", f"sweep cache: cannot write {path} ({exc}); not cached")
            return None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def __contains__(self, payload: Any) -> bool:
        return self.get(payload) is not None
