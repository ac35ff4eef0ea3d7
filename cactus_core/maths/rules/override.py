"""The emitted law of a rule that turns some sps rejections into acceptances of the draft.

FLy (`fly`) and learned judges keep lossless speculative sampling's coin and only ever accept
a drafted token that sps rejected. If, at a position, a rejected draft n with q_n > 0 is
accepted anyway with a probability omega that does not depend on n (drafts with q_n = 0 are
never accepted: every rule's invariant), the emitted law there is

    pi_omega = (1 − omega)·q + omega·p̃,   p̃ = p·1[q > 0] + p(q = 0)·normalise((q − p)+),

which is (1 − omega)·q + omega·p when q is not truncated (p(q = 0) = 0, so p̃ = p). The
derivation is in `cactus_core.experiments.override_estimate`'s docstring, which estimates
omega from a decode. p̃ is the law at omega = 1: the draft as the verifier lets it out, its mass
off q's support redrawn from the sps residual.
"""

from __future__ import annotations

import torch

from cactus_core.maths.validation import work_dtype


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


def override_mixture(p: torch.Tensor, q: torch.Tensor, omega: torch.Tensor | float) -> torch.Tensor:
    """pi_omega = (1 − omega)·q + omega·p̃ [..., V]; omega a float or a tensor [...] (one value
    per position, 0 where the rule cannot override)."""
    tilde = overridden_law(p, q)
    w = torch.as_tensor(omega, dtype=tilde.dtype, device=tilde.device)
    w = w.unsqueeze(-1) if w.dim() > 0 else w
    return q.to(tilde.dtype) * (1 - w) + tilde * w
