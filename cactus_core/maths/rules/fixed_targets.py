"""Rules that verify against one h for every draft n, so the emitted pi is h itself.

a(n) = min(1, h_n / p_n) and the residual is normalise(max(0, h − p)). h puts no mass where
q = 0, so these rules never emit a token the verifier rules out.
"""

from __future__ import annotations

import torch

from cactus_core.maths.limit import clip_target, optimal_params
from cactus_core.maths.rules.base import Param, Rule, min1_ratio
from cactus_core.maths.rules.cactus import BUDGET
from cactus_core.maths.validation import work_dtype


class Interp(Rule):
    """Verify against the mixture h = alpha·p + (1 − alpha)·q, restricted to q's support and
    renormalised (a no-op without truncation); pi = h."""

    name = "interp"
    description = "verify against h = alpha·p + (1 − alpha)·q on q's support"
    citation = "mixture of draft and verifier: a simple lossy baseline"
    needs_rows = True  # the renormalisation after a truncated q needs p's mass outside it
    params_spec = (
        Param(
            "alpha",
            "α",
            default=0.5,
            low=0.0,
            high=1.0,
            ui=(0.0, 1.0),
            grid=(0.0, 0.1, 0.25, 0.5, 0.75, 1.0),
            help="h = alpha·p + (1 − alpha)·q.",
        ),
    )
    tunable = True

    def position_stats(self, q, p):
        outside = (p * (q == 0).to(p.dtype)).sum(-1)  # p's mass where q rules a token out
        return (1 - self.params["alpha"] * outside,)  # the normaliser of h on q's support

    def _h_n(self, qn, pn, stats):
        alpha = self.params["alpha"]
        return (alpha * pn + (1 - alpha) * qn) * (qn > 0).to(qn.dtype) / stats[0]

    def _target(self, q, p, n, qn, pn, stats):
        alpha = self.params["alpha"]
        h = (alpha * p).mul_((q > 0).to(p.dtype)).add_(q, alpha=1 - alpha)
        return h.div_(stats[0].unsqueeze(-1))

    def _accept_all(self, p, q, stats):
        return min1_ratio(self._target(q, p, None, None, None, stats), p)

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p, q = p.to(dtype), q.to(dtype)
        return self._target(q, p, None, None, None, self.position_stats(q, p))


class Optimal(Rule):
    """Verify against pi* = clip(p, B·q, A·q), the most-accepting pi with KL(pi ‖ q) ≤ budget
    (see `cactus_core.maths.limit`). The same h for every n, so pi = pi*."""

    name = "optimal"
    description = "verify against pi*, the best acceptance at KL(pi ‖ q) = budget per position"
    citation = "this lab's limit (DESIGN.md, 'The limit'): the KKT solution per position"
    needs_rows = True
    tunable = True
    params_spec = (BUDGET,)

    def position_stats(self, q, p):
        return optimal_params(p, q, self.params["budget"], validate=False)  # (B, A) float64

    def _h_n(self, qn, pn, stats):
        lower, upper = stats
        return clip_target(pn.unsqueeze(-1), qn.unsqueeze(-1), lower, upper).squeeze(-1)

    def _target(self, q, p, n, qn, pn, stats):
        lower, upper = stats
        return clip_target(p, q, lower, upper)

    def _accept_all(self, p, q, stats):
        return min1_ratio(self._target(q, p, None, None, None, stats), p)

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p64, q64 = p.double(), q.double()
        pi = clip_target(p64, q64, *self.position_stats(q64, p64))
        return (pi / pi.sum(-1, keepdim=True)).to(dtype)


