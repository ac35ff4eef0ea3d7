"""Divergences between distributions over the last dim, and a rule's expected acceptance."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import torch

from cactus_core.maths.validation import work_dtype


def kl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """KL(a ‖ b) in nats over the last dim: [..., V] x2 -> [...].

    0·log(0/b) = 0; +inf where b = 0 < a. Rounding can leave a tiny negative sum for nearly
    equal rows; it is clamped to 0.
    """
    dtype = torch.promote_types(work_dtype(a), work_dtype(b))
    a = a.to(dtype)
    b = b.to(dtype)
    terms = torch.where(a > 0, a * torch.log(a / b), torch.zeros((), dtype=dtype, device=a.device))
    return terms.sum(-1).clamp_min(0.0)


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """TV(a, b) = (1/2)·sum |a − b| over the last dim: [..., V] x2 -> [...], in [0, 1]."""
    dtype = torch.promote_types(work_dtype(a), work_dtype(b))
    return 0.5 * (a.to(dtype) - b.to(dtype)).abs().sum(-1)


def reverse_kl(pi: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(q ‖ pi) in nats over the last dim, the divergence seen from the verifier:
    [..., V] x2 -> [...].

    +inf where pi = 0 < q, i.e. at a position where the rule can never write some token the
    verifier allows (`tas` writes argmax q on a rejection, so a token q allows, p never drafts
    and that is not q's argmax has pi = 0). That is returned as is, not clamped: the caller
    decides how to show it (a mean over positions that holds one is inf, and
    `frontier.mean_ci` keeps it so).
    """
    return kl(q, pi)


def support_kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p̂ ‖ q) in nats, p̂ = p restricted to q's support and renormalised: [..., V] x2 ->
    [...]; +inf where p has no mass on q's support.

    With a truncated q (top-k, top-p) the plain KL(p ‖ q) is +inf as soon as p puts any mass
    outside q's support, which says nothing about how the two compare where the verifier
    allows tokens at all. Without truncation p̂ = p and this is KL(p ‖ q). With m = p(q > 0),
    KL(p̂ ‖ q) = (1/m)·sum over q > 0 of p·log(p/q) − log m.
    """
    dtype = torch.promote_types(work_dtype(p), work_dtype(q))
    p, q = p.to(dtype), q.to(dtype)
    on = torch.where(q > 0, p, 0.0)  # [..., V] p on q's support
    mass = on.sum(-1)
    # xlogy(0, ·) = 0, so q = 0 (where on = 0) adds nothing
    s = (torch.xlogy(on, on) - torch.xlogy(on, q)).sum(-1)
    m = mass.clamp_min(torch.finfo(dtype).tiny)  # the rows with no mass are inf below
    inside = s / m - torch.log(m)
    return torch.where(mass > 0, inside.clamp_min(0.0), torch.inf)


def top_entropy(q: torch.Tensor, m: int) -> torch.Tensor:
    """-sum over q's m largest entries of q·log q (not renormalised): [..., V] -> [...].

    For m ≥ 3 it is at most log m: m entries with sum s give at most s·log(m/s) (spread evenly,
    by concavity), which grows with s up to m/e > 1, so s = 1 and equal entries 1/m are the
    maximum. FLy's gate reads it with m = 3 (its `calculate_topk_entropy`), so log 3 ≈ 1.0986
    is the most it can be."""
    top = q.to(work_dtype(q)).topk(min(m, q.shape[-1]), dim=-1).values
    return (-torch.xlogy(top, top).sum(-1)).clamp_min(0.0)


def entropy(a: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats over the last dim (0·log 0 = 0): [..., V] -> [...]."""
    return -_per_row(_sum_xlogx, a.to(work_dtype(a)))


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence in nats, [..., V] x2 -> [...], in [0, log 2].

    For rows summing to 1, JS = H((p + q)/2) − (H(p) + H(q))/2
    = log 2 + (1/2)·sum(p log p + q log q − s log s) with s = p + q, and
    s log s = p log s + q log s, so the three sums need three logs and no temporaries."""

    def terms(x: torch.Tensor, buf: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        own = _sum_xlogx(x, buf) + _sum_xlogx(y, buf)
        log_s = _log_into(torch.add(x, y, out=buf), buf)
        return own - _dot(x, log_s) - _dot(y, log_s)

    return (0.5 * _per_row(terms, p, q) + math.log(2)).clamp_(0.0, math.log(2))


def _log_into(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    """log max(x, tiny) into buf: finite, so 0·log 0 reads 0 in the dot products."""
    return torch.clamp_min(x, torch.finfo(x.dtype).tiny, out=buf).log_()


def _sum_xlogx(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    return _dot(x, _log_into(x, buf))


def _dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """sum over the last dim of x·y, without the product's temporary."""
    return cast(torch.Tensor, torch.linalg.vecdot(x, y))


# Entries per block of rows. One reused buffer this size stays clear of the page faults that
# fresh [..., V] temporaries cost past glibc's mmap threshold: 3–4x slower at B·k·V = 12.6M.
_BLOCK = 1 << 19


def _per_row(
    fn: Callable[..., torch.Tensor], x: torch.Tensor, *others: torch.Tensor
) -> torch.Tensor:
    """fn(rows of x [n, V], a scratch buffer [n, V], *the same rows of others) -> [n], block by
    block of rows: [..., V] -> [...]."""
    if x.dim() > 2 and not all(t.is_contiguous() for t in (x, *others)):
        # A view such as q[:, :k] would be copied whole by reshape: walk its first dim instead,
        # one slice at a time, or, when the slices are small (100,000 rounds of one position),
        # a block of slices at a time, copying one block of about _BLOCK entries.
        step = _BLOCK // max(x[0].numel(), 1)
        if step < 8:
            parts = [_per_row(fn, x[i], *(o[i] for o in others)) for i in range(x.shape[0])]
            return torch.stack(parts) if parts else x.new_empty(x.shape[:-1])
        parts = []
        for i in range(0, x.shape[0], step):
            block = [t[i : i + step] for t in (x, *others)]
            flat_block = [b.reshape(-1, b.shape[-1]) for b in block]
            parts.append(_per_row(fn, *flat_block).reshape(block[0].shape[:-1]))
        return torch.cat(parts) if parts else x.new_empty(x.shape[:-1])
    v = x.shape[-1]
    flat = x.reshape(-1, v)
    rest = [o.to(x.dtype).reshape(-1, v) for o in others]
    rows = max(1, _BLOCK // max(v, 1))
    out = torch.empty(flat.shape[0], dtype=x.dtype, device=x.device)
    buf = torch.empty((min(rows, flat.shape[0]), v), dtype=x.dtype, device=x.device)
    for i in range(0, flat.shape[0], rows):
        blk = flat[i : i + rows]
        out[i : i + rows] = fn(blk, buf[: blk.shape[0]], *(r[i : i + rows] for r in rest))
    return out.reshape(x.shape[:-1])
