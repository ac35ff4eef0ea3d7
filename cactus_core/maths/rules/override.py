"""The emitted law of a rule that turns some sps rejections into acceptances of the draft.

FLy (`fly`) and learned judges keep lossless speculative sampling's coin and only ever accept
a drafted token that sps rejected. If, at a position, a rejected draft n with q_n > 0 is
accepted anyway with a probability omega that does not depend on n (drafts with q_n = 0 are
never accepted: every rule's invariant), the emitted law there is

    pi_omega = (1 − omega)·q + omega·p̃,   p̃ = p·1[q > 0] + p(q = 0)·normalise((q − p)+),

which is (1 − omega)·q + omega·p when q is not truncated (p(q = 0) = 0, so p̃ = p). The
derivation is in `cactus_core.experiments.estimates.override`'s docstring, which estimates
omega from a decode. p̃ is the law at omega = 1: the draft as the verifier lets it out, its mass
off q's support redrawn from the sps residual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from cactus_core.maths.rules.base import Drafted
from cactus_core.maths.sampling import inverse_cdf_
from cactus_core.maths.validation import work_dtype

if TYPE_CHECKING:
    from cactus_core.maths.rules.sps import SPS


def overridden_law(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """p̃ [..., V] for p, q [..., V]: what a position emits when every sps rejection of a draft
    q allows is overridden."""
    dtype = torch.promote_types(work_dtype(p), work_dtype(q))
    p, q = p.to(dtype), q.to(dtype)
    allowed = (q > 0).to(dtype)
    off = (p * (1 - allowed)).sum(-1, keepdim=True)  # p(q = 0), [..., 1]
    residual = (q - p).clamp_min(0.0)
    # sum (q − p)+ ≥ p(q = 0): it is 0 only where p = q, and then nothing is off the support
    z = residual.sum(-1, keepdim=True)
    return p * allowed + residual * (off / z.clamp_min(torch.finfo(dtype).tiny))


def kept_round(
    rule: SPS,
    p: torch.Tensor,
    n: torch.Tensor,
    q: torch.Tensor,
    d: Drafted,
    kept: torch.Tensor,
    sample_uniforms: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A round of a rule that overrides sps, once it knows which drafts it keeps: (num_accepted
    [B], the token emitted after them [B]) from p [B, k, V], n [B, k], q [B, k+1, V], sps's
    `Drafted` d [B, k] of the round, kept [B, k] (passed sps or overridden) and
    sample_uniforms [B]. The round keeps its drafts up to the first one still rejected and
    there draws sps's residual normalise((q − p)+) (that draft failed sps's own coin); after a
    fully kept draft, the bonus from q at position k + 1."""
    b, k, v = p.shape
    num = kept.long().cumprod(-1).sum(-1)  # [B]
    rows = torch.arange(b, device=p.device)
    # q at the first draft still rejected, or the bonus row; p at that draft
    q_row = torch.index_select(q.reshape(-1, v), 0, rows * (k + 1) + num)  # [B, V]
    at = num.clamp(max=k - 1)
    p_row = torch.index_select(p.reshape(-1, v), 0, rows * k + at)  # [B, V]
    take = at.unsqueeze(-1)
    stop = Drafted(
        d.qn.gather(1, take).squeeze(1),
        d.pn.gather(1, take).squeeze(1),
        (),
        q_row,
        p_row,
        n.gather(1, take).squeeze(1),
    )
    weights = rule.residual_weights(stop)  # sps's residual there, [B, V]
    bonus = (num == k).unsqueeze(-1).to(weights.dtype)  # [B, 1]
    weights.mul_(1 - bonus).addcmul_(q_row, bonus)
    return num, inverse_cdf_(weights, sample_uniforms)
