"""The exact emitted distribution pi of the Cactus family at one position, in O(V log V).

pi(x) = p(x)·a(x) + sum_n p(n)·(1 − a(n))·r_n(x): the token written is the draft when it is
accepted, else a draw from the residual of whichever n was drafted.

Brute force costs O(V²). For the Cactus family (drafting n verifies against h^(n), equal to
c_n·q off n, with c_n = (1 − h_n)/(1 − q_n)) this module gets pi in O(V log V):

- n can only be rejected when h_n < p_n; then c_n·q_n ≤ q_n ≤ h_n < p_n, so r_n has no mass
  on n and its normaliser is Z_n = S(c_n) with S(c) = sum_j max(0, c·q_j − p_j)
  = c·Q(rho < c) − P(rho < c), rho = p/q: one sort by rho plus prefix sums.
- With w_n = p(n)(1 − a(n)) / Z_n = max(0, p_n − h_n) / Z_n, the residual part of pi(x) is
  sum over n with c_n > rho_x of w_n·(c_n·q_x − p_x) (the n = x term drops out by the bound
  above): one sort by c plus suffix sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch

from cactus_core.maths.tensor_ops import excl_cumsum, sort_nonneg, take

# Z_n > 0 whenever n is rejectable (Z_n ≥ p_n − h_n); the floor only guards 0/0 rounding.
_TINY = 1e-300


class CactusPrecomputed:
    """The sort by rho = p/q with prefix sums, reusable across deltas (cactus-budget)."""

    def __init__(self, p: torch.Tensor, q: torch.Tensor) -> None:
        inf = torch.tensor(math.inf, dtype=p.dtype, device=p.device)
        rho = torch.where(q > 0, p / q, inf)
        self.rho_s, self.rho_order = sort_nonneg(rho)  # [..., V]
        self.q_r = q.gather(-1, self.rho_order)  # q and p in rho order
        self.p_r = p.gather(-1, self.rho_order)
        self.qc = excl_cumsum(self.q_r)  # [..., V+1]
        self.pc = excl_cumsum(self.p_r)


def pi_in_rho_order(
    pre: CactusPrecomputed,
    c_s: torch.Tensor,
    p_c: torch.Tensor,
    h_c: torch.Tensor,
    h_r: torch.Tensor,
) -> torch.Tensor:
    """pi in rho order [..., V], from c sorted ascending (c_s) with p and h in that same
    order (p_c, h_c) and h in rho order (h_r). Both searches take sorted queries, which keeps
    the binary searches cache-friendly."""
    zero = torch.zeros((), dtype=c_s.dtype, device=c_s.device)
    rejectable = (p_c - h_c).clamp_min(0.0)  # p(n)(1 − a(n))
    i = torch.searchsorted(pre.rho_s, c_s)  # #{j: rho_j < c_n}
    z = c_s * take(pre.qc, i) - take(pre.pc, i)  # Z_n
    w = torch.where(rejectable > 0, rejectable / z.clamp_min(_TINY), zero)
    wc = excl_cumsum(w * c_s)
    ws = excl_cumsum(w)
    j = torch.searchsorted(c_s, pre.rho_s, right=True)  # n with c_n > rho_x sit at j and after
    sum_wc = wc[..., -1:] - take(wc, j)
    sum_w = ws[..., -1:] - take(ws, j)
    residual_mass = (pre.q_r * sum_wc - pre.p_r * sum_w).clamp_min(0.0)
    return torch.minimum(pre.p_r, h_r) + residual_mass


def cactus_c(q: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """c_n = (1 − h_n)/(1 − q_n), 0 where q_n = 1 (then h_n = 1 and n is always accepted)."""
    zero = torch.zeros((), dtype=q.dtype, device=q.device)
    return torch.where(q < 1, (1 - h) / (1 - q), zero).clamp(0.0, 1.0)


def cactus_monotone_emitted(
    p: torch.Tensor,
    q: torch.Tensor,
    hfun: Callable[[torch.Tensor], torch.Tensor] | None = None,
    h_vocab: torch.Tensor | None = None,
    compact: bool = True,
) -> torch.Tensor:
    """pi [..., V] for a Cactus-family rule whose h_n = hfun(q_n) elementwise and whose
    c_n = (1 − h_n)/(1 − q_n) falls as q_n grows (the closed form and the exact root both).

    Sorting q descending then sorts c too, and hfun runs on q already in that order, so h
    needs no gather on the c side (and hfun runs once per token, which matters for the
    exact root's Newton solve). A caller that already holds h for every token (h_vocab,
    [..., V] in vocabulary order) passes it instead of hfun.

    Where p has mass on a part of the vocabulary only (a draft whose head covers some of the
    ids), the rows are first compacted to that part plus one token for the rest
    (`DraftSupport`): the same pi, from rows a fraction as long. compact=False skips that
    check, for rows a caller has compacted already.
    """
    if compact and h_vocab is None and hfun is not None:
        support = DraftSupport.of(p)
        if support is not None:
            pi = _monotone_emitted(support.compact(p), support.compact(q), hfun, None)
            return support.expand(pi, q)
    return _monotone_emitted(p, q, hfun, h_vocab)


def _monotone_emitted(
    p: torch.Tensor,
    q: torch.Tensor,
    hfun: Callable[[torch.Tensor], torch.Tensor] | None,
    h_vocab: torch.Tensor | None,
) -> torch.Tensor:
    pre = CactusPrecomputed(p, q)
    q_c, c_order = sort_nonneg(q, descending=True)  # [..., V]
    if h_vocab is not None:
        h_c = h_vocab.gather(-1, c_order)
    elif hfun is not None:
        h_c = hfun(q_c)
    else:
        raise ValueError("cactus_monotone_emitted needs hfun or h_vocab")
    c_s = torch.cummax(cactus_c(q_c, h_c), -1).values  # rounding can dent the order
    # h in rho order: back to vocabulary order, then into rho order
    h = torch.empty_like(h_c).scatter_(-1, c_order, h_c)
    pi_r = pi_in_rho_order(pre, c_s, p.gather(-1, c_order), h_c, h.gather(-1, pre.rho_order))
    return h.scatter_(-1, pre.rho_order, pi_r)  # h's buffer is free again


# Below this vocabulary size compacting saves too little to pay for itself.
_COMPACT_MIN = 4096


@dataclass(frozen=True)
class DraftSupport:
    """The ids where some row of p has mass (`cols` [S]), when they are at most half of the
    vocabulary: a draft with a head over part of the ids (the embedded feature draft scores
    12,288 of 49,152) gives p = 0 on the rest.

    For the Cactus family every token x with p_x = 0 behaves alike: it is never rejected as a
    draft (w_x = 0), it counts c·q_x towards every Z_n (max(0, c·q_x − 0) is linear in q_x),
    and it gets pi_x = q_x · sum over n with c_n > 0 of w_n·c_n, one factor for all of them.
    So those tokens can stand as one token whose q is their total: `compact` rows [..., S + 1]
    give the same Z_n, the same pi on the support, and pi of the merged token, which
    `expand` shares out in proportion to q. KL(pi ‖ q) of the compact rows equals the full
    rows' too: sum of pi_x·log(pi_x / q_x) over the merged tokens is the merged token's term.
    """

    cols: torch.Tensor  # [S] int64
    rest: torch.Tensor  # [V] bool: the ids outside the support

    @classmethod
    def of(cls, p: torch.Tensor) -> DraftSupport | None:
        v = p.shape[-1]
        if v < _COMPACT_MIN or p.numel() == 0:
            return None
        mass = (p.reshape(-1, v) > 0).any(0)  # [V]
        cols = mass.nonzero().squeeze(-1)
        if 2 * cols.numel() > v:
            return None
        return cls(cols, ~mass)

    def compact(self, x: torch.Tensor) -> torch.Tensor:
        """[..., V] -> [..., S + 1]: the support's entries, then the total of the rest."""
        return torch.cat([x[..., self.cols], self._rest_total(x)], -1)

    def expand(self, pi: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """pi of compact rows [..., S + 1] -> [..., V], the merged token's mass shared out over
        the rest in proportion to q."""
        rest = self.rest.to(pi.dtype)
        q_rest = self._rest_total(q.to(pi.dtype))
        scale = torch.where(q_rest > 0, pi[..., -1:] / q_rest.clamp_min(_TINY), 0.0)
        out = q.to(pi.dtype) * (scale * rest)
        out[..., self.cols] = pi[..., :-1]
        return out

    def _rest_total(self, x: torch.Tensor) -> torch.Tensor:
        rest = torch.linalg.vecdot(x, self.rest.to(x.dtype))
        return cast(torch.Tensor, rest).unsqueeze(-1)  # [..., 1]
