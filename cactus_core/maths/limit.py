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

All of it runs in float64: the prefix-sum differences cancel badly in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cactus_core.maths.divergence import kl
from cactus_core.maths.validation import blockwise, check_number, check_pair

# log A spans at most ~700 nats and B lies in [0, 1]: 48 halvings leave ~1e-12 of either.
_BISECT_STEPS = 48
# e^(1/lam) overflows float64 past 709; beyond ~e^700 pi* is p on the finite ratios anyway.
_MAX_LOG_RATIO = 700.0


def excl_cumsum(x: torch.Tensor) -> torch.Tensor:
    """[..., V] -> [..., V+1]: entry i is the sum of the first i entries."""
    return torch.nn.functional.pad(x.cumsum(-1), (1, 0))


def take(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return table.gather(-1, idx)


# CPU 1-D integer sorts this long take torch's radix path; shorter rows sort fast anyway.
_RADIX_MIN = 1 << 14
_KEY = {torch.float64: (torch.int64, 0x7FFFFFFFFFFFFFFF), torch.float32: (torch.int32, 0x7FFFFFFF)}


def sort_nonneg(x: torch.Tensor, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x.sort(-1, descending) for x ≥ 0 (inf allowed, no NaN): (values, indices) [..., V].

    Non-negative IEEE floats order like their bit patterns read as integers, and torch sorts a
    1-D CPU integer tensor by radix: about ten times faster than its comparison sort of
    floats at V = 49,152, which makes the sort no longer dominate the emitted pi. The radix
    path only takes 1-D tensors, hence one sort per row of a long-row batch.
    """
    v = x.shape[-1]
    if x.device.type != "cpu" or v < _RADIX_MIN or x.dtype not in _KEY or x.numel() == 0:
        return x.sort(-1, descending=descending)
    int_t, top = _KEY[x.dtype]
    key = x.contiguous().view(int_t).clamp_min(0)  # -0.0 reads as a negative integer
    if descending:
        key = torch.sub(top, key)
    rows = [row.sort(stable=True) for row in key.reshape(-1, v)]
    keys = torch.stack([row.values for row in rows]).reshape(x.shape)
    order = torch.stack([row.indices for row in rows]).reshape(x.shape)
    if descending:
        keys = torch.sub(top, keys)
    return keys.view(x.dtype), order  # the sorted keys are the sorted values' bits


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


def xlogx(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x * torch.log(x), torch.zeros_like(x))


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
        budget = check_number("optimal", "budget", budget, 0.0, 1e9)
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


def _one_price(idx: RatioIndex, log_ratio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For A/B = e^log_ratio ([..., L]), the B solving G(B) = H(A). Returns (B, A) [..., L]."""
    ratio = torch.exp(log_ratio.clamp(max=_MAX_LOG_RATIO))
    lo = torch.zeros_like(ratio)
    hi = torch.ones_like(ratio)
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        surplus = idx.G(mid) - idx.H(mid * ratio)  # increasing in B
        ok = surplus <= 0
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid)
    b = 0.5 * (lo + hi)
    return b, b * ratio


def _curve_points(idx: RatioIndex, lams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position and price: acceptance and KL of pi*, each [N, L]."""
    log_ratio = (1.0 / lams).expand(idx.rho.shape[0], -1)
    b, a = _one_price(idx, log_ratio)
    return 1.0 - idx.H(a), idx.kl_clip(a, b)


def _as_rows(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_pair(p, q)
    v = p.shape[-1]
    return p.reshape(-1, v), q.reshape(-1, v)


def limit_curve(
    p: torch.Tensor, q: torch.Tensor, lams: torch.Tensor | list[float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The limit curve over positions p, q [N, V] (any leading shape is flattened).

    One price lam per nat of KL for every position: A = B·e^(1/lam). Returns
    (mean_acceptance [L], mean_kl [L]) in float64, one point per lam (lam > 0). Small lam
    tends to pi* = p (most acceptance), large lam to pi* = q (acceptance 1 − TV, KL 0).
    """
    p, q = _as_rows(p, q)
    lams_t = torch.as_tensor(lams, dtype=torch.float64, device=p.device).reshape(1, -1)
    if lams_t.numel() == 0 or not bool((lams_t > 0).all()):
        raise ValueError("limit_curve: lams must be a non-empty list of positive numbers")
    if p.shape[0] == 0:
        raise ValueError("limit_curve: need at least one position")
    idx = RatioIndex.build(p, q)
    acc, div = _curve_points(idx, lams_t)
    return acc.mean(0), div.mean(0)


def limit_at_kl(p: torch.Tensor, q: torch.Tensor, target_kl: float) -> float:
    """Best mean acceptance over positions p, q [N, V] at mean KL(pi ‖ q) ≤ target_kl.

    Refines the price lam on log-spaced grids (mean KL falls as lam grows) and returns the
    acceptance at the smallest grid price whose mean KL fits, so it errs low by at most the
    last grid's spacing (relative KL step about 1e-4).
    """
    target_kl = check_number("limit", "target_kl", target_kl, 0.0, math.inf)
    p, q = _as_rows(p, q)
    if p.shape[0] == 0:
        raise ValueError("limit_at_kl: need at least one position")
    idx = RatioIndex.build(p, q)
    lo, hi = math.log(1e-4), math.log(1e6)
    best = None
    for _ in range(4):
        grid = torch.linspace(lo, hi, 33, dtype=torch.float64, device=p.device)
        acc, div = _curve_points(idx, torch.exp(grid).reshape(1, -1))
        acc, div = acc.mean(0).tolist(), div.mean(0).tolist()
        fits = [i for i, d in enumerate(div) if d <= target_kl]
        if not fits:  # even the largest price overshoots: take the lossless end
            return acc[-1]
        i = fits[0]
        best = acc[i]
        if i == 0:
            return best
        lo, hi = grid[i - 1].item(), grid[i].item()
    return best
