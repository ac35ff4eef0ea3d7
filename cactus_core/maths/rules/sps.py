"""Lossless speculative sampling (Leviathan et al., 2023; Chen et al., 2023)."""

from __future__ import annotations

import torch

from cactus_core.maths.rules.base import (
    Capabilities,
    Drafted,
    RowStats,
    Rule,
    RuleCard,
    fallback_,
    min1_ratio,
)
from cactus_core.maths.validation import work_dtype


class SPS(Rule):
    """h = q: a(n) = min(1, q_n / p_n), residual normalise(max(0, q − p)), so pi = q."""

    name = "sps"
    card = RuleCard(
        family="lossless",
        colour="#848482",
        shown_first=True,
        description="lossless speculative sampling: a(n) = min(1, q_n / p_n)",
        in_words=(
            "Keeps the drafted token with probability q_n / p_n (always when the verifier likes it "
            "at least as much as the draft does) and otherwise draws a replacement from where the "
            "verifier wants more than the draft gave, so the text is exactly the verifier's."
        ),
        citation="Leviathan et al., ICML 2023; Chen et al., 2023",
        guarantee="pi = q exactly, whatever the draft",
    )
    caps = Capabilities(lossless=True)

    def h_n(self, d: Drafted) -> torch.Tensor:
        return d.qn

    def target(self, d: Drafted) -> torch.Tensor:
        return d.rows.q.clone()

    def residual_weights(self, d: Drafted) -> torch.Tensor:
        q, p = d.rows.q, d.rows.p
        return fallback_((q - p).clamp_min_(0.0), p)

    def _accept_all(self, p: torch.Tensor, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return min1_ratio(q, p)

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return q.to(work_dtype(q)).clone()
