"""Statistics behind the Frontier page: confidence intervals, Pareto fronts, tuning.

Notation: p = draft, q = verifier, pi = emitted distribution. Everything here is plain numpy or
torch over numbers a sweep already collected; nothing loads a model.

The limit curve itself lives with the rest of the limit in `cactus_core.maths.limit`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Two-sided 95% Student t quantiles for 1..30 degrees of freedom (scipy is a dev dependency
# only); larger samples use the 1/df interpolation towards 1.96 below.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with df degrees of freedom (to ~1e-3)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    # Between df = 30 and infinity the quantile is close to linear in 1/df.
    return 1.959964 + (2.042 - 1.959964) * 30.0 / df


@dataclass(frozen=True)
class Estimate:
    """A mean with a 95% confidence interval over n independent units (prompts or chunks)."""

    mean: float
    lo: float
    hi: float
    n: int

    def to_dict(self) -> dict[str, float | int | None]:
        return {"mean": _finite(self.mean), "lo": _finite(self.lo), "hi": _finite(self.hi),
                "n": self.n}  # fmt: skip

    def clip(self, low: float, high: float = math.inf) -> Estimate:
        """The interval cut to the values the quantity can take (a t interval over a few
        prompts reached −2 tokens per call, which cannot be below 1)."""
        return Estimate(self.mean, min(max(self.lo, low), high), max(min(self.hi, high), low),
                        self.n)  # fmt: skip


def _finite(x: float) -> float | None:
    # JSON has no inf/nan; None reads as "not defined" in both JSON and the UI.
    return float(x) if math.isfinite(x) else None


def mean_ci(values: Sequence[float]) -> Estimate:
    """Mean and t-based 95% interval; one value gives a zero-width interval at that value.

    Infinite values (an emitted KL against a truncated q) give an infinite mean and interval.
    """
    x = np.asarray([float(v) for v in values if not math.isnan(float(v))], dtype=np.float64)
    if x.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    if not np.all(np.isfinite(x)):
        m = float(np.mean(x))
        return Estimate(m, m, m, int(x.size))
    m = float(x.mean())
    if x.size == 1:
        return Estimate(m, m, m, 1)
    half = t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Estimate(m, m - half, m + half, int(x.size))


def pareto_front(xs: Sequence[float], ys: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats (lower or equal x and strictly higher y).

    x is a cost (emitted KL), y a gain (tokens per call); returned in increasing x. Points with
    a non-finite coordinate never enter the front.
    """
    pts = [
        (float(x), -float(y), i)
        for i, (x, y) in enumerate(zip(xs, ys, strict=True))
        if math.isfinite(float(x)) and math.isfinite(float(y))
    ]
    front: list[int] = []
    best = -math.inf
    for _x, neg_y, i in sorted(pts):
        if -neg_y > best:
            front.append(i)
            best = -neg_y
    return front


def best_at_or_below(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """The highest y among points with cost <= x (the step Pareto front); -inf if none."""
    vals = [
        float(yv) for xv, yv in zip(xs, ys, strict=True) if float(xv) <= x and math.isfinite(yv)
    ]
    return max(vals) if vals else -math.inf


def dominance_check(
    a_xs: Sequence[float], a_ys: Sequence[float], b_xs: Sequence[float], b_ys: Sequence[float]
) -> list[dict[str, float | bool]]:
    """Compare rule A's front with each point of rule B where both have points.

    For every point (x, y) of B with x >= A's smallest cost, A's best y at cost <= x is read
    off A's step front. "Both have points" is taken literally: B's points below A's cheapest
    point are not compared (A has nothing there).
    """
    # A's points with a divergence (a sweep cached before TV was kept has NaN there)
    finite = [float(x) for x in a_xs if math.isfinite(float(x))]
    if not finite:
        return []
    a_min = min(finite)
    rows = []
    for x, y in sorted(zip(b_xs, b_ys, strict=True)):
        if not math.isfinite(float(x)) or float(x) < a_min:
            continue
        a_best = best_at_or_below(a_xs, a_ys, float(x))
        rows.append({"kl": float(x), "b": float(y), "a": a_best, "a_wins": a_best > float(y)})
    return rows


# ------------------------------------------------------------------------------------ tuner


def interpolate_param_for_budget(
    params: Sequence[float], kls: Sequence[float], budget: float
) -> float:
    """The largest parameter whose interpolated emitted KL stays within budget.

    params: a rule's parameter grid (e.g. delta) with its measured mean emitted KL per token.
    KL is treated as non-decreasing in the parameter: the curve is made monotone by a running
    maximum (measurement noise can dip it), then inverted piecewise-linearly. If even the
    smallest parameter exceeds the budget, the smallest is returned (the caller confirms and
    reports); if the largest fits, the largest is returned (no extrapolation).
    """
    if budget < 0 or math.isnan(budget):
        raise ValueError(f"KL budget must be >= 0, got {budget}")
    pairs = sorted(
        (float(a), float(b)) for a, b in zip(params, kls, strict=True) if not math.isnan(float(b))
    )
    if not pairs:
        raise ValueError("the tuner needs at least one measured setting")
    xs = np.asarray([a for a, _ in pairs])
    ys = np.maximum.accumulate(np.asarray([b for _, b in pairs]))
    if ys[0] > budget:
        return float(xs[0])
    if ys[-1] <= budget:
        return float(xs[-1])
    j = int(np.argmax(ys > budget))  # first grid point over budget; j >= 1
    x0, x1, y0, y1 = xs[j - 1], xs[j], ys[j - 1], ys[j]
    if not math.isfinite(y1) or y1 == y0:
        return float(x0)
    return float(x0 + (budget - y0) * (x1 - x0) / (y1 - y0))
