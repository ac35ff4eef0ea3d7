"""What a rule does at one position, read through the rule: the chance a drafted token is
accepted and the exact emitted distribution pi.

pi(x) = p(x)·a(x) + sum_n p(n)·(1 − a(n))·r_n(x): the token written is the draft when it is
accepted, else a draw from the residual of whichever n was drafted. Each rule gives pi by a
direct formula (`Rule.emitted`); the Cactus family's O(V log V) one is
`rules.cactus_emitted`.
"""

from __future__ import annotations

import torch

from cactus_core.maths.rules import Rule
from cactus_core.maths.validation import check_pair


def expected_acceptance(rule: Rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_n p(n)·a(n): the chance that one drafted token is accepted. p, q [..., V] -> [...]."""
    check_pair(p, q)
    a = rule.accept_probs_all(p, q, validate=False)
    return (p.to(a.dtype) * a).sum(-1)


def emitted_distribution(rule: Rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """pi [..., V] (float32; float64 for float64 input) for p (draft), q (verifier) [..., V]."""
    check_pair(p, q)
    return rule.emitted(p, q)


def emitted_kl(rule: Rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(pi ‖ q) [...] in nats of the exact emitted pi, for p, q [..., V]: what a decode's
    emitted KL sums (the Cactus family gets it from rows compacted to the draft's support)."""
    check_pair(p, q)
    return rule.emitted_kl(p, q)


def emitted_distribution_reference(rule: Rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Brute-force O(V²) pi from the rule's own a(n) and r_n, for tests only.

    p, q [V] (one position) -> pi [V], in float64.
    """
    check_pair(p, q)
    if p.dim() != 1:
        raise ValueError("emitted_distribution_reference takes one position: p, q of shape [V]")
    v = p.shape[-1]
    p64, q64 = p.double(), q.double()
    ps, qs = p64.expand(v, v), q64.expand(v, v)  # row n: the position with n drafted
    n = torch.arange(v, device=p.device)
    a = rule.accept_probs(qs, ps, n)  # [V]
    r = rule.residual(qs, ps, n)  # [V, V]
    return p64 * a + ((p64 * (1 - a)).unsqueeze(-1) * r).sum(0)
