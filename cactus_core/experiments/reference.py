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
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cactus_core.experiments.estimate import (
    EstimatedCurve,
    EstimatedFrontier,
    OwnRun,
    from_own_runs,
)
from cactus_core.experiments.sweep import Progress, SweepResult, run_sweep
from cactus_core.experiments.sweep_cache import SweepCache
from cactus_core.experiments.sweep_config import Setting, SweepConfig
from cactus_core.maths.limit import LimitCurve
from cactus_core.maths.rules import RULES, rule_class
from cactus_core.maths.sampling import SamplingSettings

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

REFERENCE_FILE = Path(__file__).resolve().parents[1] / "data" / "reference_sweep.json.gz"
REFERENCE_COMMAND = "python -m cactus_core sweep --reference"
REFERENCE_TOP_P: tuple[float, ...] = (1.0, 0.95)
REFERENCE_SAMPLING = SamplingSettings(k=4, temperature=0.7, top_k=0, top_p=1.0, seed=0)
REFERENCE_MAX_NEW_TOKENS = 64
MIN_SETTINGS_PER_RULE = 6
FORMAT = 2  # 2: every setting's own estimated curve replaces one sps run's estimate


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


@dataclass(frozen=True)
class Reference:
    provenance: dict[str, Any]
    sweeps: dict[float, ReferenceSweep]

    @property
    def model(self) -> str:
        return str(self.provenance["model"])

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
        return (
            f"Reference sweep shipped with the lab, for the embedded pair: {p['prompts']} "
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
        raise ValueError(f"no reference sweep at {path}; run `{REFERENCE_COMMAND}`") from None
    return _load(str(path), stamp)


@functools.lru_cache(maxsize=2)
def _load(path: str, _stamp: int) -> Reference:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read the reference sweep {path}: {err}") from None
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: reference format {data.get('format')!r}, expected {FORMAT}")
    return Reference(
        provenance=data["provenance"],
        sweeps={float(s["top_p"]): _sweep_from_dict(s) for s in data["sweeps"]},
    )


def _sweep_from_dict(s: dict[str, Any]) -> ReferenceSweep:
    lim = None if s.get("limit") is None else _limit(s["limit"])
    runs: dict[str, list[OwnRun]] = {}
    for run in s["own_curves"]:
        curve = EstimatedCurve.from_dict(run["curve"])
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
    root = Path(__file__).resolve().parents[2]
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
) -> dict[str, Any]:
    """Run the reference sweeps (cached chunk by chunk); the dict that `write_reference`
    stores."""
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
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "prompts": len(prompts),
        "max_new_tokens": REFERENCE_MAX_NEW_TOKENS,
        "temperature": s.temperature,
        "k": s.k,
        "top_k": s.top_k,
        "seed": s.seed,
    }
    return {"format": FORMAT, "provenance": provenance, "sweeps": sweeps}


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
    """Store the reference as gzipped JSON (deterministic bytes: no timestamp in the gzip)."""
    path = Path(path) if path is not None else REFERENCE_FILE
    raw = json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw, mtime=0))
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
