"""The limit: the most any rule can accept at a given emitted divergence.

At one position, whatever the rule, the emitted token equals the drafted one with probability
at most sum_x min(p_x, pi_x), and rejection sampling of pi from p attains it. So the best
acceptance under KL(pi ‖ q) ≤ budget is max over pi of sum min(p, pi), whose KKT solution is

    pi*_x = clip(p_x, B·q_x, A·q_x),   B ≤ 1 ≤ A.

Everything here works on the draft/verifier ratio rho = p/q (inf where q = 0), sorted once per
position (O(V log V)); after that each candidate (A, B) costs O(log V) through prefix sums:

    G(B) = sum max(0, B·q − p)   mass added to tokens with rho < B     (increasing in B)
    H(A) = sum max(0, p − A·q)   mass taken from tokens with rho > A   (decreasing in A)

pi* sums to 1 iff G(B) = H(A), and its acceptance sum min(p, pi*) is 1 − H(A). Its KL is
B log B · Q(rho < B) + sum_{B ≤ rho ≤ A} p log rho + A log A · Q(rho > A).

Two solvers share that index: `optimal_params` (a KL budget per position: the `optimal` rule)
and `limit_sums` (one price per nat for all positions: the limit curve the frontier draws,
A = B·e^t at every position, sweeping t). All of it runs in float64: the prefix-sum
differences cancel badly in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cactus_core.maths.divergence import kl
from cactus_core.maths.tensor_ops import excl_cumsum, sort_nonneg, take, xlogx
from cactus_core.maths.validation import blockwise, check_number, check_pair

# log A spans at most ~700 nats and B lies in [0, 1]: 48 halvings leave ~1e-12 of either.
_BISECT_STEPS = 48


@dataclass
class RatioIndex:
    """p and q of many positions sorted by rho = p/q, with prefix sums. Shapes [..., V(+1)]."""

    rho: torch.Tensor  # [..., V] unsorted ratios (inf where q = 0)
    rho_s: torch.Tensor  # [..., V] sorted ascending
    qc: torch.Tensor  # [..., V+1] exclusive prefix sums of q in rho order
    pc: torch.Tensor  # [..., V+1] same for p
    plc: torch.Tensor  # [..., V+1] same for p·log rho (0 where p = 0 or rho = inf)
    g: torch.Tensor  # [..., V] G at each breakpoint rho_s[i] (inf past the finite ratios)
    rho_max: torch.Tensor  # [..., 1] largest finite ratio

    @classmethod
    def build(cls, p: torch.Tensor, q: torch.Tensor) -> RatioIndex:
        p = p.double()
        q = q.double()
        inf = torch.tensor(math.inf, dtype=torch.float64, device=p.device)
        rho = torch.where(q > 0, p / q, inf)
        rho_s, order = sort_nonneg(rho)
        q_s = q.gather(-1, order)
        p_s = p.gather(-1, order)
        finite = torch.isfinite(rho_s)
        pl = torch.where(finite & (p_s > 0), p_s * torch.log(rho_s), torch.zeros_like(p_s))
        qc = excl_cumsum(q_s)
        pc = excl_cumsum(p_s)
        plc = excl_cumsum(pl)
        g = torch.where(finite, rho_s * qc[..., :-1] - pc[..., :-1], inf)
        g = torch.cummax(g, -1).values  # G is non-decreasing; undo rounding wiggles
        n_finite = finite.sum(-1, keepdim=True)
        rho_max = rho_s.gather(-1, (n_finite - 1).clamp_min(0))
        return cls(rho, rho_s, qc, pc, plc, g, rho_max)

    def G(self, b: torch.Tensor) -> torch.Tensor:
        """b [..., m] -> G(b) [..., m]."""
        i = torch.searchsorted(self.rho_s, b.contiguous())
        return b * take(self.qc, i) - take(self.pc, i)

    def H(self, a: torch.Tensor) -> torch.Tensor:
        """a [..., m] (finite) -> H(a) [..., m]."""
        i = torch.searchsorted(self.rho_s, a.contiguous(), right=True)
        return (self.pc[..., -1:] - take(self.pc, i)) - a * (self.qc[..., -1:] - take(self.qc, i))

    def G_inv(self, m: torch.Tensor) -> torch.Tensor:
        """The B in [0, 1] with G(B) = m, for m in [0, TV]."""
        i = torch.searchsorted(self.g, m.contiguous(), right=True).clamp(1, self.g.shape[-1])
        b = (m + take(self.pc, i)) / take(self.qc, i)
        return b.clamp(0.0, 1.0)

    def kl_clip(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """KL(clip(p, b·q, a·q) ‖ q) for finite a ≥ b, without building pi."""
        lo = torch.searchsorted(self.rho_s, b.contiguous())
        hi = torch.searchsorted(self.rho_s, a.contiguous(), right=True)
        q_low = take(self.qc, lo)
        q_high = self.qc[..., -1:] - take(self.qc, hi)
        mid = take(self.plc, hi) - take(self.plc, lo)
        return xlogx(b) * q_low + mid + xlogx(a) * q_high


def clip_target(
    p: torch.Tensor, q: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor
) -> torch.Tensor:
    """pi* = clip(p, lower·q, upper·q); upper = inf means pi* = p.

    lower, upper: [...] or [..., 1]."""
    if lower.dim() < p.dim():
        lower = lower.unsqueeze(-1)
        upper = upper.unsqueeze(-1)
    lower = lower.to(p.dtype)
    upper = upper.to(p.dtype)
    free = torch.isinf(upper)
    clipped = torch.minimum(torch.maximum(p, lower * q), torch.where(free, 1.0, upper) * q)
    return torch.where(free, p, clipped)


def optimal_params(
    p: torch.Tensor, q: torch.Tensor, budget: float | torch.Tensor, validate: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position (B, A) [...] (float64) of pi* = clip(p, B·q, A·q) with KL(pi* ‖ q) ≤ budget.

    A = inf (and B = 0) where KL(p ‖ q) ≤ budget already, i.e. pi* = p. Otherwise bisection
    on log A in [0, log max finite rho], keeping the side where the KL fits the budget.
    """
    check_pair(p, q, validate)
    if not isinstance(budget, torch.Tensor):
        budget = check_number("limit", "budget", budget, 0.0, 1e9)
    if isinstance(budget, torch.Tensor) and budget.dim() > 0:
        budget = budget.expand(p.shape[:-1]).unsqueeze(-1).expand(p.shape).to(p.dtype)
        return blockwise(lambda pb, qb, bb: _optimal_rows(pb, qb, bb[..., 0]), p, q, budget)
    return blockwise(lambda pb, qb: _optimal_rows(pb, qb, budget), p, q)


def _optimal_rows(
    p: torch.Tensor, q: torch.Tensor, budget: float | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    budget_t = torch.as_tensor(budget, dtype=torch.float64, device=p.device)
    if budget_t.dim() > 0:
        budget_t = budget_t.unsqueeze(-1)
    idx = RatioIndex.build(p, q)
    lo = torch.zeros_like(idx.rho_max)  # [..., 1] log A
    hi = torch.log(idx.rho_max).clamp_min(0.0)
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        a = torch.exp(mid)
        b = idx.G_inv(idx.H(a))
        ok = idx.kl_clip(a, b) <= budget_t
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid)
    a = torch.exp(lo)
    b = idx.G_inv(idx.H(a))
    use_p = (kl(p.double(), q.double()) <= budget_t.squeeze(-1)).unsqueeze(-1)
    a = torch.where(use_p, math.inf, a)
    b = torch.where(use_p, 0.0, b)
    return b.squeeze(-1), a.squeeze(-1)


def optimal_target(
    p: torch.Tensor, q: torch.Tensor, budget: float | torch.Tensor, validate: bool = True
) -> torch.Tensor:
    """pi* [..., V]: the emitted distribution with the largest acceptance sum min(p, pi)
    among those with KL(pi ‖ q) ≤ budget (pi* = p when KL(p ‖ q) ≤ budget)."""
    b, a = optimal_params(p, q, budget, validate)
    pi = clip_target(p.double(), q.double(), b, a)
    pi = pi / pi.sum(-1, keepdim=True)
    return pi.to(torch.float64 if p.dtype == torch.float64 else torch.float32)


# ---------------------------------------------------------------------------- one price
# t = log(A / B) for the one-price curve: t = 0 is pi = q (no divergence, acceptance
# sum min(p, q)); t = 60 is pi = p restricted to q's support for any realistic row.
# The grid is dense because the limit at a given KL is read off by linear interpolation along
# the curve, which is concave, so a coarse grid would understate the limit.
LIMIT_T_GRID: tuple[float, ...] = (0.0, *np.geomspace(1e-4, 60.0, 255).tolist())
# Halvings of log B before the last step solves the (then linear) normalisation exactly.
_PRICE_STEPS = 36


@dataclass(frozen=True)
class LimitSums:
    """Per-t sums of the one-price limit over some positions; add two to pool positions."""

    acc: tuple[float, ...]  # sum over positions of sum_x min(p, pi*_t)
    kl: tuple[float, ...]  # sum over positions of KL(pi*_t ‖ q)
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

    def to_dict(self) -> dict[str, Any]:
        return {"acc": list(self.acc), "kl": list(self.kl), "count": self.count}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> LimitSums:
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
    total = LimitSums.empty()
    for start in range(0, _rows(p, q), rows_per_block):
        block = slice(start, start + rows_per_block)
        acc, div = _one_price_rows(p[block], q[block])
        total = total + LimitSums(
            tuple(acc.sum(0).tolist()), tuple(div.sum(0).tolist()), int(acc.shape[0])
        )
    return total


def limit_sums_per_row(p: torch.Tensor, q: torch.Tensor) -> list[LimitSums]:
    """limit_sums of each row alone (count 1 each), so a caller can pool any subset later."""
    if _rows(p, q) == 0:
        return []
    acc, div = _one_price_rows(p, q)
    rows = zip(acc.tolist(), div.tolist(), strict=True)
    return [LimitSums(tuple(a), tuple(b), 1) for a, b in rows]


def _rows(p: torch.Tensor, q: torch.Tensor) -> int:
    if p.shape != q.shape or p.dim() != 2:
        raise ValueError(f"p and q must both be [N, V], got {tuple(p.shape)} and {tuple(q.shape)}")
    return p.shape[0]


def _one_price_rows(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the acceptance and KL of pi*_t = q·clip(p/q, B, B·e^t) for every t in
    LIMIT_T_GRID: [N, L] each (float64)."""
    p = p.detach().to(device="cpu", dtype=torch.float64)
    q = q.detach().to(device="cpu", dtype=torch.float64)
    idx = RatioIndex.build(p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True))
    t = torch.tensor(LIMIT_T_GRID, dtype=torch.float64).expand(p.shape[0], -1)  # [N, L]
    b, i_b, i_a = _price_solve(idx, t)
    a = b * torch.exp(t)
    upper_q = idx.qc[..., -1:] - take(idx.qc, i_a)
    acc = take(idx.pc, i_a) + a * upper_q
    div = (
        xlogx(b) * take(idx.qc, i_b) + take(idx.plc, i_a) - take(idx.plc, i_b) + xlogx(a) * upper_q
    )
    return acc.clamp(0.0, 1.0), div.clamp_min(0.0)


def price_params(p: torch.Tensor, q: torch.Tensor, t: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position (B, A = B·e^t) [...] (float64) of the one-price pi*_t = q·clip(p/q, B, A):
    the limit curve's own optimiser at price t (`optimal-price`). p, q [..., V]."""

    def rows(pb: torch.Tensor, qb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = RatioIndex.build(pb, qb)
        t_col = torch.full((pb.shape[0], 1), float(t), dtype=torch.float64, device=pb.device)
        b = _price_solve(idx, t_col)[0]
        return b[:, 0], (b * math.exp(t))[:, 0]

    return blockwise(rows, p.double(), q.double())


def _price_solve(
    idx: RatioIndex, t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """B [N, L] normalising q·clip(rho, B, B·e^t) for prices t [N, L], with the band indices
    (#tokens with rho < B, #tokens with rho ≤ A) at that B.

    sum_x q·clip(rho, B, B·e^t) grows with B: it is ≤ 1 at B = e^-t (A = 1) and ≥ 1 at B = 1.
    Bisection in log B only has to find which tokens sit in which band; there the mass is
    linear in B and the last step solves it exactly.
    """
    q_tot = idx.qc[..., -1:]  # [N, 1]
    et = torch.exp(t)

    def bands(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mass of the clip at B [N, L], #tokens with rho < B, #tokens with rho ≤ A)."""
        i_b = torch.searchsorted(idx.rho_s, b, side="left")
        i_a = torch.searchsorted(idx.rho_s, b * et, side="right")
        mass = b * take(idx.qc, i_b) + take(idx.pc, i_a) - take(idx.pc, i_b)
        return mass + b * et * (q_tot - take(idx.qc, i_a)), i_b, i_a

    lo, hi = -t.clone(), torch.zeros_like(t)
    for _ in range(_PRICE_STEPS):
        mid = 0.5 * (lo + hi)
        high = bands(torch.exp(mid))[0] > 1.0
        hi = torch.where(high, mid, hi)
        lo = torch.where(high, lo, mid)
    _, i_b, i_a = bands(torch.exp(0.5 * (lo + hi)))
    slope = take(idx.qc, i_b) + et * (q_tot - take(idx.qc, i_a))
    b_lin = (1.0 - take(idx.pc, i_a) + take(idx.pc, i_b)) / slope.clamp_min(1e-300)
    b = torch.where(slope > 0, b_lin, torch.exp(0.5 * (lo + hi)))
    return b.clamp(torch.exp(lo), torch.exp(hi)), i_b, i_a
