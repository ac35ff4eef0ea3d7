"""Rules that verify against one h for every draft n, so the emitted pi is h itself.

a(n) = min(1, h_n / p_n) and the residual is normalise(max(0, h − p)). h puts no mass where
q = 0, so these rules never emit a token the verifier rules out.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from cactus_core.maths.limit import clip_target, optimal_params, price_params
from cactus_core.maths.rules.base import (
    Capabilities,
    Drafted,
    Param,
    RowStats,
    Rule,
    RuleCard,
    fallback_,
    min1_ratio,
)
from cactus_core.maths.rules.cactus import BUDGET
from cactus_core.maths.validation import work_dtype


class Interp(Rule):
    """Verify against the mixture h = alpha·p + (1 − alpha)·q, with h = 0 where q = 0.

    This is DIVERSED's static mixture (DIVERSED: Dynamic Verification for Speculative
    Decoding, arXiv 2604.07622, code comeusr/diversed, method `static_en` with
    `--draft_ensemble_weights` w: 0 the verifier alone, 1 the draft alone): speculative sampling
    against r = (1 − w)·q + w·p, so w = alpha. DIVERSED proper learns the weight with a trained
    ensemble head; the static variant holds it fixed, and that is this rule. It is also the
    `interp` baseline of the Cactus paper.

    Without truncation h sums to 1 and pi = h. With a truncated q, h' (the mixture off q's
    support removed) sums to 1 − alpha·p(q = 0); the rule stays pointwise, a(n) =
    min(1, h'_n / p_n), and the residual normalise((h' − p)+) (q itself if that is empty) has no
    mass off q's support, so no ruled-out token is ever emitted. Then
    pi = min(p, h') + (1 − sum min(p, h'))·residual, and `adjusted_target` reports h' normalised.
    """

    name = "interp"
    card = RuleCard(
        family="fixed target",
        colour="#E68FAC",
        description=(
            "verify against h = alpha·p + (1 − alpha)·q on q's support (DIVERSED's static mixture, "
            "w = alpha)"
        ),
        in_words=(
            "Checks the draft against a blend of the two models (a share α of the draft, the rest "
            "verifier), so the text moves part of the way toward the draft's."
        ),
        citation=(
            "DIVERSED's static ensemble, w = alpha (DIVERSED: Dynamic Verification for Speculative "
            "Decoding, arXiv 2604.07622; code comeusr/diversed); the Cactus paper's interp "
            "baseline"
        ),
        guarantee=(
            "pi is the mixture on q's support, so KL(pi ‖ q) ≤ alpha·KL(p ‖ q) without truncation"
        ),
    )
    caps = Capabilities(tunable=True)
    alpha = Param(
        "alpha",
        "α",
        default=0.5,
        low=0.0,
        high=1.0,
        ui=(0.0, 1.0),
        grid=(0.0, 0.1, 0.25, 0.5, 0.75, 1.0),
        help="h = alpha·p + (1 − alpha)·q.",
    )

    def h_n(self, d: Drafted) -> torch.Tensor:
        return self.alpha * d.pn + (1 - self.alpha) * d.qn  # q_n = 0 is rejected by accept

    def _mixture(self, q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """h' [..., V]: the mixture on q's support, fresh."""
        alpha = self.alpha
        # in place on one fresh buffer: torch.where over [B, V] is several times slower on CPU
        return (q > 0).to(p.dtype).mul_(p).mul_(alpha).add_(q, alpha=1 - alpha)

    def target(self, d: Drafted) -> torch.Tensor:
        return self._mixture(d.rows.q, d.rows.p)

    def _residual_rows(self, q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        w = self._mixture(q, p).sub_(p).clamp_min_(0.0)
        return fallback_(w, q)  # empty only when every kept draft passes: q is a safe draw

    def residual_weights(self, d: Drafted) -> torch.Tensor:
        return self._residual_rows(d.rows.q, d.rows.p)

    def adjusted_target(
        self, q: torch.Tensor, p: torch.Tensor, n: torch.Tensor, validate: bool = True
    ) -> torch.Tensor:
        h = super().adjusted_target(q, p, n, validate)
        return h / h.sum(-1, keepdim=True)

    def _accept_all(self, p: torch.Tensor, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return min1_ratio(self._mixture(q, p), p)

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p, q = p.to(dtype), q.to(dtype)
        kept = torch.minimum(p, self._mixture(q, p))
        w = self._residual_rows(q, p)
        rejected = 1 - kept.sum(-1, keepdim=True)
        return kept + rejected.clamp_min(0.0) * w / w.sum(-1, keepdim=True)


class ClipTarget(Rule):
    """What the limit's rules share: verify against pi* = clip(p, B·q, A·q), with (B, A) per
    position from `position_stats`; the same h for every n, so pi = pi*."""

    card = RuleCard(
        family="fixed target",
    )
    caps = Capabilities(needs_rows=True, tunable=True)

    def h_n(self, d: Drafted) -> torch.Tensor:
        lower, upper = d.stats
        return clip_target(d.pn.unsqueeze(-1), d.qn.unsqueeze(-1), lower, upper).squeeze(-1)

    def target(self, d: Drafted) -> torch.Tensor:
        return clip_target(d.rows.p, d.rows.q, *d.stats)

    def _accept_all(self, p: torch.Tensor, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return min1_ratio(clip_target(p, q, *stats), p)

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p64, q64 = p.double(), q.double()
        pi = clip_target(p64, q64, *self.position_stats(q64, p64))
        return (pi / pi.sum(-1, keepdim=True)).to(dtype)


class Optimal(ClipTarget):
    """Verify against pi* = clip(p, B·q, A·q), the most-accepting pi with KL(pi ‖ q) ≤ budget
    (see `cactus_core.maths.limit`). The same h for every n, so pi = pi*."""

    name = "optimal"
    card = replace(
        ClipTarget.card,
        colour="#882D17",
        shown_first=True,
        description="verify against pi*, the best acceptance at KL(pi ‖ q) = budget per position",
        in_words=(
            "The most any rule can accept at one position: it checks the draft against the "
            "distribution that lets the most drafts through while staying within the KL budget of "
            "the verifier's."
        ),
        citation="this lab's limit (DESIGN.md, 'The limit'): the KKT solution per position",
        guarantee="the most acceptance any rule can reach with KL(pi ‖ q) ≤ budget, per position",
    )
    budget = BUDGET

    def position_stats(self, q: torch.Tensor, p: torch.Tensor) -> RowStats:
        return optimal_params(p, q, self.budget, validate=False)  # (B, A) float64


class OptimalPrice(ClipTarget):
    """Verify against pi*_t = q·clip(p/q, B, B·e^t), B fixed by normalisation per position.

    One price t per nat for every position, where `optimal` fixes a budget per position: the
    Lagrangian of "most acceptance at a given mean KL" has one multiplier, so on the positions
    it decodes this rule reaches the limit curve at its own mean KL (the curve is swept over the
    same t). t = 0 gives B = A = 1, pi = q: lossless.
    """

    name = "optimal-price"
    card = replace(
        ClipTarget.card,
        colour="#2B3D26",
        shown_first=False,
        description="verify against q·clip(p/q, B, B·e^t): the limit's optimiser at one price t",
        in_words=(
            "Like optimal, but with one exchange rate t between acceptance and divergence at every "
            "position, which makes the best trade over a whole text rather than per position."
        ),
        citation="this lab's limit (DESIGN.md, 'The limit'): one price per nat for all positions",
        guarantee="on the positions it decodes, the limit curve's acceptance at its own mean KL",
    )
    t = Param(
        "t",
        "t",
        default=1.0,
        low=0.0,
        high=700.0,  # e^t stays finite in float64; pi = p on q's support long before
        ui=(0.0, 8.0),
        grid=(0.0, 0.25, 0.5, 1.0, 2.0, 4.0),
        help="log(A/B): how far pi may lean from q towards p; 0 is lossless sps.",
        log=True,
        unit="nats",
    )

    def position_stats(self, q: torch.Tensor, p: torch.Tensor) -> RowStats:
        return price_params(p, q, float(self.t))  # (B, A) float64
