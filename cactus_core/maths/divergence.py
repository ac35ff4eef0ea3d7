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
    """(1/2)·sum |a − b| over the last dim: [..., V] x2 -> [...]."""
    dtype = torch.promote_types(work_dtype(a), work_dtype(b))
    return 0.5 * (a.to(dtype) - b.to(dtype)).abs().sum(-1)


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
