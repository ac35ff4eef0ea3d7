"""Divergences between distributions over the last dim, and a rule's expected acceptance."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from cactus_core.maths.validation import check_pair, work_dtype

if TYPE_CHECKING:
    from cactus_core.maths.rules import Rule


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
    return torch.special.entr(a.to(work_dtype(a))).sum(-1)


def expected_acceptance(rule: Rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_n p(n)·a(n): the chance that one drafted token is accepted. p, q [..., V] -> [...]."""
    check_pair(p, q)
    a = rule.accept_probs_all(p, q, validate=False)
    return (p.to(a.dtype) * a).sum(-1)
