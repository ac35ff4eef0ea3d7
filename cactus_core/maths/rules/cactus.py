"""Cactus (Hao & Mou, ICLR 2026): raise the verifier's q_n to h_n within a KL budget delta.

Drafting n verifies against h^(n): h_n at n and c_n·q elsewhere, c_n = (1 − h_n)/(1 − q_n).
Four ways to choose h_n: the paper's closed form (a second-order Taylor step, `cactus`), the
exact root of the binary KL(h_n ‖ q_n) = delta (`cactus-exact`), a per-position delta' so
that the emitted pi itself stays within a budget (`cactus-budget`), and a delta scaled by
the verifier's entropy at the position (`cactus-adaptive`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from cactus_core.maths.divergence import entropy, kl
from cactus_core.maths.row_memo import RowMemo
from cactus_core.maths.rules.base import (
    UNBOUNDED,
    Capabilities,
    Drafted,
    Param,
    RowStats,
    Rule,
    RuleCard,
    fallback_,
    min1_ratio,
)
from cactus_core.maths.rules.cactus_emitted import (
    CactusPrecomputed,
    DraftSupport,
    cactus_c,
    cactus_monotone_emitted,
    pi_in_rho_order,
)
from cactus_core.maths.tensor_ops import sort_nonneg
from cactus_core.maths.validation import blockwise, work_dtype

CITATION = "Hao & Mou, Cactus, ICLR 2026 (arXiv 2604.04987)"
DELTA = Param(
    "delta",
    "δ",
    default=0.1,
    low=0.0,
    high=UNBOUNDED,
    ui=(0.0, 3.0),
    grid=(0.0, 0.001, 0.01, 0.1, 0.3, 1.0, 2.0, 3.0),
    help="Divergence budget of h against q at the drafted token; 0 is lossless sps.",
    log=True,
    unit="nats",
)
BUDGET = Param(
    "budget",
    "KL≤",
    default=0.1,
    low=0.0,
    high=UNBOUNDED,
    ui=(0.0, 1.0),
    grid=(0.01, 0.03, 0.1, 0.2, 0.3, 1.0),
    help="Bound on KL(pi ‖ q), the divergence of the emitted distribution, at every position.",
    log=True,
    unit="nats",
)
# Bisection halvings of [q, 1]: 2^-54 is below float64's spacing near 1.
_ROOT_STEPS = 54


def cactus_h(q: torch.Tensor, delta: torch.Tensor | float) -> torch.Tensor:
    """The paper's closed form h_n = min(1, q_n + sqrt(2·delta·q_n·(1 − q_n))), elementwise."""
    return torch.clamp_max(q + torch.sqrt(2 * delta * (q * (1 - q)).clamp_min(0.0)), 1.0)


def cactus_exact_h(q: torch.Tensor, delta: float) -> torch.Tensor:
    """The root gamma in [q, 1] of KL(gamma ‖ q) = delta (binary KL), elementwise.

    Plain bisection in float64. Newton converges slowly where the root nears 1 (the slope of
    the KL is unbounded there) and left roots 1e-4 short; bisection keeps the lower end, where
    KL ≤ delta always holds, and reaches float64 rounding in 54 halvings. gamma = 1 when
    −log q ≤ delta. The result is rounded towards q when cast back so the bound survives.

    The root depends on q alone, so it is solved once per distinct value: a verifier run in
    bfloat16 gives a row of 49,152 probabilities only a few thousand distinct values (the same
    numbers, far fewer bisections).
    """
    q64 = q.double().clamp(0.0, 1.0)
    values, where = torch.unique(q64, return_inverse=True)
    inner = (values > 0) & (-torch.log(values) > delta)  # root strictly inside (q, 1)
    qi = torch.where(inner, values, 0.5)  # harmless values elsewhere
    log_q, log_1mq = torch.log(qi), torch.log1p(-qi)
    lo, hi = qi.clone(), torch.ones_like(qi)
    for _ in range(_ROOT_STEPS):
        mid = 0.5 * (lo + hi)
        div = mid * (torch.log(mid) - log_q) + (1 - mid) * (torch.log1p(-mid) - log_1mq)
        over = div > delta
        hi = torch.where(over, mid, hi)
        lo = torch.where(over, lo, mid)
    gamma = torch.where(inner, lo, torch.where(values > 0, 1.0, 0.0))[where]
    out = gamma.to(work_dtype(q))
    too_big = out.double() > gamma
    return torch.where(too_big, torch.nextafter(out, torch.zeros_like(out)), out)


def cactus_target(
    q: torch.Tensor, n: torch.Tensor, qn: torch.Tensor, hn: torch.Tensor
) -> torch.Tensor:
    """h^(n) [..., V]: h_n at n, c_n·q elsewhere, c_n = (1 − h_n)/(1 − q_n)."""
    c = torch.where(qn < 1, (1 - hn) / (1 - qn), torch.zeros_like(qn)).clamp(0.0, 1.0)
    h = c.unsqueeze(-1) * q
    return h.scatter_(-1, n.unsqueeze(-1), hn.unsqueeze(-1))


class CactusFamily(Rule):
    """What the Cactus rules share: drafting n verifies against h^(n), h_n at n and c_n·q
    elsewhere. A member says how far it raises a verifier probability at a position:
    `raise_(q, stats)`, elementwise in q, with the position's `position_stats` (shaped to
    broadcast against q); h_n is that at q_n."""

    card = RuleCard(
        family="Cactus",
        citation=CITATION,
    )
    caps = Capabilities(tunable=True)

    def raise_(self, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        raise NotImplementedError

    def h_n(self, d: Drafted) -> torch.Tensor:
        return self.raise_(d.qn, d.stats)

    def target(self, d: Drafted) -> torch.Tensor:
        r = d.rows
        return cactus_target(r.q, r.n, d.qn, self.h_n(d))

    def residual_weights(self, d: Drafted) -> torch.Tensor:
        p = d.rows.p
        h = self.target(d)  # fresh: reuse its buffer for h − p
        return fallback_(h.sub_(p).clamp_min_(0.0), p)

    def _raise_rows(self, q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """h as a function of q [..., V], with each position's own stats: solved once."""
        stats = tuple(s.unsqueeze(-1) for s in self.position_stats(q, p))
        return self.raise_(q, stats)

    def _accept_all(self, p: torch.Tensor, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return min1_ratio(self.raise_(q, tuple(s.unsqueeze(-1) for s in stats)), p)

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        p64, q64 = p.double(), q.double()
        stats = tuple(s.unsqueeze(-1) for s in self.position_stats(q64, p64))
        # c = (1 − h)/(1 − q) falls as q grows, for the closed form and the exact root alike
        pi = cactus_monotone_emitted(p64, q64, lambda x: self.raise_(x, stats).double())
        return pi.to(work_dtype(q))

    def emitted_kl(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """KL(pi ‖ q) from the compact rows where p covers part of the vocabulary
        (`DraftSupport`: the merged token's term is the rest's whole sum)."""
        p64, q64 = p.double(), q.double()
        stats = tuple(s.unsqueeze(-1) for s in self.position_stats(q64, p64))
        support = DraftSupport.of(p64)
        if support is not None:
            p64, q64 = support.compact(p64), support.compact(q64)
        pi = cactus_monotone_emitted(
            p64, q64, lambda x: self.raise_(x, stats).double(), compact=False
        )
        return kl(pi, q64).to(work_dtype(q))

    def _accept_all_and_emitted(
        self, p: torch.Tensor, q: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = work_dtype(q)
        p64, q64 = p.double(), q.double()
        h = self._raise_rows(q64, p64).double()  # [..., V] in vocabulary order, solved once
        pi = cactus_monotone_emitted(p64, q64, h_vocab=h)
        accept = min1_ratio(h, p64) * (q64 > 0)
        return accept.to(dtype), pi.to(dtype)


class Cactus(CactusFamily):
    """Cactus with the paper's closed-form (second-order) h_n."""

    name = "cactus"
    card = replace(
        CactusFamily.card,
        colour="#008856",
        shown_first=True,
        description="Cactus, the paper's closed form (second-order Taylor) for h_n",
        in_words=(
            "Like sps, but it first lets the verifier's probability of the drafted token rise by a "
            "budgeted amount (δ nats, by the paper's approximate formula), so more drafts pass and "
            "the text drifts a little from the verifier's."
        ),
        guarantee="KL(h_n ‖ q_n) ≤ delta only to second order; KL(pi ‖ q) is not bounded by delta",
    )
    delta = DELTA

    def raise_(self, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return cactus_h(q, self.delta)

    def h_n(self, d: Drafted) -> torch.Tensor:
        return cactus_h(d.qn, self.delta)  # δ's last hop (docs/architecture.md, "Follow δ")


class CactusExact(Cactus):
    """Cactus with h_n the exact root of KL(h_n ‖ q_n) = delta (binary KL)."""

    name = "cactus-exact"
    card = replace(
        Cactus.card,
        colour="#0067A5",
        shown_first=True,
        description="Cactus with the exact binary-KL root for h_n (never exceeds delta)",
        in_words=(
            "Cactus with the raise of the drafted token's probability solved exactly, so that it "
            "never spends more than δ nats on the drafted token (the paper's formula can "
            "overshoot)."
        ),
        guarantee="binary KL(h_n ‖ q_n) ≤ delta exactly; KL(pi ‖ q) is not bounded by delta",
    )

    def raise_(self, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return cactus_exact_h(q, self.delta)

    def h_n(self, d: Drafted) -> torch.Tensor:
        return cactus_exact_h(d.qn, self.delta)


class CactusBudget(CactusFamily):
    """Cactus with, per position, the largest delta' whose emitted pi has KL(pi ‖ q) ≤ budget.

    A safeguarded secant search on log delta' in [1e-9, 1e9] (`_budget_delta_rows`: delta'
    within 0.01% of the edge, in at most 10 emitted pi on the tests' rows where a bisection
    took 18; docs/benchmarks.md, "cactus-budget"),
    reusing one sort by rho and one by q; the answer is a delta' whose exact KL fitted.
    delta' = 0 (sps) when even 1e-9 does not fit, 1e9 when that does. It assumes
    KL(pi(delta) ‖ q) grows with delta, which held in every case we tried.
    """

    name = "cactus-budget"
    card = replace(
        CactusFamily.card,
        colour="#875692",
        shown_first=True,
        description="Cactus with a per-position delta so that KL(pi ‖ q) ≤ budget",
        in_words=(
            "Cactus that picks δ afresh at every position, as large as it can while the "
            "distribution actually written stays within the KL budget of the verifier's."
        ),
        guarantee="KL(pi ‖ q) ≤ budget at every position",
        speed_note=(
            "Slower per token: it searches δ' at every position, each step an exact KL(π ‖ q) over "
            "the whole vocabulary; on the embedded pair on a CPU it decodes at 0.39–0.44 of cactus "
            "δ = 1's speed (docs/benchmarks.md, “cactus-budget”), so it loses races that cactus "
            "wins."
        ),
    )
    caps = replace(CactusFamily.caps, needs_rows=True)
    budget = BUDGET

    def raise_(self, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return cactus_h(q, stats[0])  # the position's own delta'

    def position_stats(self, q: torch.Tensor, p: torch.Tensor) -> RowStats:
        return (budget_delta(p, q, self.budget).to(q.dtype),)


# The entropy at which cactus-adaptive spends exactly delta.
REFERENCE_ENTROPY = 1.0


class CactusAdaptive(CactusFamily):
    """Cactus with delta_t = delta·H(q_t)/H_ref at each position, H_ref = 1 nat.

    The paper's stated future work: a budget set by the verifier's uncertainty. Where q is
    flat, many continuations are plausible to the verifier and bending it towards the draft
    costs little; where q is sharp (H near 0, greedy-like) the position is decided, and
    delta_t goes to 0, which is sps. Linear in H so that delta keeps its meaning: the budget
    at a position of 1 nat of entropy.
    """

    name = "cactus-adaptive"
    card = replace(
        CactusFamily.card,
        colour="#A1CAF1",
        shown_first=False,
        description="Cactus with delta scaled by the verifier's entropy: delta·H(q)/(1 nat)",
        in_words=(
            "Cactus with a budget that grows with the verifier's uncertainty: where the verifier "
            "is sure it is plain sps, where it hesitates it lets more drafts through."
        ),
        citation=CITATION + "; the adaptive budget is this lab's form of the paper's future work",
        guarantee="as cactus with delta·H(q) at each position; sps where the verifier is certain",
    )
    caps = replace(CactusFamily.caps, needs_rows=True)
    delta = DELTA  # cactus's own (and the Playground's slider), rescaled per position

    def raise_(self, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return cactus_h(q, stats[0])  # delta_t at the position

    def position_stats(self, q: torch.Tensor, p: torch.Tensor) -> RowStats:
        return (self.delta * entropy(q) / REFERENCE_ENTROPY,)


def budget_delta(p: torch.Tensor, q: torch.Tensor, budget: float) -> torch.Tensor:
    """Per position the largest cactus delta with KL(pi ‖ q) ≤ budget: [..., V] -> [...]."""
    rows = q.reshape(-1, q.shape[-1])
    if rows.shape[0] == 0:
        return torch.zeros(q.shape[:-1], dtype=torch.float64, device=q.device)

    def solve(pb: torch.Tensor, qb: torch.Tensor) -> torch.Tensor:
        return blockwise(lambda pc, qc: _budget_delta_rows(pc, qc, budget), pb, qb)

    # The decoder asks again for the rows it has just decided (the emitted KL, the trace).
    return _SOLVED(budget, p.reshape(rows.shape), rows, solve).reshape(q.shape[:-1])


_SOLVED = RowMemo(size=16)  # a round decides at most K_MAX positions


# The search works on x = log delta in [log 1e-9, log UNBOUNDED], on f(x) = log KL(pi ‖ q) −
# log budget, which is close to linear there (KL grows like a power of delta). It stops once
# a delta that fits is within a factor e^_TOL of the edge.
_LOG_LOW, _LOG_HIGH = math.log(1e-9), math.log(UNBOUNDED)
_TOL = 1e-4
_SHADE = 1e-7  # each secant step aims this far below the root, so the iterates end up fitting
_MAX_STEPS = 60  # a bisection from the whole range reaches _TOL in 22; secant steps in ~5


def _budget_delta_rows(p: torch.Tensor, q: torch.Tensor, budget: float) -> torch.Tensor:
    """p, q [N, V] -> delta [N]: a safeguarded secant search, all positions at once.

    The first guess is delta = budget (the closed form spends about delta per token where delta
    is small); each next point is the secant step through the last two points, aimed _SHADE
    below the root, unless it leaves the bracket [lo, hi], and then the bracket's midpoint.
    Every point is an exact KL(pi ‖ q) and the answer is the largest point that fitted, so the
    guarantee is a bisection's: KL(pi ‖ q) ≤ budget. A position whose even 1e-9 does not fit
    gets 0 (sps); one where UNBOUNDED fits gets UNBOUNDED.
    """
    p64, q64 = p.double(), q.double()
    support = DraftSupport.of(p64)
    if support is not None:  # the same KL from shorter rows (`DraftSupport`)
        p64, q64 = support.compact(p64), support.compact(q64)
    pre = CactusPrecomputed(p64, q64)
    # c falls as q grows under the closed form: q's descending order sorts c for every delta,
    # and h is elementwise in q, so every step works in the two fixed orders without sorting.
    q_c, order = sort_nonneg(q64, descending=True)
    p_c = p64.gather(-1, order)

    def log_kl(x: torch.Tensor) -> torch.Tensor:  # [N] log delta -> [N] log KL(pi ‖ q)
        delta = torch.exp(x).unsqueeze(-1)
        h_c = cactus_h(q_c, delta)
        c_s = torch.cummax(cactus_c(q_c, h_c), -1).values
        pi_r = pi_in_rho_order(pre, c_s, p_c, h_c, cactus_h(pre.q_r, delta))
        return torch.log(kl(pi_r, pre.q_r))  # -inf where KL = 0; KL ignores the order

    f64, dev = torch.float64, q.device
    n = q.shape[0]
    target = math.log(budget) if budget > 0 else -math.inf
    hi = torch.full((n,), _LOG_HIGH, dtype=f64, device=dev)  # does not fit (checked first)
    f_hi = log_kl(hi) - target
    if budget <= 0:  # only KL = 0 fits, and then every delta does (p = q)
        return torch.where(f_hi.isnan() | (f_hi <= 0), UNBOUNDED, 0.0).to(torch.float64)
    top = f_hi <= 0
    lo = torch.full((n,), _LOG_LOW, dtype=f64, device=dev)  # fits once `seen`
    seen = torch.zeros(n, dtype=torch.bool, device=q.device)
    done = top.clone()
    # Before a second point exists, the secant's slope is 1: KL grows like delta while delta is
    # small (pi − q like sqrt(delta), KL like its square).
    x_prev, f_prev = hi, torch.full_like(hi, math.nan)
    x = torch.full((n,), min(max(target, _LOG_LOW), _LOG_HIGH - 1), dtype=f64, device=dev)
    for _ in range(_MAX_STEPS):
        if bool(done.all()):
            break
        f = log_kl(x) - target
        ok = (f <= 0) & ~done
        lo, seen = torch.where(ok, x, lo), seen | ok
        hi = torch.where(ok | done, hi, x)
        slope = torch.where(f_prev.isnan(), 1.0, (f - f_prev) / (x - x_prev))
        step = -f / slope - _SHADE
        inside = torch.isfinite(step) & (slope > 0) & (x + step > lo) & (x + step < hi)
        floor_failed = ~ok & (x <= _LOG_LOW)  # not even 1e-9 fits
        # Done once a point fits and either the bracket or the step is below _TOL, or the point
        # already spends the budget to within _TOL (KL ≥ budget·e^−_TOL).
        close = ok & ((f > -_TOL) | (inside & (step.abs() < _TOL)))
        done |= floor_failed | (seen & (hi - lo < _TOL)) | close
        # Next: the secant point, else the midpoint, and 1e-9 itself once the bracket is
        # narrower than _TOL without a point that fits.
        nxt = torch.where(inside, x + step, 0.5 * (lo + hi))
        nxt = torch.where(~seen & (hi - lo < _TOL), lo, nxt)
        x_prev, f_prev, x = x, f, torch.where(done, x, nxt)
    delta = torch.where(seen, torch.exp(lo), torch.zeros_like(lo))
    return torch.where(top, UNBOUNDED, delta)
