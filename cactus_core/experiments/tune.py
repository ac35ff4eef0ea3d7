"""The tuner: the parameter of a rule whose mean emitted KL per token meets a budget, and holds
when it is measured.

An estimate (a sweep's measured curve, or the shipped reference's) gives the first guess. Then
real runs refine it (`refine`): each step runs one parameter value on the chosen prompts and
seeds, and a value fits when the upper end of its measured KL's 95% interval is within the
budget, so the answer is what a run measured, not an interpolation. The steps keep a bracket
(the largest value that fitted, the smallest that did not) and move by a secant step on
log(KL) against log(value) (KL grows like a power of delta, about delta^0.35 on the embedded
pair) or, when that leaves the bracket, by halving it (on a log scale for log-scale
parameters). They stop when the bracket is narrow, when a fitting run uses most of the budget,
or after `max_runs` runs, and the result says plainly which of these it is, including the two
answers a budget can have at the ends: every value up to the top of the parameter's range fits
(`edge`), or none of the values tried does (`cannot`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from cactus_core.experiments.frontier import Estimate, interpolate_param_for_budget
from cactus_core.experiments.sweep import (
    Progress,
    SettingResult,
    SweepResult,
    run_sweep,
)
from cactus_core.experiments.sweep_cache import SweepCache
from cactus_core.experiments.sweep_config import Setting, SweepConfig, settings_from_grids
from cactus_core.maths.rules import DEFAULT_RULE, RULES, Param, rule_class

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair
    from cactus_core.experiments.estimate import EstimatedCurve
    from cactus_core.experiments.reference import Reference, ReferenceSweep

# Rules whose swept parameter trades emitted KL for acceptance monotonically.
TUNABLE_RULES: tuple[str, ...] = tuple(name for name, cls in RULES.items() if cls.tunable)

DEFAULT_MAX_RUNS = 6
# A fitting run whose KL interval reaches this share of the budget is close enough: the next
# value up would buy little acceptance for another whole run.
CLOSE_ENOUGH = 0.85
# A bracket (fitting value, failing value) this narrow ends the search: as a ratio for
# log-scale parameters, as a share of the widget range otherwise.
NARROW_RATIO = 1.25
NARROW_SHARE = 0.02
# The secant aims the next run's mean KL this far inside the budget, scaled by the last run's
# interval (mean ÷ upper bound), so that its upper bound lands inside.
AIM = 0.95
# A log-scale parameter's smallest positive value worth a run: below it the rule is lossless
# to within the measurement, and `cannot` says so.
LOG_FLOOR_SHARE = 1e-6
# KL ~ value^POWER where two runs do not yet say better (measured on the embedded pair).
DEFAULT_POWER = 0.35

STATUSES = ("met", "edge", "cannot", "runs", "cancelled")


@dataclass(frozen=True)
class TuneStep:
    """One confirmation run of the refinement (or a measured point it started from)."""

    value: float
    kl: Estimate  # mean emitted KL per token with its 95% interval over prompts
    tokens_per_call: Estimate
    speedup: Estimate
    source: str = "run"  # "run": measured now; "sweep"/"reference": measured before

    def fits(self, budget: float) -> bool:
        return math.isfinite(self.kl.hi) and self.kl.hi <= budget

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "emitted_kl": self.kl.to_dict(),
            "tokens_per_call": self.tokens_per_call.to_dict(),
            "speedup": self.speedup.to_dict(),
            "source": self.source,
        }

    @classmethod
    def of(cls, value: float, res: SettingResult, source: str = "run") -> TuneStep:
        return cls(
            float(value),
            res.estimate("emitted_kl"),
            res.estimate("tokens_per_call"),
            res.estimate("speedup"),
            source,
        )


@dataclass
class TuneResult:
    """The parameter that meets a KL budget, how the refinement got there, and why it stopped.

    status: "met" (a run fitted and the bracket is narrow or the budget nearly used), "edge"
    (the top of the parameter's range fitted: larger values were not tried), "cannot" (no
    value tried fitted, down to the smallest one worth a run), "runs" (max_runs spent; the best
    fitting value so far) or "cancelled"."""

    rule: str
    param: str
    value: float | None  # None: no value fitted
    kl_budget: float
    status: str
    message: str
    first_guess: float
    steps: list[TuneStep] = field(default_factory=list)
    sampling: dict[str, Any] = field(default_factory=dict)

    @property
    def chosen(self) -> TuneStep | None:
        for s in self.steps:
            if self.value is not None and s.value == self.value:
                return s
        return None

    @property
    def measured_kl(self) -> Estimate:
        c = self.chosen
        return c.kl if c is not None else Estimate(math.nan, math.nan, math.nan, 0)

    @property
    def tokens_per_call(self) -> Estimate:
        c = self.chosen
        return c.tokens_per_call if c is not None else Estimate(math.nan, math.nan, math.nan, 0)

    @property
    def confirmed(self) -> bool:
        """The answer comes from a run whose KL interval is within the budget."""
        return self.value is not None and self.status in ("met", "edge", "runs")

    @property
    def runs(self) -> list[TuneStep]:
        return [s for s in self.steps if s.source == "run"]

    @property
    def tries(self) -> list[tuple[float, float]]:
        """(value, measured mean KL) of each run, in order."""
        return [(s.value, s.kl.mean) for s in self.runs]

    @property
    def setting(self) -> Setting:
        if self.value is None:
            raise ValueError(f"no {self.rule} setting met the budget: {self.message}")
        return Setting.of(self.rule, **{self.param: self.value})

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            self.param: self.value,
            "kl_budget": self.kl_budget,
            "status": self.status,
            "message": self.message,
            "first_guess": self.first_guess,
            "measured_emitted_kl": self.measured_kl.to_dict(),
            "tokens_per_call": self.tokens_per_call.to_dict(),
            "confirmed": self.confirmed,
            "steps": [s.to_dict() for s in self.steps],
            "sampling": self.sampling,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def cli_flags(self) -> str:
        """The flags that reproduce this setting with `python -m cactus_core generate`."""
        if self.value is None:
            raise ValueError(f"no {self.rule} setting met the budget: {self.message}")
        s = self.sampling
        flags = [f"--rule {self.rule}", f"--{self.param.replace('_', '-')} {self.value:.6g}"]
        if s:
            flags += [
                f"--k {s['k']}",
                f"--temperature {s['temperature']:g}",
                f"--top-k {s['top_k']}",
                f"--top-p {s['top_p']:g}",
            ]
        return " ".join(flags)


# ------------------------------------------------------------------------------ refinement


def _axis(spec: Param) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """(to, back): the scale the parameter is searched on (log for log-scale parameters)."""
    if spec.log:
        return math.log, math.exp
    return (lambda x: x), (lambda x: x)


def _floor(spec: Param) -> float:
    return max(spec.low, spec.ui[1] * LOG_FLOOR_SHARE) if spec.log else spec.low


def _narrow(spec: Param, lo: float, hi: float) -> bool:
    if spec.log and lo > 0:
        return hi / lo <= NARROW_RATIO
    return hi - lo <= NARROW_SHARE * (spec.ui[1] - spec.ui[0])


def _secant(steps: Sequence[TuneStep], budget: float, spec: Param) -> float | None:
    """The value whose mean KL should be budget·AIM·(mean ÷ upper bound) on a power law
    KL = a·value^b through the last two runs with positive KL and value (one run: b =
    DEFAULT_POWER); None when no run has both."""
    pts = [s for s in steps if s.value > 0 and s.kl.mean > 0 and math.isfinite(s.kl.hi)]
    if not pts:
        return None
    last = pts[-1]
    power = DEFAULT_POWER if spec.log else 1.0
    others = [s for s in pts[:-1] if s.value != last.value]
    if others:
        prev = others[-1]
        slope = math.log(last.kl.mean / prev.kl.mean) / math.log(last.value / prev.value)
        if math.isfinite(slope):
            power = min(max(slope, 0.1), 2.0)
    width = last.kl.mean / last.kl.hi if last.kl.hi > 0 else 1.0
    target = budget * AIM * width
    return last.value * (target / last.kl.mean) ** (1.0 / power)


def refine(
    rule: str,
    kl_budget: float,
    first_guess: float,
    run: Callable[[float], TuneStep],
    measured: Sequence[TuneStep] = (),
    max_runs: int = DEFAULT_MAX_RUNS,
    on_step: Callable[[TuneStep, int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    sampling: Mapping[str, Any] | None = None,
) -> TuneResult:
    """Refine first_guess by real runs until a run's KL upper bound fits kl_budget (see the
    module docstring). run(value) measures one value; measured are points known before (a
    sweep's, the reference's: on the same prompts and seeds) that seed the bracket. on_step(step,
    i, max_runs) is called after each run; should_stop() is asked before each."""
    if rule not in TUNABLE_RULES:
        raise ValueError(f"the tuner works on {', '.join(TUNABLE_RULES)}; got {rule!r}")
    if not (math.isfinite(kl_budget) and kl_budget >= 0):
        raise ValueError(f"KL budget must be a number >= 0, got {kl_budget}")
    if max_runs < 1:
        raise ValueError(f"max_runs must be >= 1, got {max_runs}")
    spec = rule_class(rule).swept()
    assert spec is not None  # every tunable rule has a parameter
    top, floor = float(spec.ui[1]), _floor(spec)
    to, back = _axis(spec)
    steps: list[TuneStep] = list(measured)

    def clamp(v: float) -> float:
        v = min(max(v, floor), top)
        return float(round(v)) if spec.integer else float(f"{v:.4g}")

    def result(status: str, message: str, value: float | None) -> TuneResult:
        return TuneResult(
            rule, spec.name, value, kl_budget, status, message, first_guess, steps,
            dict(sampling or {}),
        )  # fmt: skip

    def bracket() -> tuple[TuneStep | None, TuneStep | None]:
        fit = [s for s in steps if s.fits(kl_budget)]
        lo = max(fit, key=lambda s: s.value) if fit else None
        above = [s for s in steps if not s.fits(kl_budget) and (lo is None or s.value > lo.value)]
        hi = min(above, key=lambda s: s.value) if above else None
        return lo, hi

    def label(v: float) -> str:
        return spec.show(v)

    value = clamp(first_guess)
    runs = 0
    while True:
        lo, hi = bracket()
        done = lo is not None and lo.source == "run"
        if done and lo.value >= top:
            return result(
                "edge",
                f"{label(lo.value)} is the top of the range ({spec.symbol} up to {top:g}) and "
                f"fits: its measured KL is at most {lo.kl.hi:.4g} ≤ {kl_budget:g}. Larger "
                "values were not tried; the budget does not bind within the range.",
                lo.value,
            )
        if done and (
            lo.kl.hi >= CLOSE_ENOUGH * kl_budget or (hi and _narrow(spec, lo.value, hi.value))
        ):
            if lo.kl.hi >= CLOSE_ENOUGH * kl_budget:
                why = f"uses {lo.kl.hi / kl_budget:.0%} of the budget at its upper bound"
            else:
                assert hi is not None
                why = f"the next value up, {label(hi.value)}, measured up to {hi.kl.hi:.4g}"
            return result(
                "met",
                f"{label(lo.value)} fits: measured KL {lo.kl.mean:.4g} (95% interval up to "
                f"{lo.kl.hi:.4g}) ≤ {kl_budget:g} after {runs} run{'s' * (runs != 1)}; {why}.",
                lo.value,
            )
        if hi is not None and hi.value <= floor and lo is None:
            return result(
                "cannot",
                f"no {spec.symbol} fits: even {label(hi.value)} measured {hi.kl.hi:.4g} at its "
                f"upper bound, over {kl_budget:g}. The budget is below what this rule can hold "
                "on these prompts; a larger budget or more prompts (a narrower interval) may.",
                None,
            )
        if runs >= max_runs:
            if lo is not None and lo.source == "run":
                return result(
                    "runs",
                    f"{label(lo.value)} fits (measured KL up to {lo.kl.hi:.4g} ≤ {kl_budget:g}), "
                    f"the largest that fitted in {runs} runs; a larger value may fit too.",
                    lo.value,
                )
            if lo is not None:
                return result(
                    "runs",
                    f"{label(lo.value)} fitted when it was measured before ({lo.source}); none "
                    f"of the {runs} runs fitted.",
                    lo.value,
                )
            return result(
                "cannot",
                f"none of the {runs} runs fitted the budget of {kl_budget:g}; the smallest "
                f"tried, {label(min(s.value for s in steps))}, was still over it.",
                None,
            )
        if should_stop is not None and should_stop():
            best = lo.value if lo is not None else None
            return result("cancelled", f"cancelled after {runs} runs.", best)
        # The next value: the secant's, if it falls strictly inside the bracket; else a step
        # toward the open end, or the bracket's middle (on the parameter's own scale).
        known = {s.value for s in steps if s.source == "run"}
        if runs > 0:
            low_end = lo.value if lo is not None else spec.low
            high_end = hi.value if hi is not None else top
            guess = _secant(steps, kl_budget, spec)
            if guess is not None:
                guess = clamp(guess)
            if guess is None or not (low_end < guess < high_end) or guess in known:
                if hi is None:
                    guess = top  # everything run so far fits
                elif lo is None:
                    guess = hi.value / 10 if spec.log else (spec.low + hi.value) / 2
                else:
                    guess = back(0.5 * (to(max(low_end, floor)) + to(high_end)))
            value = clamp(guess)
        if value in known:
            # Rounding landed on a value already run: the bracket cannot shrink further.
            if lo is not None:
                return result(
                    "met",
                    f"{label(lo.value)} fits (measured KL up to {lo.kl.hi:.4g} ≤ {kl_budget:g}); "
                    "the values between it and the next one up round to values already run.",
                    lo.value,
                )
            return result("cannot", f"no {spec.symbol} fits down to {label(value)}.", None)
        step = run(value)
        steps.append(step)
        runs += 1
        if on_step is not None:
            on_step(step, runs, max_runs)


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
    return {k: s[k] for k in ("k", "temperature", "top_k", "top_p", "max_new_tokens", "seed")}


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

    @property
    def at_bottom(self) -> bool:
        return self.kl > 0 and not self.at_top and self.value <= 0


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
            raise ValueError(f"the reference has no measured {rule} points")
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
    from cactus_core.experiments.reference import confirm_config

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
        float(row["value"]), est("emitted_kl"), est("tokens_per_call"), est("speedup"), "reference"
    )
