"""SGLang's acceptance thresholds on a chain of drafts, as a per-token rule.

SGLang verifies with a target-only kernel (its `tree_speculative_sampling_target_only`, which
`--speculative-accept-threshold-single` and `--speculative-accept-threshold-acc` feed): the
draft's probabilities are never read. Walking a chain, a drafted token n is accepted when the
round's coin u satisfies u ≤ q_n / t_acc, or outright when q_n ≥ t_single; so

    a(n) = 1 if q_n ≥ t_single, else min(1, q_n / t_acc).

On a rejection the next token is drawn from q with the rejected token taken out (the kernel
sets the rejected token's draft entry to q_n and samples relu(q − that)), and a fully accepted
chain draws its bonus from q. In a tree the coin is compared with the verifier's probability
accumulated over the siblings tried so far; on a chain (one child per node) that sum is q_n,
which is what this rule models.

At both thresholds 1 it is lossless whatever the draft: pi(x) = p(x)·q_x + q_x·sum over n ≠ x
of p(n) = q_x. It then accepts sum_n p(n)·q_n, less than lossless speculative sampling's
sum_n min(p(n), q_n), because it never reads p; lowering t_acc (or t_single) buys acceptance
with divergence. SGLang drafts the draft model's top tokens rather than sampling them; the lab
applies the same test to its sampled drafts.

h^(n), as for the threshold rules, is the distribution of the emitted token given that n was
drafted: a(n)·δ_n + (1 − a(n))·r_n.
"""

from __future__ import annotations

import torch

from cactus_core.maths.rules.base import (
    Drafted,
    Param,
    RowStats,
    Rule,
    RuleCard,
    fallback_,
    where_q_positive,
)
from cactus_core.maths.validation import work_dtype

# SGLang raises a smaller threshold_acc to this before dividing by it.
ACC_FLOOR = 1e-9


class SGLangThresholds(Rule):
    """a(n) = 1 if q_n ≥ t_single else min(1, q_n / t_acc); on rejection draw from q without n."""

    name = "sglang"
    card = RuleCard(
        family="thresholds",
        colour="#604E97",
        description=(
            "SGLang's target-only test on a chain: a(n) = 1 if q_n ≥ t_single, else min(1, q_n / "
            "t_acc); reject: q without n"
        ),
        in_words=(
            "Keeps the drafted token with a chance that depends only on the verifier's probability "
            "of it (raised by dividing by t_acc, certain above t_single), never on the draft's, "
            "and on a rejection draws a replacement from the verifier with the rejected token left "
            "out."
        ),
        citation=(
            "SGLang (sgl-project/sglang): --speculative-accept-threshold-single/-acc, "
            "tree_speculative_sampling_target_only"
        ),
        guarantee=(
            "pi = q at t_single = t_acc = 1 (accepting sum p·q, never reading p); none below"
        ),
    )
    threshold_acc = Param(
        "threshold_acc",
        "t_acc",
        default=1.0,
        low=ACC_FLOOR,
        high=1.0,
        ui=(0.001, 1.0),
        grid=(1.0, 0.3, 0.1, 0.03, 0.01, 0.003),
        help="--speculative-accept-threshold-acc: a(n) = min(1, q_n / t_acc)…",
        log=True,
    )
    threshold_single = Param(
        "threshold_single",
        "t_single",
        default=1.0,
        low=0.0,
        high=1.0,
        ui=(0.0, 1.0),
        grid=(1.0,),
        help="…or 1 when q_n ≥ t_single (--speculative-accept-threshold-single).",
    )

    def _a(self, q: torch.Tensor) -> torch.Tensor:
        ratio = (q / self.threshold_acc).clamp_max_(1.0)
        return torch.where(q >= self.threshold_single, torch.ones_like(q), ratio)

    def accept(self, d: Drafted) -> torch.Tensor:
        return where_q_positive(self._a(d.qn), d.qn)

    def _accept_all(self, p: torch.Tensor, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return self._a(q)

    def residual_weights(self, d: Drafted) -> torch.Tensor:
        q, n = d.rows.q, d.rows.n
        w = q.clone().scatter_(-1, n.unsqueeze(-1), 0.0)
        # empty only when q_n = 1, which is always accepted
        return fallback_(w, q)

    def target(self, d: Drafted) -> torch.Tensor:
        q, n = d.rows.q, d.rows.n
        a = self.accept(d).unsqueeze(-1)
        w = self.residual_weights(d)
        drafted = torch.zeros_like(q).scatter_(-1, n.unsqueeze(-1), 1.0)
        return a * drafted + (1 - a) * w / w.sum(-1, keepdim=True)

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """pi(x) = p(x)·a(x) + q_x · sum over n ≠ x of p(n)(1 − a(n)) / (1 − q_n): O(V)."""
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p, q = p.to(dtype), q.to(dtype)
        a = self.accept_all(p, q, ())
        rejected = p * (1 - a)  # w_n; zero wherever q_n = 1 (always accepted)
        share = torch.where(rejected > 0, rejected / (1 - q).clamp_min(1e-300), 0.0)
        total = share.sum(-1, keepdim=True)
        return p * a + q * (total - share)
