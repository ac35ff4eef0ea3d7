"""The tuner's entry points: the first guess (from a sweep's measured points or the shipped
reference's estimated curve) and the runs that refine it on the chosen prompts
(`tune_refine.refine`: the search, its stopping rules and its answers)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from cactus_core.experiments.estimates.frontier import Estimate, interpolate_param_for_budget
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import Setting, SweepConfig, settings_from_grids
from cactus_core.experiments.sweeps.reference import not_in_reference
from cactus_core.experiments.sweeps.run import Progress, SweepResult, run_sweep
from cactus_core.experiments.tuning.refine import (
    DEFAULT_MAX_RUNS,
    STATUSES,
    TUNABLE_RULES,
    TuneResult,
    TuneStep,
    refine,
)
from cactus_core.maths.rules import DEFAULT_RULE, rule_class

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair
    from cactus_core.experiments.estimates.curves import EstimatedCurve
    from cactus_core.experiments.sweeps.reference import Reference, ReferenceSweep

__all__ = [
    "DEFAULT_MAX_RUNS",
    "STATUSES",
    "TUNABLE_RULES",
    "FirstGuess",
    "TuneResult",
    "TuneStep",
    "first_guess",
    "reference_tune",
    "refine",
    "tune",
]


# ------------------------------------------------------------------------------ first guesses


def guess_from_points(values: Sequence[float], kls: Sequence[float], kl_budget: float) -> float:
    """The first guess: the largest value whose measured KL, interpolated between measured
    points on the parameter's scale, stays within the budget (`interpolate_param_for_budget`)."""
    return interpolate_param_for_budget(values, kls, kl_budget)


def guess_from_curve(curve: EstimatedCurve, kl_budget: float) -> float:
    """The first guess read off an estimated curve: the largest value whose KL per emitted
    token, read the way the curve reads itself (`EstimatedCurve.at`, log-spaced parameters in
    log space, made monotone by a running maximum), stays within the budget."""
    xs = np.asarray(curve.values, dtype=np.float64)
    ys = np.asarray(curve.kl_token, dtype=np.float64)
    keep = np.isfinite(xs) & ~np.isnan(ys)
    xs, ys = xs[keep], ys[keep]
    if xs.size == 0:
        raise ValueError(f"the estimated {curve.rule} curve has no points")
    order = np.argsort(xs)
    xs, ys = xs[order], np.maximum.accumulate(ys[order])
    if ys[0] > kl_budget:
        return float(xs[0])
    if ys[-1] <= kl_budget:
        return float(xs[-1])
    j = int(np.argmax(ys > kl_budget))  # first point over budget; j >= 1
    lo, hi = float(xs[j - 1]), float(xs[j])
    for _ in range(60):  # bisection between the two points, on the curve's own reading
        mid = math.sqrt(lo * hi) if lo > 0 else 0.5 * (lo + hi)
        if curve.at(mid, "kl_token") <= kl_budget:
            lo = mid
        else:
            hi = mid
    return lo


def _sampling_of(config: SweepConfig) -> dict[str, Any]:
    s = config.decoding()
    keys = ("k", "temperature", "top_k", "top_p", "max_new_tokens", "seed", "tree")
    return {k: s[k] for k in keys if k in s}


def _runner(
    pair: ModelPair,
    config: SweepConfig,
    rule: str,
    param: str,
    cache: SweepCache | None,
    on_progress: Callable[[Progress], None] | None = None,
) -> Callable[[float], TuneStep]:
    """run(value): one setting on config's prompts and seeds (the verifier-only baseline
    comes from the cache after the first run)."""

    def run(value: float) -> TuneStep:
        v = int(value) if rule_class(rule).swept().integer else float(value)  # type: ignore[union-attr]
        setting = Setting.of(rule, **{param: v})
        res = run_sweep(pair, replace(config, settings=(setting,)), cache, on_progress)
        return TuneStep.of(value, res.settings[0])

    return run


def tune(
    pair: ModelPair,
    config: SweepConfig,
    kl_budget: float,
    rule: str = DEFAULT_RULE,
    sweep: SweepResult | None = None,
    cache: SweepCache | None = None,
    max_runs: int = DEFAULT_MAX_RUNS,
    on_progress: Callable[[Progress], None] | None = None,
    on_step: Callable[[TuneStep, int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> TuneResult:
    """The rule's parameter whose measured emitted KL per token meets kl_budget on config's
    prompts and seeds: the first guess interpolated from `sweep` (or from a sweep of the
    rule's grid), then refined by runs (`refine`)."""
    if rule not in TUNABLE_RULES:
        raise ValueError(f"the tuner works on {', '.join(TUNABLE_RULES)}; got {rule!r}")
    if not (math.isfinite(kl_budget) and kl_budget >= 0):
        raise ValueError(f"KL budget must be a number >= 0, got {kl_budget}")
    swept = rule_class(rule).swept()
    assert swept is not None
    if sweep is None:
        own = [s for s in config.settings if s.rule == rule]
        if not own:
            own = settings_from_grids({rule: swept.grid})
        sweep = run_sweep(pair, replace(config, settings=tuple(own)), cache, on_progress)
    measured = [
        TuneStep.of(float(s.setting.value), s, "sweep")
        for s in sweep.settings
        if s.setting.rule == rule
    ]
    if not measured:
        raise ValueError(f"the sweep has no {rule} settings to interpolate")
    # The guess aims the mean below the budget by the sweep's typical interval width.
    first = guess_from_points([m.value for m in measured], [m.kl.hi for m in measured], kl_budget)
    return refine(
        rule,
        kl_budget,
        first,
        _runner(pair, config, rule, swept.name, cache),
        measured,
        max_runs,
        on_step,
        should_stop,
        _sampling_of(config),
    )


@dataclass(frozen=True)
class FirstGuess:
    """The estimate's answer for a budget, before any run: the largest value whose estimated
    KL per emitted token stays within the budget."""

    rule: str
    param: str
    value: float
    kl: float  # the estimate's KL per emitted token at that value
    tokens_per_call: float
    source: str  # "estimated curve" or "measured points" (interpolated between them)
    at_top: bool  # the whole range fits by the estimate


def first_guess(part: ReferenceSweep, rule: str, kl_budget: float) -> FirstGuess:
    """The reference's answer for a budget: read off the rule's estimated curve (every value
    of the parameter, from the positions of the reference's own runs), or interpolated between
    its measured points where it has no curve. ValueError for a rule without a parameter or
    without reference points."""
    spec = rule_class(rule).swept()
    if spec is None:
        raise ValueError(f"{rule} has no parameter to tune")
    if not (math.isfinite(kl_budget) and kl_budget >= 0):
        raise ValueError(f"KL budget must be a number >= 0, got {kl_budget}")
    curve = None if part.estimate is None else part.estimate.curves.get(rule)
    if curve is not None:
        value = guess_from_curve(curve, kl_budget)
        kl, tpc = curve.at(value, "kl_token"), curve.at(value, "tokens_per_call")
        source = "estimated curve"
        top = float(np.nanmax(curve.values))
    else:
        pts = sorted(
            (float(r["value"]), float(r["emitted_kl"]), float(r["tokens_per_call"]))
            for r in part.rule_rows(rule)
            if r.get("emitted_kl") is not None and r.get("tokens_per_call") is not None
        )
        if not pts:
            raise ValueError(not_in_reference(rule))
        xs = [v for v, _, _ in pts]
        value = guess_from_points(xs, [k for _, k, _ in pts], kl_budget)
        kl = float(np.interp(value, xs, [k for _, k, _ in pts]))
        tpc = float(np.interp(value, xs, [t for _, _, t in pts]))
        source, top = "measured points", max(xs)
    return FirstGuess(rule, spec.name, value, kl, tpc, source, value >= top and kl <= kl_budget)


def reference_tune(
    pair: ModelPair,
    ref: Reference,
    part: ReferenceSweep,
    rule: str,
    kl_budget: float,
    cache: SweepCache | None = None,
    max_runs: int = DEFAULT_MAX_RUNS,
    on_step: Callable[[TuneStep, int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> TuneResult:
    """The tuner on the reference's prompts, seeds and sampling: the first guess from the
    rule's estimated curve (or its measured points), refined by runs on the reference's
    prompts (`reference.confirm_config`)."""
    from cactus_core.experiments.sweeps.reference import confirm_config

    spec = rule_class(rule).swept()
    if spec is None or rule not in TUNABLE_RULES:
        raise ValueError(f"the tuner works on {', '.join(TUNABLE_RULES)}; got {rule!r}")
    rows = [
        r
        for r in part.rule_rows(rule)
        if r.get("emitted_kl") is not None and r.get("emitted_kl_hi") is not None
    ]
    first = first_guess(part, rule, kl_budget).value
    config = confirm_config(ref, part, Setting.of(rule))
    measured = [_reference_step(r) for r in rows]
    return refine(
        rule,
        kl_budget,
        first,
        _runner(pair, config, rule, spec.name, cache),
        measured,
        max_runs,
        on_step,
        should_stop,
        _sampling_of(config),
    )


def _reference_step(row: Mapping[str, Any]) -> TuneStep:
    def est(name: str) -> Estimate:
        def num(key: str) -> float:
            v = row.get(key)
            return math.nan if v is None else float(v)

        return Estimate(num(name), num(f"{name}_lo"), num(f"{name}_hi"), int(row["prompts"]))

    return TuneStep(
        float(row["value"]),
        est("emitted_kl"),
        est("tokens_per_call"),
        "reference",
        tuple(row.get("acceptance_by_position") or ()),
        tuple(row.get("position_reached") or ()),
    )
