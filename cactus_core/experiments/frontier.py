"""Maths behind the Frontier page: confidence intervals, Pareto fronts, the limit curve, tuning.

Notation: p = draft, q = verifier, pi = emitted distribution. Everything here is plain numpy or
torch over numbers a sweep already collected; nothing loads a model.

The limit (design notes, "The limit"): at one position the most any rule can accept while
keeping KL(pi || q) <= budget is max_pi sum_x min(p_x, pi_x), solved by
pi*_x = q_x * clip(p_x / q_x, B, A). With one price per nat shared by every position,
A = B * e^t at each of them (t = 1 / lam), and normalisation fixes B. Sweeping t traces the
best mean acceptance against mean KL. With the ratios r = p / q sorted once per position,
every sum over tokens is two prefix sums away, so each (position, t) costs O(log V) after one
O(V log V) sort; that is what lets a sweep accumulate the curve over thousands of positions
with V = 49,152 without storing any row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

# t = log(A / B) for the one-price curve: t = 0 is pi = q (no divergence, acceptance
# sum min(p, q)); t = 60 is pi = p restricted to q's support for any realistic row.
# The grid is dense because the limit at a given KL is read off by linear interpolation along
# the curve, which is concave, so a coarse grid would understate the limit.
LIMIT_T_GRID: tuple[float, ...] = (0.0, *np.geomspace(1e-4, 60.0, 255).tolist())
_BISECTION_STEPS = 36

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
    if not a_xs:
        return []
    a_min = min(float(x) for x in a_xs)
    rows = []
    for x, y in sorted(zip(b_xs, b_ys, strict=True)):
        if not math.isfinite(float(x)) or float(x) < a_min:
            continue
        a_best = best_at_or_below(a_xs, a_ys, float(x))
        rows.append({"kl": float(x), "b": float(y), "a": a_best, "a_wins": a_best > float(y)})
    return rows


# ---------------------------------------------------------------------------- the limit curve


@dataclass(frozen=True)
class LimitSums:
    """Per-t sums of the one-price limit over some positions; add two to pool positions."""

    acc: tuple[float, ...]  # sum over positions of sum_x min(p, pi*_t)
    kl: tuple[float, ...]  # sum over positions of KL(pi*_t || q)
    count: int

    @staticmethod
    def empty() -> LimitSums:
        zeros = (0.0,) * len(LIMIT_T_GRID)
        return LimitSums(zeros, zeros, 0)

    def __add__(self, other: LimitSums) -> LimitSums:
        return LimitSums(
            tuple(a + b for a, b in zip(self.acc, other.acc, strict=True)),
            tuple(a + b for a, b in zip(self.kl, other.kl, strict=True)),
            self.count + other.count,
        )

    def curve(self) -> LimitCurve:
        if self.count == 0:
            raise ValueError("no positions: the limit curve needs at least one p, q row")
        return LimitCurve(
            np.asarray(self.kl) / self.count, np.asarray(self.acc) / self.count, self.count
        )

    def to_dict(self) -> dict:
        return {"acc": list(self.acc), "kl": list(self.kl), "count": self.count}

    @staticmethod
    def from_dict(d: dict) -> LimitSums:
        if len(d["acc"]) != len(LIMIT_T_GRID) or len(d["kl"]) != len(LIMIT_T_GRID):
            raise ValueError("limit sums were computed on another t grid")
        return LimitSums(tuple(d["acc"]), tuple(d["kl"]), int(d["count"]))


@dataclass(frozen=True)
class LimitCurve:
    """Best mean acceptance any rule can reach against mean emitted KL, on fixed positions."""

    mean_kl: np.ndarray  # [L], non-decreasing in t
    mean_acceptance: np.ndarray  # [L], non-decreasing in t
    count: int

    def at(self, kl: float) -> float:
        """The limit's mean acceptance at mean emitted KL kl (its maximum beyond the curve)."""
        if math.isnan(kl):
            return math.nan
        x = np.maximum.accumulate(self.mean_kl)
        return float(np.interp(kl, x, self.mean_acceptance))


def limit_sums(p: torch.Tensor, q: torch.Tensor, rows_per_block: int = 64) -> LimitSums:
    """Sums over rows of the one-price limit at every t in LIMIT_T_GRID.

    p, q: [N, V] probabilities (draft and verifier, after the same temperature/top-k/top-p).
    """
    if p.shape != q.shape or p.dim() != 2:
        raise ValueError(f"p and q must both be [N, V], got {tuple(p.shape)} and {tuple(q.shape)}")
    total = LimitSums.empty()
    t = torch.tensor(LIMIT_T_GRID, dtype=torch.float64)
    for start in range(0, p.shape[0], rows_per_block):
        acc, kl = _limit_block(
            p[start : start + rows_per_block], q[start : start + rows_per_block], t
        )
        total = total + LimitSums(
            tuple(acc.sum(0).tolist()), tuple(kl.sum(0).tolist()), int(acc.shape[0])
        )
    return total


def limit_sums_per_row(p: torch.Tensor, q: torch.Tensor) -> list[LimitSums]:
    """limit_sums of each row alone (count 1 each), so a caller can pool any subset later."""
    if p.shape != q.shape or p.dim() != 2:
        raise ValueError(f"p and q must both be [N, V], got {tuple(p.shape)} and {tuple(q.shape)}")
    if p.shape[0] == 0:
        return []
    acc, kl = _limit_block(p, q, torch.tensor(LIMIT_T_GRID, dtype=torch.float64))
    rows = zip(acc.tolist(), kl.tolist(), strict=True)
    return [LimitSums(tuple(a), tuple(b), 1) for a, b in rows]


def _limit_block(
    p: torch.Tensor, q: torch.Tensor, t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row acceptance and KL of pi*_t for every t: [N, L] each (float64)."""
    p = p.detach().to(device="cpu", dtype=torch.float64)
    q = q.detach().to(device="cpu", dtype=torch.float64)
    p = p / p.sum(-1, keepdim=True)
    q = q / q.sum(-1, keepdim=True)
    # r = p / q; tokens outside q's support get r = inf so they sort last and only ever meet
    # the A * q = 0 branch.
    r = torch.where(q > 0, p / q.clamp_min(1e-300), torch.full_like(p, math.inf))
    # numpy's argsort is ~3x faster than torch.sort on the CPU, and the sort dominates.
    order = torch.from_numpy(np.argsort(r.numpy(), axis=-1))  # [N, V]
    r = torch.gather(r, -1, order)
    ps = torch.gather(p, -1, order)
    qs = torch.gather(q, -1, order)
    # p log r, with 0 log 0 = 0 and nothing for r = inf (never in the middle band).
    plr = torch.where((ps > 0) & torch.isfinite(r), ps * torch.log(r.clamp_min(1e-300)), 0.0)
    zero = torch.zeros(p.shape[0], 1, dtype=torch.float64)
    qc = torch.cat([zero, qs.cumsum(-1)], -1)  # [N, V+1]: sums over the first j sorted tokens
    pc = torch.cat([zero, ps.cumsum(-1)], -1)
    lc = torch.cat([zero, plr.cumsum(-1)], -1)
    q_tot = qc[:, -1:]

    n, nt = p.shape[0], t.shape[0]
    tt = t.unsqueeze(0).expand(n, nt)
    et = torch.exp(tt)

    def mass(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = b * et
        i_b = torch.searchsorted(r, b, side="left")  # tokens with r < B get B q
        i_a = torch.searchsorted(r, a, side="right")  # tokens with r > A get A q
        m = b * qc.gather(1, i_b) + pc.gather(1, i_a) - pc.gather(1, i_b)
        return m + a * (q_tot - qc.gather(1, i_a)), i_b, i_a

    # sum_x q clip(r, B, B e^t) grows with B; it is <= 1 at B = e^-t (A = 1) and >= 1 at B = 1.
    # Bisection (in log B) only has to find which tokens sit in which band: there the mass is
    # linear in B and the last step solves it exactly.
    lo, hi = -tt.clone(), torch.zeros_like(tt)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        high = mass(torch.exp(mid))[0] > 1.0
        hi = torch.where(high, mid, hi)
        lo = torch.where(high, lo, mid)
    _, i_b, i_a = mass(torch.exp(0.5 * (lo + hi)))
    upper_q = q_tot - qc.gather(1, i_a)
    slope = qc.gather(1, i_b) + et * upper_q
    b_lin = (1.0 - pc.gather(1, i_a) + pc.gather(1, i_b)) / slope.clamp_min(1e-300)
    b = torch.where(slope > 0, b_lin, torch.exp(0.5 * (lo + hi)))
    b = b.clamp(torch.exp(lo), torch.exp(hi))
    a = b * et
    acc = pc.gather(1, i_a) + a * upper_q
    kl = (
        b * torch.log(b) * qc.gather(1, i_b)
        + lc.gather(1, i_a)
        - lc.gather(1, i_b)
        + a * torch.log(a) * upper_q
    )
    return acc.clamp(0.0, 1.0), kl.clamp_min(0.0)


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
