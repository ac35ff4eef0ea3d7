"""SGLang's thresholds fitted to a lab setting: the `--speculative-accept-threshold-acc` that
gives the same mean acceptance, with the fit's error and both rules' emitted KL side by side.

SGLang's acceptance test is another rule (`maths.rules.sglang`: a(n) from q_n alone, never p),
so a setting tuned in the lab does not carry over; what can carry over is its acceptance. The
fit keeps `--speculative-accept-threshold-single` at 1 (off) and searches t_acc, whose
acceptance falls as it grows, so one value meets any acceptance in reach:

- on rows (p, q) a run recorded: both rules' mean expected acceptance and mean KL(pi ‖ q) per
  decided position are exact on the rows (`fit_on_rows`);
- on estimated curves (the reference sweep's, or a sweep's own runs of both rules): both are
  read off the curves at the setting's value and at t_acc (`fit_on_curves`).

The threshold is written with three significant digits, and the acceptance and KL are those of
the written value, so `error` (its acceptance minus the setting's) is the flag's own. It is
fitted on the positions the setting decoded: SGLang's rule would write other text, where the
acceptance differs again (docs/engines.md measures that).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from cactus_core.experiments.estimates.curves import EstimatedCurve
from cactus_core.maths.divergence import kl
from cactus_core.maths.rules import LOSSLESS_RULE, Rule, make_rule, rule_class
from cactus_core.maths.rules.sglang import SGLangThresholds

SGLANG_RULE = SGLangThresholds.name
_ACC = SGLangThresholds.params_spec[0]  # threshold_acc
SEARCH_FLOOR = 1e-4  # the smallest t_acc searched: below it nearly every draft is accepted


@dataclass(frozen=True)
class SGLangFit:
    """SGLang's thresholds for a lab setting's acceptance, and what they cost."""

    setting: str  # the lab setting's label
    threshold_acc: float  # as the flag writes it
    threshold_single: float
    target_acceptance: float  # the setting's mean acceptance per decided position
    target_kl: float  # the setting's mean KL(pi ‖ q) per decided position
    acceptance: float  # SGLang's rule at the written thresholds
    kl: float  # SGLang's rule's mean KL(pi ‖ q) per decided position
    positions: int  # decided positions behind the numbers (0: read off curves)
    source: str  # where the numbers come from, in words
    edge: str = ""  # why the acceptance is out of SGLang's reach, if it is

    @property
    def error(self) -> float:
        """SGLang's acceptance at the written threshold minus the setting's."""
        return self.acceptance - self.target_acceptance

    def flags(self) -> str:
        return (
            f"--speculative-accept-threshold-single {self.threshold_single:g} "
            f"--speculative-accept-threshold-acc {self.threshold_acc:g}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error}


def sglang_rule(threshold_acc: float, threshold_single: float = 1.0) -> Rule:
    return make_rule(SGLANG_RULE, threshold_acc=threshold_acc, threshold_single=threshold_single)


def written(value: float) -> float:
    """A threshold as a flag writes it: three significant digits."""
    return float(f"{value:.3g}")


def rule_means(rule: Rule, p: torch.Tensor, q: torch.Tensor) -> tuple[float, float]:
    """(mean expected acceptance sum_n p(n)·a(n), mean KL(pi ‖ q)) over rows p, q [N, W]; a
    rule that decides on the whole round is judged per position as lossless (a lower bound)."""
    judge = make_rule(LOSSLESS_RULE) if type(rule).caps.round_level else rule
    a, pi = judge.accept_probs_all_and_emitted(p, q, validate=False)
    acceptance = float((p * a.to(p.dtype)).sum(-1).mean())
    divergence = 0.0 if rule.caps.lossless else float(kl(pi.to(q.dtype), q).mean())
    return acceptance, divergence


def fit_on_rows(rule: Rule, p: torch.Tensor, q: torch.Tensor, source: str) -> SGLangFit:
    """The fit on recorded rows p, q [N, W] (full or compact), exact on them."""
    if p.shape != q.shape or p.dim() != 2 or p.shape[0] == 0:
        raise ValueError(f"p and q must both be [N, W] with N >= 1, got {tuple(p.shape)}")
    p = p.detach().to("cpu", torch.float64)
    q = q.detach().to("cpu", torch.float64)
    target_acc, target_kl = rule_means(rule, p, q)

    def at(t: float) -> tuple[float, float]:
        return rule_means(sglang_rule(t), p, q)

    reach = f"beyond SGLang's reach: even t_acc = {SEARCH_FLOOR:g} accepts less"
    span = (SEARCH_FLOOR, 1.0)
    return _fit(rule.label, target_acc, target_kl, at, span, p.shape[0], source, reach)


def fit_on_curves(
    rule: Rule, curve: EstimatedCurve, sglang: EstimatedCurve, source: str
) -> SGLangFit:
    """The fit on estimated curves: the setting read off its rule's curve at its swept value,
    SGLang's rule off its own curve over t_acc (at t_single's default)."""
    if sglang.rule != SGLANG_RULE or curve.rule != rule.name:
        raise ValueError(f"need the {rule.name} and {SGLANG_RULE} curves")
    spec = rule_class(rule.name).swept()
    value = None if spec is None else float(rule.params[spec.name])
    target_acc = curve.at(value, "acceptance")
    target_kl = curve.at(value, "kl_position")

    def at(t: float) -> tuple[float, float]:
        return sglang.at(t, "acceptance"), sglang.at(t, "kl_position")

    span = (float(min(sglang.values)), float(max(sglang.values)))
    reach = (
        f"beyond the curve, which ends at t_acc = {span[0]:g} (SGLang takes smaller values, "
        "unmeasured here)"
    )
    return _fit(rule.label, target_acc, target_kl, at, span, 0, source, reach)


def _fit(
    label: str,
    target: float,
    target_kl: float,
    at: Callable[[float], tuple[float, float]],
    span: tuple[float, float],
    positions: int,
    source: str,
    reach: str,
) -> SGLangFit:
    """Bisection on log t_acc over span for acceptance = target (acceptance falls with t);
    `reach` says why a target above the span's acceptance is not met."""
    lo, hi = span
    edge = ""
    if at(hi)[0] >= target:
        t, edge = hi, f"SGLang's rule already accepts at least this much at t_acc = {hi:g}"
    elif at(lo)[0] <= target:
        t, edge = lo, reach
    else:
        for _ in range(60):
            mid = math.sqrt(lo * hi)
            if at(mid)[0] >= target:
                lo = mid
            else:
                hi = mid
        t = math.sqrt(lo * hi)
    t = min(max(written(t), _ACC.low), _ACC.high)
    acceptance, divergence = at(t)
    return SGLangFit(
        setting=label,
        threshold_acc=t,
        threshold_single=1.0,
        target_acceptance=target,
        target_kl=target_kl,
        acceptance=acceptance,
        kl=divergence,
        positions=positions,
        source=source,
        edge=edge,
    )
