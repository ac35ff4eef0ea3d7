"""Every rule at one position, side by side: each rule's h, a(n), residual, pi and divergences
(the Playground's table, and the rows Decode's inspector and a tree's rows show)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

from cactus_core.app.shared.positions import Position
from cactus_core.maths.divergence import kl
from cactus_core.maths.rules import Rule


@dataclass(frozen=True)
class RuleRow:
    """One rule at one position. Vectors are [V] float32 on the CPU."""

    name: str
    label: str
    accept_drafted: float  # a(n) for the drafted n
    expected_acceptance: float  # Σ_n p(n)·a(n)
    kl_h_q: float  # KL(h ‖ q) for the drafted n
    kl_pi_q: float  # KL(pi ‖ q), pi exact
    h: torch.Tensor
    residual: torch.Tensor
    accept_all: torch.Tensor  # a(n) for every possible n
    pi: torch.Tensor


def compare_rules(position: Position, rules: Sequence[Rule]) -> list[RuleRow]:
    """Each rule's h, a(n), residual, pi and divergences at one position.

    Rows are cached per (position, rule), so when one slider moves only the rules it feeds are
    recomputed; the rest come back at once.
    """
    return [_rule_row(position, rule) for rule in rules]


# A row holds six [V] float32 vectors (1.2 MB at V = 49,152); 48 rows bound the cache.
@lru_cache(maxsize=48)
def _rule_row(position: Position, rule: Rule) -> RuleRow:
    p, q = position.p, position.q
    n = torch.tensor(position.drafted)
    h = rule.adjusted_target(q, p, n)
    accept_all, pi = rule.accept_probs_all_and_emitted(p, q)
    return RuleRow(
        name=rule.name,
        label=rule.label,
        accept_drafted=float(accept_all[position.drafted]),
        # Σ_n p(n)·a(n), as divergence.expected_acceptance, reusing the a(n) already computed
        expected_acceptance=float((p * accept_all).sum()),
        kl_h_q=float(kl(h, q)),
        kl_pi_q=float(kl(pi, q)),
        h=h,
        residual=rule.residual(q, p, n),
        accept_all=accept_all,
        pi=pi,
    )


def rule_table(rows: Sequence[RuleRow]) -> list[dict[str, object]]:
    """Rows for st.dataframe: one dict per rule."""
    return [
        {
            "rule": r.label,
            "a(n), drafted": r.accept_drafted,
            "expected acceptance": r.expected_acceptance,
            "KL(h ‖ q)": r.kl_h_q,
            "KL(pi ‖ q)": r.kl_pi_q,
        }
        for r in rows
    ]
