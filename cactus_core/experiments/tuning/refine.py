"""The tuner: the parameter of a rule whose mean emitted KL per token meets a budget, and holds
when it is measured.

An estimate (a sweep's measured curve, or the shipped reference's) gives the first guess. Then
real runs refine it (`refine`): each step runs one parameter value on the chosen prompts and
seeds, and a value fits when the upper end of its measured KL's 95% interval is within the
budget with one more half-width to spare (`TuneStep.guarded`: room for a re-measurement on
fresh seeds), so the answer is what a run measured, not an interpolation. The steps keep a bracket
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.experiments.estimates.frontier import Estimate
from cactus_core.experiments.sweeps.config import Setting
from cactus_core.maths.rules import RULES, Param, Rule, make_rule, rule_class

if TYPE_CHECKING:
    from cactus_core.experiments.sweeps.run import SettingResult

# Rules whose swept parameter trades emitted KL for acceptance monotonically.
TUNABLE_RULES: tuple[str, ...] = tuple(name for name, cls in RULES.items() if cls.caps.tunable)

DEFAULT_MAX_RUNS = 6
# Half-widths of room left above a run's upper bound for a re-measurement on fresh seeds
# (`TuneStep.guarded`).
FRESH_MARGIN = 1.0
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
    source: str = "run"  # "run": measured now; "sweep"/"reference": measured before
    # per draft position: the conditional acceptance and the drafts that reached it (the
    # predicted speedup, `k_tuner.row_speedup`, is made from these)
    acceptance_by_position: tuple[float | None, ...] = ()
    position_reached: tuple[int, ...] = ()

    @property
    def guarded(self) -> float:
        """The upper bound plus one more half-width of the interval: a fresh measurement's
        mean may sit a half-width above this one's, and its own interval reaches another
        half-width past that, so this is what must stay within the budget for the answer to
        hold on fresh seeds."""
        return self.kl.hi + FRESH_MARGIN * (self.kl.hi - self.kl.mean)

    def fits(self, budget: float) -> bool:
        return math.isfinite(self.guarded) and self.guarded <= budget

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "emitted_kl": self.kl.to_dict(),
            "tokens_per_call": self.tokens_per_call.to_dict(),
            "source": self.source,
            "acceptance_by_position": list(self.acceptance_by_position),
            "position_reached": list(self.position_reached),
        }

    @classmethod
    def of(cls, value: float, res: SettingResult, source: str = "run") -> TuneStep:
        pos = res.positions
        return cls(
            float(value),
            res.estimate("emitted_kl"),
            res.estimate("tokens_per_call"),
            source,
            tuple(pos.conditional()),
            pos.reached,
        )

    def row(self) -> dict[str, Any]:
        """The step as a sweep row's per-position fields (what `k_tuner.row_speedup` reads)."""
        return {
            "acceptance_by_position": list(self.acceptance_by_position),
            "position_reached": list(self.position_reached),
        }


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

    def answer(self) -> Rule:
        """The answer as the rule every export writes (the CLI flags, "Use this setting"):
        the measured value to six significant digits, so all of them name one number."""
        if self.value is None:
            raise ValueError(f"no {self.rule} setting met the budget: {self.message}")
        spec = rule_class(self.rule).swept()
        integer = spec is not None and spec.name == self.param and spec.integer
        value = round(self.value) if integer else float(f"{self.value:.6g}")
        return make_rule(self.rule, **{self.param: value})

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
        value = self.answer().params[self.param]
        s = self.sampling
        flags = [f"--rule {self.rule}", f"--{self.param.replace('_', '-')} {value:g}"]
        if s:
            flags += [
                f"--k {s['k']}",
                f"--temperature {s['temperature']:g}",
                f"--top-k {s['top_k']}",
                f"--top-p {s['top_p']:g}",
            ]
        if s.get("tree"):
            flags += TreeSettings.from_dict(s["tree"]).cli_flags()
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
    width = last.kl.mean / last.guarded if last.guarded > 0 else 1.0
    target = budget * AIM * width
    return last.value * (target / last.kl.mean) ** (1.0 / power)


class _Search:
    """The refinement's state: the measured points, the bracket, and the verdicts."""

    def __init__(self, rule: str, budget: float, first: float, measured: Sequence[TuneStep],
                 sampling: Mapping[str, Any] | None) -> None:  # fmt: skip
        spec = rule_class(rule).swept()
        assert spec is not None  # every tunable rule has a parameter
        self.rule, self.spec, self.budget, self.first = rule, spec, budget, first
        self.top, self.floor = float(spec.ui[1]), _floor(spec)
        self.steps: list[TuneStep] = list(measured)
        self.sampling = dict(sampling or {})
        self.runs = 0

    def clamp(self, v: float) -> float:
        v = min(max(v, self.floor), self.top)
        return float(round(v)) if self.spec.integer else float(f"{v:.4g}")

    def result(self, status: str, message: str, value: float | None) -> TuneResult:
        return TuneResult(
            self.rule, self.spec.name, value, self.budget, status, message, self.first,
            self.steps, self.sampling,
        )  # fmt: skip

    def bracket(self) -> tuple[TuneStep | None, TuneStep | None]:
        """(the largest value that fitted, the smallest value above it that did not)."""
        fit = [s for s in self.steps if s.fits(self.budget)]
        lo = max(fit, key=lambda s: s.value) if fit else None
        above = [
            s for s in self.steps if not s.fits(self.budget) and (lo is None or s.value > lo.value)
        ]
        hi = min(above, key=lambda s: s.value) if above else None
        return lo, hi

    def verdict(self, max_runs: int) -> TuneResult | None:
        """The answer, if the search is over; None to run again."""
        lo, hi = self.bracket()
        show, b = self.spec.show, self.budget
        if lo is not None and lo.source == "run":
            if lo.value >= self.top:
                return self.result(
                    "edge",
                    f"{show(lo.value)} is the top of the range ({self.spec.symbol} up to "
                    f"{self.top:g}) and fits: its measured KL is at most {lo.kl.hi:.4g} ≤ {b:g}. "
                    "Larger values were not tried; the budget does not bind within the range.",
                    lo.value,
                )
            why = None
            if lo.guarded >= CLOSE_ENOUGH * b:
                why = f"its upper bound with the fresh-seed margin uses {lo.guarded / b:.0%} of it"
            elif hi is not None and _narrow(self.spec, lo.value, hi.value):
                why = f"the next value up, {show(hi.value)}, measured up to {hi.kl.hi:.4g}"
            if why is not None:
                n = self.runs
                return self.result(
                    "met",
                    f"{show(lo.value)} fits: measured KL {lo.kl.mean:.4g} (95% interval up to "
                    f"{lo.kl.hi:.4g}) ≤ {b:g} after {n} run{'s' * (n != 1)}; {why}.",
                    lo.value,
                )
        if hi is not None and hi.value <= self.floor and lo is None:
            return self.result(
                "cannot",
                f"no {self.spec.symbol} fits: even {show(hi.value)} measured {hi.kl.hi:.4g} at "
                f"its upper bound, over {b:g}. The budget is below what this rule can hold on "
                "these prompts; a larger budget or more prompts (a narrower interval) may.",
                None,
            )
        return self.out_of_runs(lo) if self.runs >= max_runs else None

    def out_of_runs(self, lo: TuneStep | None) -> TuneResult:
        show, n = self.spec.show, self.runs
        if lo is not None and lo.source == "run":
            return self.result(
                "runs",
                f"{show(lo.value)} fits (measured KL up to {lo.kl.hi:.4g} ≤ {self.budget:g}), "
                f"the largest that fitted in {n} runs; a larger value may fit too.",
                lo.value,
            )
        if lo is not None:
            return self.result(
                "runs",
                f"{show(lo.value)} fitted when it was measured before ({lo.source}); none of "
                f"the {n} runs fitted.",
                lo.value,
            )
        smallest = show(min(s.value for s in self.steps))
        return self.result(
            "cannot",
            f"none of the {n} runs fitted the budget of {self.budget:g}; the smallest tried, "
            f"{smallest}, was still over it.",
            None,
        )

    def next_value(self) -> float:
        """The secant's value, if it falls strictly inside the bracket and was not run; else
        a step toward the open end, or the bracket's middle (on the parameter's own scale)."""
        lo, hi = self.bracket()
        spec, to, back = self.spec, *_axis(self.spec)
        known = {s.value for s in self.steps if s.source == "run"}
        low_end = lo.value if lo is not None else spec.low
        high_end = hi.value if hi is not None else self.top
        guess = _secant(self.steps, self.budget, spec)
        if guess is not None:
            guess = self.clamp(guess)
        if guess is None or not (low_end < guess < high_end) or guess in known:
            if hi is None:
                guess = self.top  # everything run so far fits
            elif lo is None:
                guess = hi.value / 10 if spec.log else (spec.low + hi.value) / 2
            else:
                guess = back(0.5 * (to(max(low_end, self.floor)) + to(high_end)))
        return self.clamp(guess)

    def stuck(self, value: float) -> TuneResult:
        """Rounding landed on a value already run: the bracket cannot shrink further."""
        lo, _ = self.bracket()
        if lo is not None:
            return self.result(
                "met",
                f"{self.spec.show(lo.value)} fits (measured KL up to {lo.kl.hi:.4g} ≤ "
                f"{self.budget:g}); the values between it and the next one up round to values "
                "already run.",
                lo.value,
            )
        return self.result(
            "cannot", f"no {self.spec.symbol} fits down to {self.spec.show(value)}.", None
        )


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
    search = _Search(rule, kl_budget, first_guess, measured, sampling)
    value = search.clamp(first_guess)
    while True:
        done = search.verdict(max_runs)
        if done is not None:
            return done
        if should_stop is not None and should_stop():
            lo, _ = search.bracket()
            best = lo.value if lo is not None else None
            return search.result("cancelled", f"cancelled after {search.runs} runs.", best)
        if search.runs > 0:
            value = search.next_value()
        if value in {s.value for s in search.steps if s.source == "run"}:
            return search.stuck(value)
        step = run(value)
        search.steps.append(step)
        search.runs += 1
        if on_step is not None:
            on_step(step, search.runs, max_runs)
