"""The reference sweep shipped for the embedded pair: the frontier before anything runs.

Every rule at the values of its metadata grid (`Param.grid`, at least six), T = 0.7, k = 4,
top-p 1.0 and 0.95, the built-in prompts, 64 new tokens, with the limit. Per top-p it keeps the
sweep's rows (each setting's means and 95% intervals), the pooled limit curve, and every
setting's own estimated curve: the rule's curve over 50 values of its parameter on the
positions that setting's run decoded. Those make the estimated frontier
(`estimate.from_own_runs`: each value from the runs at the swept values around it), so the
Decode page can place any parameter value on its rule's curve. Provenance travels with
it: the command, the commit, the pair's identity (the hashes of both models' weights) and the
date. `python -m cactus_core sweep --reference` regenerates it; tests/test_reference.py fails
when the file no longer matches the embedded pair.
"""

from __future__ import annotations

import datetime as dt
import functools
import gzip
import json
import math
import os
import secrets
import subprocess
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cactus_core.experiments.estimates.curves import (
    CURVE_ARRAYS,
    EstimatedCurve,
    EstimatedFrontier,
    OwnRun,
    estimable,
    from_own_runs,
)
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import Setting, SweepConfig
from cactus_core.experiments.sweeps.run import Progress, SweepResult, run_sweep
from cactus_core.maths.limit import LimitCurve
from cactus_core.maths.rules import RULES, rule_class
from cactus_core.maths.sampling import SamplingSettings

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

REFERENCE_FILE = Path(__file__).resolve().parents[2] / "data" / "reference_sweep.json.gz"
REFERENCE_COMMAND = "python -m cactus_core sweep --reference"  # + --force or --output PATH
REFERENCE_TOP_P: tuple[float, ...] = (1.0, 0.95)
REFERENCE_SAMPLING = SamplingSettings(k=4, temperature=0.7, top_k=0, top_p=1.0, seed=0)
REFERENCE_MAX_NEW_TOKENS = 64
MIN_SETTINGS_PER_RULE = 6
FORMAT = 2  # 2: every setting's own estimated curve replaces one sps run's estimate
# The shipped file is 0.4 MB and 1.1 MB unpacked. Reading stops at these caps, so a damaged or
# hostile file (a gzip bomb) is refused in milliseconds instead of filling the memory.
MAX_REFERENCE_FILE_BYTES = 16 << 20
MAX_REFERENCE_JSON_BYTES = 32 << 20


def reference_settings() -> tuple[Setting, ...]:
    """Every rule at each value of its metadata grid (one setting for a rule without a
    parameter); a grid shorter than six is filled from the widget range."""
    out: list[Setting] = []
    for name, cls in RULES.items():
        spec = cls.swept()
        if spec is None:
            out.append(Setting.of(name))
            continue
        values = list(spec.grid)
        extra = [v for v in spec.values(MIN_SETTINGS_PER_RULE) if v not in values]
        values += extra[: max(0, MIN_SETTINGS_PER_RULE - len(values))]
        for v in values:
            out.append(Setting.of(name, **{spec.name: int(v) if spec.integer else float(v)}))
    return tuple(dict.fromkeys(out))


def reference_configs(prompts: tuple[str, ...]) -> list[SweepConfig]:
    """One sweep per top-p over every reference setting."""
    return [
        SweepConfig(
            prompts=prompts,
            settings=reference_settings(),
            sampling=replace(REFERENCE_SAMPLING, top_p=top_p),
            max_new_tokens=REFERENCE_MAX_NEW_TOKENS,
            chunk_size=len(prompts),
            limit=True,
            own_estimate=True,
        )
        for top_p in REFERENCE_TOP_P
    ]


# ------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class ReferenceSweep:
    """One top-p's part: the sweep's rows, its limit curve, each rule's own runs' estimated
    curves, and the estimated frontier made of them."""

    top_p: float
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    limit: LimitCurve | None
    own_runs: dict[str, list[OwnRun]]
    estimate: EstimatedFrontier | None
    wall_s: float

    def rule_rows(self, rule: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["rule"] == rule]

    def has(self, rule: str) -> bool:
        """Whether the reference measured this rule: a rule added since it was made has no
        rows until `sweep --reference --missing-only` runs its grid (`not_in_reference`)."""
        return any(r["rule"] == rule for r in self.rows)


def not_in_reference(rule: str) -> str:
    """What every view reading the reference says of a rule it has not measured yet."""
    return (
        f"{rule} is not in the reference yet: run a sweep (`{REFERENCE_COMMAND} --missing-only "
        "--force` adds its grid to the shipped file, or sweep it on the Frontier)"
    )


@dataclass(frozen=True)
class Reference:
    provenance: dict[str, Any]
    sweeps: dict[float, ReferenceSweep]

    @property
    def model(self) -> str:
        return str(self.provenance["model"])

    def tasks(self) -> list[str]:
        """Each reference prompt's task tag. The reference ran the first `prompts` built-in
        prompts in file order, so their tags are the built-in ones: no re-run needed."""
        from cactus_core.engine.loading.prompts import builtin_tasks

        return builtin_tasks()[: int(self.provenance["prompts"])]

    def for_top_p(self, top_p: float) -> ReferenceSweep | None:
        """The part at this top-p, or None (the reference holds only REFERENCE_TOP_P)."""
        for value, sweep in self.sweeps.items():
            if abs(value - top_p) < 1e-9:
                return sweep
        return None

    def matches(self, sampling: SamplingSettings) -> bool:
        """Whether these sampling settings are the reference's (any seed)."""
        ref = REFERENCE_SAMPLING
        return (
            sampling.k == ref.k
            and sampling.temperature == ref.temperature
            and sampling.top_k == ref.top_k
            and self.for_top_p(sampling.top_p) is not None
        )

    def caption(self) -> str:
        p = self.provenance
        pair = "the embedded pair" if p.get("embedded_pair", True) else "the pair its command names"
        return (
            f"Reference sweep shipped with the lab, for {pair}: {p['prompts']} "
            f"built-in prompts × {p['max_new_tokens']} tokens, T = {p['temperature']:g}, "
            f"k = {p['k']}, top-p {' and '.join(f'{t:g}' for t in self.sweeps)}; made "
            f"{p['date'][:10]} at commit {p['commit'][:10]} with `{p['command']}`."
        )


def load_reference(path: Path | str | None = None) -> Reference:
    """The shipped reference (or the file at path); ValueError if it is missing or unreadable."""
    path = Path(path) if path is not None else REFERENCE_FILE
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        raise ValueError(
            f"no reference sweep at {path}; run `{REFERENCE_COMMAND} --force`"
        ) from None
    return _load(str(path), stamp)


@functools.lru_cache(maxsize=2)
def _load(path: str, _stamp: int) -> Reference:
    """Every way a file can be damaged (truncated, not gzip, not JSON, the wrong shape, too
    large) is one ValueError naming the file, so a page shows one line and keeps working."""
    try:
        data = json.loads(_read_capped(path))
        _check_shape(data)
        return Reference(
            provenance=data["provenance"],
            sweeps={float(s["top_p"]): _sweep_from_dict(s) for s in data["sweeps"]},
        )
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, IndexError) as err:
        reason = str(err) or type(err).__name__
    except RecursionError:
        reason = "its JSON is nested too deeply"
    raise ValueError(
        f"cannot read the reference sweep {path} ({reason}); regenerate it with "
        f"`{REFERENCE_COMMAND} --force`"
    ) from None


def _read_capped(path: str) -> bytes:
    """The unpacked bytes, read in pieces and refused past MAX_REFERENCE_JSON_BYTES."""
    if os.path.getsize(path) > MAX_REFERENCE_FILE_BYTES:
        raise ValueError(f"larger than {MAX_REFERENCE_FILE_BYTES >> 20} MB")
    parts, total = [], 0
    with gzip.open(path, "rb") as f:
        while piece := f.read(1 << 20):
            total += len(piece)
            if total > MAX_REFERENCE_JSON_BYTES:
                raise ValueError(f"unpacks to more than {MAX_REFERENCE_JSON_BYTES >> 20} MB")
            parts.append(piece)
    return b"".join(parts)


_PROVENANCE = {
    "command": str,
    "commit": str,
    "model": str,
    "date": str,
    "prompts": int,
    "max_new_tokens": int,
    "temperature": float,
    "k": int,
    "top_k": int,
    "seed": int,
}
# What the pages read of a row; any other field may be a number, a string or null.
_ROW_TEXT = ("setting", "label", "rule")
_ROW_NUMBERS = ("tokens_per_call", "emitted_kl")


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _numbers(x: object, what: str) -> None:
    if not isinstance(x, list) or not all(v is None or _is_number(v) for v in x):
        raise ValueError(f"{what} is not a list of numbers")


def _check_shape(data: object) -> None:
    """ValueError naming the first field that is not what the reader and the pages expect."""
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    if data.get("format") != FORMAT:
        raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
    prov = data.get("provenance")
    if not isinstance(prov, dict):
        raise ValueError("no provenance object")
    for key, kind in _PROVENANCE.items():
        ok = _is_number(prov.get(key)) if kind is float else isinstance(prov.get(key), kind)
        if not ok or isinstance(prov.get(key), bool):
            raise ValueError(f"provenance.{key} is not a {kind.__name__}")
    sweeps = data.get("sweeps")
    if not isinstance(sweeps, list) or not sweeps:
        raise ValueError("sweeps is not a non-empty list")
    for i, sw in enumerate(sweeps):
        where = f"sweeps[{i}]"
        if not isinstance(sw, dict) or not _is_number(sw.get("top_p")):
            raise ValueError(f"{where} is not a sweep with a top_p")
        if not isinstance(sw.get("config"), dict) or not isinstance(sw["config"].get("k"), int):
            raise ValueError(f"{where}.config has no k")
        if not _is_number(sw.get("positions")) or not _is_number(sw.get("wall_s")):
            raise ValueError(f"{where} has no positions or wall_s")
        rows = sw.get("rows")
        if not isinstance(rows, list):
            raise ValueError(f"{where}.rows is not a list")
        for j, row in enumerate(rows):
            _check_row(row, f"{where}.rows[{j}]")
        if not any(row["rule"] in RULES for row in rows):
            raise ValueError(f"{where}.rows has no rule's row to draw")
        lim = sw.get("limit")
        if lim is not None:
            if not isinstance(lim, dict) or not isinstance(lim.get("count"), int):
                raise ValueError(f"{where}.limit has no count")
            _numbers(lim.get("mean_kl"), f"{where}.limit.mean_kl")
            _numbers(lim.get("mean_acceptance"), f"{where}.limit.mean_acceptance")
            if not lim["mean_kl"] or len(lim["mean_kl"]) != len(lim["mean_acceptance"]):
                raise ValueError(f"{where}.limit's lists are empty or of unequal length")
        curves = sw.get("own_curves")
        if not isinstance(curves, list):
            raise ValueError(f"{where}.own_curves is not a list")
        for j, run in enumerate(curves):
            _check_curve(run, f"{where}.own_curves[{j}]")


def _check_row(row: object, where: str) -> None:
    if not isinstance(row, dict):
        raise ValueError(f"{where} is not an object")
    for key in _ROW_TEXT:
        if not isinstance(row.get(key), str):
            raise ValueError(f"{where}.{key} is not a string")
    for key in _ROW_NUMBERS:
        if not _is_number(row.get(key)):
            raise ValueError(f"{where}.{key} is not a number")
    for key, value in row.items():
        # Per-position columns (acceptance_by_position, position_reached, ...) are lists.
        items = value if isinstance(value, list) else [value]
        # flags (`estimated`) are booleans
        if not all(v is None or isinstance(v, (str, bool)) or _is_number(v) for v in items):
            raise ValueError(
                f"{where}.{key} is not a number, a string, a boolean, null or a list of them"
            )


def _check_curve(run: object, where: str) -> None:
    if not isinstance(run, dict) or not (run.get("value") is None or _is_number(run["value"])):
        raise ValueError(f"{where} is not a run with a value")
    curve = run.get("curve")
    if not isinstance(curve, dict) or curve.get("rule") not in RULES:
        raise ValueError(f"{where}.curve names no rule")
    lengths = set()
    for name in CURVE_ARRAYS:
        _numbers(curve.get(name), f"{where}.curve.{name}")
        lengths.add(len(curve[name]))
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(f"{where}.curve's lists are empty or of unequal length")


def _sweep_from_dict(s: dict[str, Any]) -> ReferenceSweep:
    lim = None if s.get("limit") is None else _limit(s["limit"])
    runs: dict[str, list[OwnRun]] = {}
    for run in s["own_curves"]:
        curve = EstimatedCurve.from_dict(run["curve"])
        # files made before `estimable` held per-position curves of FLy and the learned judge,
        # at KL 0: not theirs
        if estimable(curve.rule):
            runs.setdefault(curve.rule, []).append((run["value"], curve))
    k = int(s["config"]["k"])
    estimate = None
    if lim is not None and runs:
        estimate = EstimatedFrontier(
            k=k,
            positions=int(s["positions"]),
            curves={rule: from_own_runs(r, k) for rule, r in runs.items()},
            limit=lim,
        )
    return ReferenceSweep(
        top_p=float(s["top_p"]),
        config=s["config"],
        rows=s["rows"],
        limit=lim,
        own_runs=runs,
        estimate=estimate,
        wall_s=float(s["wall_s"]),
    )


def _limit(d: dict[str, Any]) -> LimitCurve:
    import numpy as np

    return LimitCurve(np.asarray(d["mean_kl"]), np.asarray(d["mean_acceptance"]), int(d["count"]))


# ------------------------------------------------------------------------------ making


def _commit() -> str:
    root = Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+uncommitted" if dirty else "")


def build_reference(
    pair: ModelPair,
    prompts: tuple[str, ...],
    command: str,
    cache: SweepCache | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    embedded: bool = True,
) -> dict[str, Any]:
    """Run the reference sweeps (cached chunk by chunk); the dict that `write_reference`
    stores. embedded: whether `pair` is the embedded one (the caption says which)."""
    sweeps = []
    for config in reference_configs(prompts):
        start = time.perf_counter()
        result: SweepResult = run_sweep(pair, config, cache, on_progress)
        body = json.loads(result.to_json(indent=None))
        sweeps.append(
            {
                "top_p": config.sampling.top_p,
                "config": body["config"],
                "rows": body["rows"],
                "limit": _limit_dict(result),
                "own_curves": _own_curves(result, config.sampling.k),
                "positions": sum(r.scored for s in result.settings for r in s.prompts),
                "wall_s": time.perf_counter() - start,
            }
        )
    s = REFERENCE_SAMPLING
    provenance = {
        "command": command,
        "commit": _commit(),
        "model": pair.identity,
        "embedded_pair": embedded,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "prompts": len(prompts),
        "max_new_tokens": REFERENCE_MAX_NEW_TOKENS,
        "temperature": s.temperature,
        "k": s.k,
        "top_k": s.top_k,
        "seed": s.seed,
    }
    return {"format": FORMAT, "provenance": provenance, "sweeps": sweeps}


def missing_settings(data: dict[str, Any]) -> dict[float, tuple[Setting, ...]]:
    """Per top-p, the reference settings (`reference_settings`, from the rules' grids) that
    the stored reference `data` has no row for: what a grid grown since it was made adds."""
    out = {}
    for part in data["sweeps"]:
        have = {row["setting"] for row in part["rows"]}
        out[float(part["top_p"])] = tuple(s for s in reference_settings() if s.id not in have)
    return out


def augment_reference(
    pair: ModelPair,
    data: dict[str, Any],
    command: str,
    cache: SweepCache | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> dict[str, Any]:
    """The stored reference `data` with the settings it lacks (`missing_settings`) run and
    added, on the same prompts, seeds and sampling, each with its own verifier-only baseline
    for the speedup. Rows already there, the pooled limit curve and the estimated curves of
    the old settings are kept as they were; provenance lists what was added, when and how."""
    if data.get("format") != FORMAT:
        raise ValueError(f"reference format {data.get('format')!r}, expected {FORMAT}")
    if data["provenance"]["model"] != pair.identity:
        raise ValueError("the stored reference was made for another pair; regenerate it whole")
    from cactus_core.engine.loading.prompts import builtin_prompts

    prompts = tuple(builtin_prompts()[: int(data["provenance"]["prompts"])])
    missing = missing_settings(data)
    order = {s.id: i for i, s in enumerate(reference_settings())}
    added: list[str] = []
    for part, config in zip(data["sweeps"], reference_configs(prompts), strict=True):
        todo = missing[float(part["top_p"])]
        # One top-p at a time, where a run must fit a time slot (each part is about an hour).
        only = os.environ.get("CACTUS_REFERENCE_TOP_P")
        if only is not None and abs(float(only) - float(part["top_p"])) > 1e-9:
            continue
        if not todo:
            continue
        config = replace(config, settings=todo)
        start = time.perf_counter()
        result = run_sweep(pair, config, cache, on_progress)
        body = json.loads(result.to_json(indent=None))
        new_rows = [r for r in body["rows"] if r["setting"] in {s.id for s in todo}]
        rows = part["rows"] + new_rows
        # The verifier-only row first, then the rules' grids in reference_settings' order.
        part["rows"] = sorted(rows, key=lambda r: order.get(r["setting"], -1))
        part["own_curves"] += _own_curves(result, config.sampling.k)
        part["positions"] += sum(r.scored for s in result.settings for r in s.prompts)
        part["wall_s"] += time.perf_counter() - start
        added += [f"{s.id}@top_p={part['top_p']:g}" for s in todo]
    if added:
        data["provenance"].setdefault("added", []).append(
            {
                "settings": added,
                "command": command,
                "commit": _commit(),
                "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            }
        )
    return data


def read_reference_data(path: Path | str | None = None) -> dict[str, Any]:
    """The stored reference as the dict `write_reference` wrote."""
    path = Path(path) if path is not None else REFERENCE_FILE
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _own_curves(result: SweepResult, k: int) -> list[dict[str, Any]]:
    out = []
    for res in result.settings:
        curve = res.own_curve(k)
        if curve is None:
            continue
        spec = rule_class(res.setting.rule).swept()
        value = (
            None if spec is None else float(dict(res.setting.params).get(spec.name, spec.default))
        )
        out.append({"setting": res.setting.id, "value": value, "curve": curve.to_dict()})
    return out


def _limit_dict(result: SweepResult) -> dict[str, Any] | None:
    curve = result.pooled_limit()
    if curve is None:
        return None
    return {
        "mean_kl": curve.mean_kl.tolist(),
        "mean_acceptance": curve.mean_acceptance.tolist(),
        "count": curve.count,
    }


def write_reference(data: dict[str, Any], path: Path | str | None = None) -> Path:
    """Store the reference as gzipped JSON (deterministic bytes: no timestamp in the gzip).

    Written to a temporary file beside it and moved into place, so an interrupted write leaves
    the old file whole instead of a truncated one that every page would read. The file gets the
    mode any new file gets (0666 less the umask), not a temporary file's 0600: a server
    running as another user reads it."""
    path = Path(path) if path is not None else REFERENCE_FILE
    raw = json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(gzip.compress(raw, mtime=0))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def confirm_config(ref: Reference, part: ReferenceSweep, setting: Setting) -> SweepConfig:
    """A one-setting sweep on the reference's prompts, seeds and sampling: what confirms an
    answer read off the reference curve."""
    from cactus_core.engine.loading.prompts import builtin_prompts

    n = int(ref.provenance["prompts"])
    return SweepConfig(
        prompts=tuple(builtin_prompts()[:n]),
        settings=(setting,),
        sampling=replace(REFERENCE_SAMPLING, top_p=part.top_p, seed=int(ref.provenance["seed"])),
        max_new_tokens=int(ref.provenance["max_new_tokens"]),
        chunk_size=n,
        limit=False,
    )
