"""Acceptance rules for speculative sampling, batched over any leading shape.

Notation (the paper's): p is the draft's distribution, q the verifier's, n the drafted token,
h the distribution the rule verifies against, pi the emitted distribution. Hugging Face and
vLLM call the draft q and the target p.

Every rule maps (q, p, n) at one position to
- h = adjusted_target(q, p, n) [..., V],
- a(n) = accept_probs(q, p, n) [...]: min(1, h_n / p_n) for every rule,
- r = residual(q, p, n) [..., V]: what a rejection samples from,
and a(n) for every possible draft at once: accept_probs_all(p, q) [..., V].

For `tas` and `topk` the decision is a threshold on q, not a comparison of h with p. For them
h^(n) is the distribution of the emitted token given that n was drafted: a point mass on n if
n passes the threshold, the residual otherwise. It is a proper distribution (so KL(h ‖ q) is
defined), and a(n) = min(1, h_n/p_n) still holds (h_n is 1 or 0).

Maths runs in float32 (bf16/fp16 inputs are upcast; float64 stays float64). The bisections
(cactus-exact's root, cactus-budget's delta, optimal's clip) run in float64 on small tensors.
The internal methods take per-position statistics `st` (threshold, per-position delta, the
optimal clip bounds) so that `verify` computes them once for [B, k] positions and then works
on gathered scalars and one [B, V] row per sequence.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from cactus_core.maths.divergence import entropy, kl
from cactus_core.maths.emitted import (
    CactusPrecomputed,
    cactus_c,
    cactus_monotone_emitted,
    pi_in_rho_order,
)
from cactus_core.maths.limit import clip_target, optimal_params, sort_nonneg
from cactus_core.maths.validation import (
    blockwise,
    check_int,
    check_number,
    check_pair,
    check_shape,
    id_checks,
    raise_if_any,
    work_dtype,
)

Stats = torch.Tensor | tuple[torch.Tensor, ...] | None

_DELTA_MAX = 1e9


def _fallback_(w: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Rows of w (non-negative) with no mass become `fallback`, in place. Arithmetic rather
    than torch.where: where over [B, V] is slow on CPU and this runs in every verify."""
    empty = (w.sum(-1, keepdim=True) <= 0).to(w.dtype)
    return w.addcmul_(fallback, empty)


def _min1_ratio(h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """min(1, h/p) with p = 0 counted as accepted (a token the draft cannot propose)."""
    return torch.where(p <= h, torch.ones_like(h), h / p)


def _gather(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    return x.gather(-1, n.unsqueeze(-1)).squeeze(-1)


def _unsq(st: torch.Tensor | float) -> torch.Tensor | float:
    return st.unsqueeze(-1) if isinstance(st, torch.Tensor) else st


def cactus_h(q: torch.Tensor, delta: torch.Tensor | float) -> torch.Tensor:
    """The paper's closed form h_n = min(1, q_n + sqrt(2·delta·q_n·(1 − q_n))), elementwise."""
    return torch.clamp_max(q + torch.sqrt(2 * delta * (q * (1 - q)).clamp_min(0.0)), 1.0)


def _binary_kl(g: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    zero = torch.zeros_like(g)
    up = torch.where(g > 0, g * torch.log(g / q), zero)
    down = torch.where(g < 1, (1 - g) * torch.log((1 - g) / (1 - q)), zero)
    return up + down


_NEWTON_STEPS = 8


def _kl_and_slope(x: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary KL(x ‖ q) and its derivative in x, for q < x < 1 (or x = q)."""
    up, down = torch.log(x / q), torch.log((1 - x) / (1 - q))
    return x * up + (1 - x) * down, up - down


def cactus_exact_h(q: torch.Tensor, delta: float) -> torch.Tensor:
    """The root gamma in [q, 1] of KL(gamma ‖ q) = delta (binary KL), elementwise.

    f(g) = KL(g ‖ q) − delta is increasing and convex on [q, 1], with f(q) = −delta. Newton
    on sqrt(KL) − sqrt(delta) (nearly linear near q, where KL is nearly quadratic; the
    closed form is its first step from q), started from the closed form and kept inside a
    bracket [lo, hi] by bisection. The answer is the zero of the chord through (lo, f(lo))
    and (hi, f(hi)): the chord lies above a convex f, so f ≤ 0 there, i.e. KL ≤ delta, and
    it is within rounding of the root once either end has converged. The same formula
    decides the bracket and the final check, which falls back to lo (then q) on rounding.
    The result is rounded towards q when cast back so the bound survives the cast.
    """
    q64 = q.double().clamp(0.0, 1.0)
    neg_log_q = -torch.log(q64)
    inner = (q64 > 0) & (neg_log_q > delta)  # root strictly inside (q, 1)
    qi = torch.where(inner, q64, 0.5)  # harmless values elsewhere
    lo, f_lo = qi.clone(), torch.full_like(qi, -delta)
    hi, f_hi = torch.ones_like(qi), torch.where(inner, neg_log_q, math.log(2)) - delta
    # start: the closed form, or for tiny q (far below the root there) the root of the
    # small-q form x·(log(x/q) − 1) ≈ delta, whichever is larger
    tiny_q = delta / (torch.log(delta / qi) - 1).clamp_min(1.0)
    x = torch.maximum(cactus_h(qi, delta), tiny_q)
    x = torch.where((x > lo) & (x < hi), x, 0.5 * (lo + hi))
    sqrt_delta = math.sqrt(delta)
    for _ in range(_NEWTON_STEPS):
        kl_x, slope = _kl_and_slope(x, qi)
        fx = kl_x - delta
        right = fx > 0
        hi, f_hi = torch.where(right, x, hi), torch.where(right, fx, f_hi)
        lo, f_lo = torch.where(right, lo, x), torch.where(right, f_lo, fx)
        root_kl = kl_x.clamp_min(1e-300).sqrt()
        step = x - (root_kl - sqrt_delta) * (2 * root_kl) / slope
        x = torch.where((step >= lo) & (step <= hi), step, 0.5 * (lo + hi))
    gamma = lo + (hi - lo) * (-f_lo / (f_hi - f_lo)).nan_to_num(0.0).clamp(0.0, 1.0)
    for _ in range(2):  # rounding: nudge towards lo (KL is ~quadratic, so 1e-9 is invisible)
        over = _kl_and_slope(gamma, qi)[0] > delta
        gamma = torch.where(over, gamma - 1e-9 * (gamma - lo), gamma)
    gamma = torch.where(_kl_and_slope(gamma, qi)[0] <= delta, gamma, lo)
    gamma = torch.where(inner, gamma, torch.where(q64 > 0, 1.0, 0.0))
    out = gamma.to(work_dtype(q))
    too_big = out.double() > gamma
    return torch.where(too_big, torch.nextafter(out, torch.zeros_like(out)), out)


def _cactus_target(
    q: torch.Tensor, n: torch.Tensor, qn: torch.Tensor, hn: torch.Tensor
) -> torch.Tensor:
    """h^(n) [..., V]: h_n at n, c_n·q elsewhere, c_n = (1 − h_n)/(1 − q_n)."""
    c = torch.where(qn < 1, (1 - hn) / (1 - qn), torch.zeros_like(qn)).clamp(0.0, 1.0)
    h = c.unsqueeze(-1) * q
    return h.scatter_(-1, n.unsqueeze(-1), hn.unsqueeze(-1))


class Rule:
    """Base class. Subclasses fill in the internal hooks; the public methods validate."""

    name: ClassVar[str]
    param_specs: ClassVar[dict[str, tuple[float, float, float, bool]]] = {}
    # (default, low, high, integer)

    def __init__(self, **params: Any) -> None:
        self.params: dict[str, float | int] = {}
        for key, (default, low, high, integer) in self.param_specs.items():
            value = params.get(key, default)
            self.params[key] = check_number(self.name, key, value, low, high, integer)

    # -- identity -------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return self.name

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"make_rule({self.name!r}{', ' if args else ''}{args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rule) and (self.name, self.params) == (other.name, other.params)

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.params.items()))))

    # -- hooks (q, p in the work dtype; st from _stats) -------------------------------------
    def _stats(self, q: torch.Tensor, p: torch.Tensor) -> Stats:
        """Per-position statistics [...] that need whole rows; None if the rule needs none."""
        return None

    def _h_n(self, qn: torch.Tensor, pn: torch.Tensor, st: Stats) -> torch.Tensor:
        raise NotImplementedError

    def _accept(self, qn: torch.Tensor, pn: torch.Tensor, st: Stats) -> torch.Tensor:
        return _min1_ratio(self._h_n(qn, pn, st), pn)

    def _target(
        self,
        q: torch.Tensor,
        p: torch.Tensor,
        n: torch.Tensor,
        qn: torch.Tensor,
        pn: torch.Tensor,
        st: Stats,
    ) -> torch.Tensor:
        raise NotImplementedError

    def _residual_weights(
        self,
        q: torch.Tensor,
        p: torch.Tensor,
        n: torch.Tensor,
        qn: torch.Tensor,
        pn: torch.Tensor,
        st: Stats,
    ) -> torch.Tensor:
        """Unnormalised residual max(0, h − p) [..., V], a fresh tensor (verify edits it in
        place). A row with no mass there has h = p (both sum to 1), so the draft is never
        rejected except through rounding; such rows fall back to p, which is h."""
        w = self._target(q, p, n, qn, pn, st) - p
        return _fallback_(w.clamp_min_(0.0), p)

    def _accept_all(self, p: torch.Tensor, q: torch.Tensor, st: Stats) -> torch.Tensor:
        raise NotImplementedError

    def _emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    # -- public API -------------------------------------------------------------------------
    def _prepare(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor | None, validate: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        check_pair(p, q, validate)
        if n is not None:
            check_int("n", n)
            check_shape("n", n, q.shape[:-1])
            if validate:
                raise_if_any(id_checks("n", n, q.shape[-1]))
            n = n.long()
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        return q.to(dtype), p.to(dtype), n

    def adjusted_target(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, validate: bool = True
    ) -> torch.Tensor:
        """h^(n) [..., V] for verifier q, draft p [..., V] and drafted ids n [...]."""
        q, p, n = self._prepare(q, p, n, validate)
        st = self._stats(q, p)
        return self._target(q, p, n, _gather(q, n), _gather(p, n), st)

    def accept_probs(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, validate: bool = True
    ) -> torch.Tensor:
        """a(n) [...]: the chance of accepting the drafted n."""
        q, p, n = self._prepare(q, p, n, validate)
        return self._accept(_gather(q, n), _gather(p, n), self._stats(q, p))

    def residual(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, validate: bool = True
    ) -> torch.Tensor:
        """r [..., V]: the normalised distribution sampled when n is rejected."""
        q, p, n = self._prepare(q, p, n, validate)
        w = self._residual_weights(q, p, n, _gather(q, n), _gather(p, n), self._stats(q, p))
        return w / w.sum(-1, keepdim=True)

    def accept_probs_all(
        self, p: torch.Tensor, q: torch.Tensor, validate: bool = True
    ) -> torch.Tensor:
        """a(n) for every possible draft n: p, q [..., V] -> [..., V]."""
        q, p, _ = self._prepare(q, p, None, validate)
        return self._accept_all(p, q, self._stats(q, p))

    def accept_probs_all_and_emitted(
        self, p: torch.Tensor, q: torch.Tensor, validate: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(a(n) for every n, pi), both [..., V]: what the Playground redraws on each move.

        Equal to `accept_probs_all` and `emitted_distribution`; rules whose h costs a solve
        (the exact root, the budget search) compute it once for both.
        """
        q, p, _ = self._prepare(q, p, None, validate)
        return self._accept_all_and_emitted(p, q)

    def _accept_all_and_emitted(
        self, p: torch.Tensor, q: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._accept_all(p, q, self._stats(q, p)), self._emitted(p, q)


class SPS(Rule):
    """Lossless speculative sampling: h = q, so pi = q."""

    name = "sps"

    def _h_n(self, qn, pn, st):
        return qn

    def _target(self, q, p, n, qn, pn, st):
        return q.clone()

    def _residual_weights(self, q, p, n, qn, pn, st):
        return _fallback_((q - p).clamp_min_(0.0), p)

    def _accept_all(self, p, q, st):
        return _min1_ratio(q, p)

    def _emitted(self, p, q):
        return q.to(work_dtype(q)).clone()


class Cactus(Rule):
    """Cactus with the paper's closed-form (second-order) h_n."""

    name = "cactus"
    param_specs: ClassVar = {"delta": (1.0, 0.0, _DELTA_MAX, False)}

    @property
    def label(self) -> str:
        return f"{self.name} δ={self.params['delta']:g}"

    def _delta(self, st: Stats) -> torch.Tensor | float:
        return self.params["delta"]

    def _hfun(self, q: torch.Tensor, delta: torch.Tensor | float) -> torch.Tensor:
        return cactus_h(q, delta)

    def _h_n(self, qn, pn, st):
        return self._hfun(qn, self._delta(st))

    def _target(self, q, p, n, qn, pn, st):
        return _cactus_target(q, n, qn, self._h_n(qn, pn, st))

    def _residual_weights(self, q, p, n, qn, pn, st):
        h = self._target(q, p, n, qn, pn, st)  # fresh: reuse its buffer for h − p
        return _fallback_(h.sub_(p).clamp_min_(0.0), p)

    def _accept_all(self, p, q, st):
        return _min1_ratio(self._hfun(q, _unsq(self._delta(st))), p)

    def _emitted(self, p, q):
        dtype = work_dtype(q)
        p64, q64 = p.double(), q.double()
        delta = _unsq(self._delta(self._stats(q64, p64)))
        # c = (1 − h)/(1 − q) falls as q grows, for the closed form and the exact root alike
        pi = cactus_monotone_emitted(p64, q64, lambda x: self._hfun(x, delta).double())
        return pi.to(dtype)

    def _accept_all_and_emitted(self, p, q):
        dtype = work_dtype(q)
        p64, q64 = p.double(), q.double()
        delta = _unsq(self._delta(self._stats(q64, p64)))
        h = self._hfun(q64, delta).double()  # [..., V] in vocabulary order, solved once
        pi = cactus_monotone_emitted(p64, q64, h_vocab=h)
        return _min1_ratio(h, p64).to(dtype), pi.to(dtype)


class CactusExact(Cactus):
    """Cactus with h_n the exact root of KL(h_n ‖ q_n) = delta (binary KL)."""

    name = "cactus-exact"

    def _hfun(self, q, delta):
        return cactus_exact_h(q, float(delta))


class CactusBudget(Cactus):
    """Cactus with, per position, the largest delta' whose emitted pi has KL(pi ‖ q) ≤ budget.

    Bisection on log delta' in [1e-9, 1e9], 16 steps (delta' within 0.07% of the edge), one
    emitted pi per step, reusing one sort by rho and one by q; it keeps the side that fits.
    delta' = 0 (sps) when even 1e-9 does not fit, 1e9 when that does. It assumes
    KL(pi(delta) ‖ q) grows with delta, which held in every case we tried.
    """

    name = "cactus-budget"
    param_specs: ClassVar = {"budget": (0.1, 0.0, _DELTA_MAX, False)}
    steps: ClassVar[int] = 16

    @property
    def label(self) -> str:
        return f"{self.name} KL≤{self.params['budget']:g}"

    def _delta(self, st):
        return st

    def _stats(self, q, p):
        return budget_delta(p, q, self.params["budget"], self.steps).to(q.dtype)


def budget_delta(p: torch.Tensor, q: torch.Tensor, budget: float, steps: int = 16) -> torch.Tensor:
    """Per position the largest cactus delta with KL(pi ‖ q) ≤ budget: [..., V] -> [...]."""
    return blockwise(lambda pb, qb: _budget_delta_rows(pb, qb, budget, steps), p, q)


def _budget_delta_rows(p: torch.Tensor, q: torch.Tensor, budget: float, steps: int) -> torch.Tensor:
    p64, q64 = p.double(), q.double()
    pre = CactusPrecomputed(p64, q64)
    # c falls as q grows under the closed form: q's descending order sorts c for every delta,
    # and h is elementwise in q, so every step works in the two fixed orders without sorting.
    q_c, order = sort_nonneg(q64, descending=True)
    p_c = p64.gather(-1, order)

    def fits(log_delta: torch.Tensor) -> torch.Tensor:
        delta = torch.exp(log_delta).unsqueeze(-1)
        h_c = cactus_h(q_c, delta)
        c_s = torch.cummax(cactus_c(q_c, h_c), -1).values
        pi_r = pi_in_rho_order(pre, c_s, p_c, h_c, cactus_h(pre.q_r, delta))
        return kl(pi_r, pre.q_r) <= budget  # KL does not care about the order

    shape = q.shape[:-1]
    lo = torch.full(shape, math.log(1e-9), dtype=torch.float64, device=q.device)
    hi = torch.full(shape, math.log(_DELTA_MAX), dtype=torch.float64, device=q.device)
    top_fits = fits(hi)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = fits(mid)
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid)
    delta = torch.where(fits(lo), torch.exp(lo), torch.zeros_like(lo))
    return torch.where(top_fits, torch.full_like(lo, _DELTA_MAX), delta)


class TAS(Rule):
    """Threshold acceptance: accept n iff q_n > min(epsilon, alpha·exp(−H(q))); on rejection
    emit argmax q."""

    name = "tas"
    param_specs: ClassVar = {
        "epsilon": (0.09, 0.0, 1.0, False),
        "alpha": (0.3, 0.0, 1e6, False),
    }

    @property
    def label(self) -> str:
        return f"{self.name} ε={self.params['epsilon']:g} α={self.params['alpha']:g}"

    def _stats(self, q, p):
        return torch.clamp_max(
            self.params["alpha"] * torch.exp(-entropy(q)), self.params["epsilon"]
        ).to(q.dtype)

    def _accept(self, qn, pn, st):
        return (qn > st).to(qn.dtype)

    def _target(self, q, p, n, qn, pn, st):
        drafted = torch.nn.functional.one_hot(n, q.shape[-1]).to(q.dtype)
        return torch.where(
            (qn > st).unsqueeze(-1), drafted, self._residual_weights(q, p, n, qn, pn, st)
        )

    def _residual_weights(self, q, p, n, qn, pn, st):
        return torch.nn.functional.one_hot(q.argmax(-1), q.shape[-1]).to(q.dtype)

    def _accept_all(self, p, q, st):
        return (q > st.unsqueeze(-1)).to(q.dtype)

    def _emitted(self, p, q):
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p, q = p.to(dtype), q.to(dtype)
        keep = self._accept_all(p, q, self._stats(q, p))
        rejected = (p * (1 - keep)).sum(-1, keepdim=True)
        top = torch.nn.functional.one_hot(q.argmax(-1), q.shape[-1]).to(dtype)
        return p * keep + rejected * top


class TopK(Rule):
    """Accept n iff q_n > 0 and q_n is at least the k_top-th largest q (ties all pass); on
    rejection sample normalise(max(0, 1[passes] − p))."""

    name = "topk"
    param_specs: ClassVar = {"k_top": (5, 1, 2**31 - 1, True)}

    @property
    def label(self) -> str:
        return f"{self.name} k={self.params['k_top']}"

    def _stats(self, q, p):
        k = min(int(self.params["k_top"]), q.shape[-1])
        return kth_largest(q, k)

    def _passes(self, q: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
        # q_n > 0 as well: at T = 0 the k-th largest q is 0, and the rule must stay exact match
        return (q >= threshold) & (q > 0)

    def _accept(self, qn, pn, st):
        return self._passes(qn, st).to(qn.dtype)

    def _target(self, q, p, n, qn, pn, st):
        drafted = torch.nn.functional.one_hot(n, q.shape[-1]).to(q.dtype)
        w = self._residual_weights(q, p, n, qn, pn, st)
        r = w / w.sum(-1, keepdim=True)
        return torch.where(self._passes(qn, st).unsqueeze(-1), drafted, r)

    def _residual_weights(self, q, p, n, qn, pn, st):
        inside = self._passes(q, st.unsqueeze(-1)).to(q.dtype)
        # no mass only if the draft is certain of the one passing token (never rejected then)
        return _fallback_((inside - p).clamp_min_(0.0), inside)

    def _accept_all(self, p, q, st):
        return self._passes(q, st.unsqueeze(-1)).to(q.dtype)

    def _emitted(self, p, q):
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p, q = p.to(dtype), q.to(dtype)
        st = self._stats(q, p)
        keep = self._accept_all(p, q, st)
        rejected = (p * (1 - keep)).sum(-1, keepdim=True)
        w = self._residual_weights(q, p, None, None, None, st)
        return p * keep + rejected * w / w.sum(-1, keepdim=True)


_CHUNK = 64


def kth_largest(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest entry of each row, [..., V] -> [...], for 1 ≤ k ≤ V.

    For small k, through chunk maxima: the k chunks with the largest maxima hold the k
    largest entries (any entry elsewhere is at most its chunk's maximum, below k maxima
    already counted), so one read pass for the maxima and a top-k over k·64 entries replace
    a top-k over the whole row (three times faster at V = 49,152).
    """
    v = x.shape[-1]
    if v % _CHUNK or k * _CHUNK * 4 > v or x.numel() == 0:
        return x.topk(k, dim=-1).values[..., -1]
    chunks = x.unflatten(-1, (v // _CHUNK, _CHUNK))  # [..., V/64, 64]
    top = chunks.amax(-1).topk(k, dim=-1).indices  # [..., k]
    cand = chunks.gather(-2, top.unsqueeze(-1).expand(*top.shape, _CHUNK))  # [..., k, 64]
    return cand.flatten(-2).topk(k, dim=-1).values[..., -1]


class Interp(Rule):
    """Verify against the mixture h = alpha·p + (1 − alpha)·q; pi = h."""

    name = "interp"
    param_specs: ClassVar = {"alpha": (0.5, 0.0, 1.0, False)}

    @property
    def label(self) -> str:
        return f"{self.name} α={self.params['alpha']:g}"

    def _h_n(self, qn, pn, st):
        alpha = self.params["alpha"]
        return alpha * pn + (1 - alpha) * qn

    def _target(self, q, p, n, qn, pn, st):
        alpha = self.params["alpha"]
        return alpha * p + (1 - alpha) * q

    def _accept_all(self, p, q, st):
        return _min1_ratio(self._target(q, p, None, None, None, st), p)

    def _emitted(self, p, q):
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        return self._target(q.to(dtype), p.to(dtype), None, None, None, None)


class Optimal(Rule):
    """Verify against pi* = clip(p, B·q, A·q), the most-accepting pi with KL(pi ‖ q) ≤ budget
    (see `cactus_core.maths.limit`). The same h for every n, so pi = pi*."""

    name = "optimal"
    param_specs: ClassVar = {"budget": (0.1, 0.0, _DELTA_MAX, False)}

    @property
    def label(self) -> str:
        return f"{self.name} KL≤{self.params['budget']:g}"

    def _stats(self, q, p):
        return optimal_params(p, q, self.params["budget"], validate=False)  # (B, A) float64

    def _h_n(self, qn, pn, st):
        lower, upper = st
        return clip_target(pn.unsqueeze(-1), qn.unsqueeze(-1), lower, upper).squeeze(-1)

    def _target(self, q, p, n, qn, pn, st):
        lower, upper = st
        return clip_target(p, q, lower, upper)

    def _accept_all(self, p, q, st):
        return _min1_ratio(self._target(q, p, None, None, None, st), p)

    def _emitted(self, p, q):
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p64, q64 = p.double(), q.double()
        pi = clip_target(p64, q64, *self._stats(q64, p64))
        return (pi / pi.sum(-1, keepdim=True)).to(dtype)


_RULES: dict[str, type[Rule]] = {
    cls.name: cls for cls in (SPS, Cactus, CactusExact, CactusBudget, TAS, TopK, Interp, Optimal)
}
RULE_NAMES: tuple[str, ...] = tuple(_RULES)


def rule_params(name: str) -> dict[str, dict[str, float | bool]]:
    """Parameters of a rule with default, low, high and whether integer (for widgets)."""
    cls = _rule_class(name)
    return {
        key: {"default": d, "low": lo, "high": hi, "integer": integer}
        for key, (d, lo, hi, integer) in cls.param_specs.items()
    }


def _rule_class(name: str) -> type[Rule]:
    if name not in _RULES:
        raise ValueError(f"unknown rule {name!r}; allowed: {', '.join(RULE_NAMES)}")
    return _RULES[name]


def make_rule(name: str, **params: Any) -> Rule:
    """A rule by name with its parameters (defaults fill the ones left out).

    sps: –; cactus, cactus-exact: delta ≥ 0 (default 1); cactus-budget, optimal: budget ≥ 0
    nats (default 0.1); tas: epsilon in [0, 1] (0.09), alpha ≥ 0 (0.3); topk: k_top ≥ 1 (5);
    interp: alpha in [0, 1] (0.5).
    """
    cls = _rule_class(name)
    unknown = sorted(set(params) - set(cls.param_specs))
    if unknown:
        allowed = ", ".join(cls.param_specs) or "none"
        raise ValueError(
            f"rule {name!r} got unknown parameter(s) {', '.join(unknown)}; allowed: {allowed}"
        )
    return cls(**params)
