"""Rules that pick, per position, whether to trust the draft or the verifier.

At a position that defers to the draft, h = p (restricted to q's support and renormalised,
so that no token the verifier rules out is emitted); elsewhere h = q. Either way h is one
distribution for every drafted n, so a(n) = min(1, h_n / p_n), the residual is
normalise(max(0, h − p)), and pi = h. Where the draft puts all its mass off q's support
the position cannot defer (h = q).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from cactus_core.maths.divergence import js_divergence, support_kl
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
    where_q_positive,
)
from cactus_core.maths.validation import work_dtype

# p's mass on q's support is a sum of probabilities: this floor only guards 0/0.
_TINY = 1e-30


class Deferral(Rule):
    """Verify against p (on q's support) where `_defers`, else against q."""

    caps = Capabilities(needs_rows=True)

    def _defers(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Whether each position trusts the draft: p, q [..., V] -> bool [...]."""
        raise NotImplementedError

    def position_stats(self, q: torch.Tensor, p: torch.Tensor) -> RowStats:
        """(defers as 0/1,) [...]. p's mass on q's support is left to the rows that need it:
        deciding does not (a deferring position accepts every draft q allows)."""
        return (self._defers(p, q).to(q.dtype),)

    def _target_rows(self, q: torch.Tensor, p: torch.Tensor, stats: RowStats) -> torch.Tensor:
        # in place on one fresh buffer: this runs on the residual row of every verify
        h = torch.where(q > 0, p, 0.0)  # p on q's support
        mass = h.sum(-1, keepdim=True)
        defers = stats[0].unsqueeze(-1) * (mass > 0).to(q.dtype)
        return h.mul_(defers / mass.clamp_min(_TINY)).addcmul_(q, 1 - defers)

    def accept(self, d: Drafted) -> torch.Tensor:
        # deferring: h_n = p_n / mass ≥ p_n on q's support
        return where_q_positive(torch.where(d.stats[0] > 0, 1.0, min1_ratio(d.qn, d.pn)), d.qn)

    def target(self, d: Drafted) -> torch.Tensor:
        return self._target_rows(d.rows.q, d.rows.p, d.stats)

    def residual_weights(self, d: Drafted) -> torch.Tensor:
        q, p = d.rows.q, d.rows.p
        w = self._target_rows(q, p, d.stats).sub_(p).clamp_min_(0.0)
        return fallback_(w, q)  # empty only where nothing on q's support is rejected

    def _accept_all(self, p: torch.Tensor, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return min1_ratio(self._target_rows(q, p, stats), p)

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p, q = p.to(dtype), q.to(dtype)
        return self._target_rows(q, p, self.position_stats(q, p))


class Cascade(Deferral):
    """Speculative cascade with Chow's deferral rule: trust the draft where it is confident,
    max p ≥ 1 − alpha, else the verifier."""

    name = "cascade"
    card = RuleCard(
        family="deferral",
        colour="#BE0032",
        description="speculative cascade: h = p where max p ≥ 1 − alpha (Chow's rule), else q",
        in_words=(
            "Trusts the draft outright where the draft is confident (its top token has probability "
            "at least 1 − α) and checks it against the verifier everywhere else."
        ),
        citation="Narasimhan et al., Faster Cascades via Speculative Decoding, ICLR 2025",
        guarantee="pi = q at every position where the draft is unsure (max p < 1 − alpha)",
    )
    caps = replace(Deferral.caps, tunable=True)
    alpha = Param(
        "alpha",
        "α",
        default=0.3,
        low=0.0,
        high=1.0,
        ui=(0.0, 1.0),
        grid=(0.0, 0.1, 0.2, 0.4, 0.6, 0.8),
        help="Trust the draft where its top probability is at least 1 − alpha.",
    )

    @classmethod
    def decisions_replay_exactly(cls, params: dict[str, float | int], kept: int) -> bool:
        # a(n) is 1 where the position defers (q_n > 0), else min(1, q_n / p_n): it needs max p,
        # which a replay row's top entries keep, and p_n, q_n, which it keeps exactly
        return kept >= 1

    def _defers(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return p.amax(-1) >= 1 - self.alpha


class Fuzzy(Deferral):
    """Fuzzy speculative decoding: trust the draft where JS(p, q) ≤ T, else the verifier."""

    name = "fuzzy"
    card = RuleCard(
        family="deferral",
        colour="#8DB600",
        description="fuzzy speculative decoding: h = p where JS(p, q) ≤ T nats, else q",
        in_words=(
            "Trusts the draft where the draft and the verifier roughly agree (Jensen–Shannon "
            "divergence at most T nats) and checks it against the verifier everywhere else."
        ),
        citation=(
            "Holsman et al., Fuzzy Speculative Decoding for a Tunable Accuracy-Runtime Tradeoff, "
            "2025"
        ),
        guarantee="pi = q wherever JS(p, q) > T; JS(pi, q) ≤ T elsewhere (without truncation)",
    )
    caps = replace(Deferral.caps, tunable=True)
    T = Param(
        "T",
        "JS≤",
        default=0.1,
        low=0.0,
        high=1.0,  # JS never exceeds log 2 ≈ 0.69 nats
        ui=(0.0, 0.7),
        grid=(0.0, 0.01, 0.03, 0.1, 0.2, 0.4),
        help="Trust the draft where the Jensen–Shannon divergence of p and q is at most T.",
        log=True,
        unit="nats",
    )

    def _defers(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return js_divergence(p, q) <= self.T


class KLJudge(Deferral):
    """The training-free KL judge: trust the draft where KL(p̂ ‖ q) < tau, unless the verifier
    is confident (max q > top1), where it falls back to sps.

    p̂ is p restricted to q's support and renormalised. The lab's q comes after top-k / top-p,
    and the plain KL(p ‖ q) is +inf as soon as p has any mass outside q's support, which would
    switch the judge off at almost every truncated position; p̂ measures how the draft compares
    with the verifier where the verifier allows tokens at all (`divergence.support_kl`; +inf
    where p has no mass there, so the position never defers). Without truncation p̂ = p and
    the judge reads KL(p ‖ q), the paper's score (p = draft, as everywhere in the lab). It is a
    per-position deferral: where it trusts the draft, h = p̂ and a(n) = 1 for every n with
    q_n > 0; elsewhere h = q, sps; pi = h either way, exactly.
    """

    name = "kl-judge"
    card = RuleCard(
        family="deferral",
        colour="#F99379",
        description=(
            "KL judge: h = p̂ (p on q's support) where KL(p̂ ‖ q) < tau and max q ≤ top1, else q "
            "(sps)"
        ),
        in_words=(
            "Trusts the draft where its distribution is close to the verifier's (KL divergence "
            "below τ nats), unless the verifier is nearly sure of one token, and checks it against "
            "the verifier everywhere else."
        ),
        citation=(
            "Sun, Li et al., Revisiting Judge Decoding from First Principles via Training-Free "
            "Distributional Divergence, 2026 (arXiv 2601.04766)"
        ),
        guarantee=(
            "pi = q wherever max q > top1 or KL(p̂ ‖ q) ≥ tau; pi = p̂ with KL(pi ‖ q) < tau "
            "elsewhere (p̂ = p without truncation)"
        ),
    )
    caps = replace(Deferral.caps, tunable=True)
    tau = Param(
        "tau",
        "KL<",
        default=0.5,
        low=0.0,
        high=UNBOUNDED,
        ui=(0.0, 30.0),
        # measured on the embedded pair (6 prompts, T = 0.7, k = 4, ~290 positions per top-p):
        # of the positions where max q ≤ 0.9, 1-2% defer at 0.1, 27-44% at 2, and at top-p 1.0
        # (where p's long tail makes the KL large) all of them at 30; at top-p 0.95 the 83% with
        # some p on q's support all defer by 8 (the rest never can)
        grid=(0.0, 0.1, 0.5, 2.0, 8.0, 30.0),
        help="Trust the draft where KL(p̂ ‖ q), p on q's support renormalised, is below tau.",
        log=True,
        unit="nats",
    )
    top1 = Param(
        "top1",
        "sps if max q>",
        default=0.9,
        low=0.0,
        high=1.0,
        ui=(0.0, 1.0),
        grid=(0.9,),
        help="…unless the verifier's top probability exceeds this: lossless sps there.",
    )

    def _defers(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return (support_kl(p, q) < self.tau) & (q.amax(-1) <= self.top1)
