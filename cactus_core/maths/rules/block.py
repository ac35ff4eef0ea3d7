"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh, 2024).

Token-wise verification stops at the first draft whose coin fails. Block verification decides
on the whole draft at once, from the back: it keeps a running weight of how much the prefix
is under-represented by the draft,

    w_0 = 1,   w_i = min(1, w_{i-1} · q_i(n_i) / p_i(n_i)),

and stops at tau, the last i whose coin passes h_i, where (for i < k)

    S_i = sum_x max(0, w_i · q_{i+1}(x) − p_{i+1}(x)),   h_i = S_i / (S_i + 1 − w_i),

and h_k = w_k. It emits n_1..n_tau, then a draw from normalise(max(0, w_tau·q_{tau+1} − p_{tau+1}))
(from q_{k+1} when tau = k). The output sequence follows the verifier exactly, as token-wise
`sps` does, and the paper proves it accepts at least as many tokens per call in expectation.
With k = 1 it is `sps` (w_1 = min(1, q/p), residual (q − p)+), which is what its
per-position methods (the Playground, the exact pi) describe. On a draft tree it is traversal
verification (`maths.traversal`), which is this on a one-child tree, coin for coin.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from cactus_core.maths.rules.sps import SPS
from cactus_core.maths.sampling import inverse_cdf_


class Block(SPS):
    """Lossless block verification: decides on the whole draft; pi = q at every position."""

    name = "block"
    card = replace(
        SPS.card,
        family="lossless",
        colour="#B3446C",
        shown_first=False,
        description=(
            "block verification: lossless, decides on the whole draft (sps when k = 1); on a tree, "
            "traversal verification"
        ),
        round_in_words="the round keeps the drafts up to the last coin that passes",
        in_words=(
            "Lossless like sps, but it judges the whole draft at once instead of token by token, "
            "so on average it keeps at least as many drafted tokens. On a draft tree it judges "
            "from the leaves up (traversal verification), accepting a whole path at once."
        ),
        citation=(
            "Sun et al., Block Verification Accelerates Speculative Decoding, 2024 (arXiv "
            "2403.10444); on trees Weng et al., Traversal Verification, 2025 (arXiv 2505.12398)"
        ),
        guarantee=(
            "pi = q over whole sequences; expected accepted drafts ≥ sps's for the same draft"
        ),
    )
    caps = replace(SPS.caps, round_level=True, judges_trees_by_traversal=True)

    @classmethod
    def decisions_replay_exactly(cls, params: dict[str, float | int], kept: int) -> bool:
        # S_i sums over whole rows: a replay row's tail changes it
        return False

    def verify_round(
        self,
        p: torch.Tensor,
        n: torch.Tensor,
        q: torch.Tensor,
        uniforms: torch.Tensor,
        sample_uniforms: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(num_accepted tau [B], stop chances h_1..h_k [B, k], the token emitted after the
        accepted drafts [B]) from p [B, k, V], drafts n [B, k], q [B, k+1, V] (work dtype),
        coins uniforms [B, k] (stop at i is allowed iff u_i < h_i) and sample_uniforms [B]."""
        k = p.shape[1]
        weights, h = self.stop_chances(p, n, q)
        passes = uniforms.to(h.dtype) < h  # [B, k]
        steps = torch.arange(1, k + 1, device=p.device)  # [k]
        tau = (passes.long() * steps).amax(-1)  # [B] last passing i, 0 if none
        last = self._recover(p, q, weights, tau, sample_uniforms)
        return tau, h, last

    @staticmethod
    def stop_chances(
        p: torch.Tensor, n: torch.Tensor, q: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(w_0..w_k [B, k+1], h_1..h_k [B, k]) for p [B, k, V], drafts n [B, k], q [B, k+1, V]."""
        b, k, _ = p.shape
        pn = p.gather(-1, n.unsqueeze(-1)).squeeze(-1)  # [B, k]
        qn = q[:, :k].gather(-1, n.unsqueeze(-1)).squeeze(-1)  # [B, k]
        tiny = torch.finfo(p.dtype).tiny
        ratio = torch.where(qn > 0, qn / pn.clamp_min(tiny), 0.0)
        w = [torch.ones(b, dtype=p.dtype, device=p.device)]  # w_0..w_k, each [B]
        for i in range(k):
            w.append(torch.clamp_max(w[-1] * ratio[:, i], 1.0))
        weights = torch.stack(w, 1)  # [B, k+1]
        # S_i for i = 1..k-1 from q and p at the position after the i-th draft, one position
        # at a time through one [B, V] buffer: a fresh [B, k-1, V] temporary page-faults and
        # measured 10x slower on CPU
        s = weights.new_zeros(b, k - 1)
        buf = torch.empty_like(p[:, 0])
        for i in range(1, k):
            torch.mul(q[:, i], weights[:, i : i + 1], out=buf)
            s[:, i - 1] = buf.sub_(p[:, i]).clamp_min_(0.0).sum(-1)
        denom = s + 1 - weights[:, 1:k]
        h_inner = torch.where(denom > 0, s / denom.clamp_min(tiny), 1.0)
        return weights, torch.cat([h_inner, weights[:, k:]], 1)

    @staticmethod
    def expected_accepted(h: torch.Tensor) -> torch.Tensor:
        """E[tau] [B] from the stop chances h [B, k], over the coins: tau = i when coin i
        passes and every later one fails, P = h_i·prod_{j>i}(1 − h_j)."""
        later_fail = torch.flip(torch.cumprod(torch.flip(1 - h, [1]), 1), [1])  # prod_{j≥i}
        after = torch.cat([later_fail[:, 1:], torch.ones_like(h[:, :1])], 1)  # prod_{j>i}
        steps = torch.arange(1, h.shape[1] + 1, dtype=h.dtype, device=h.device)
        return (steps * h * after).sum(-1)

    @staticmethod
    def _recover(
        p: torch.Tensor,
        q: torch.Tensor,
        weights: torch.Tensor,
        tau: torch.Tensor,
        sample_uniforms: torch.Tensor,
    ) -> torch.Tensor:
        """Draw from normalise(max(0, w_tau·q_{tau+1} − p_{tau+1})), or q_{k+1} at tau = k."""
        b, k, v = p.shape
        rows = torch.arange(b, device=p.device)
        # index_select on the flat rows: the row-copy fast path (advanced indexing is slower)
        q_row = torch.index_select(q.reshape(-1, v), 0, rows * (k + 1) + tau)  # [B, V]
        p_row = torch.index_select(p.reshape(-1, v), 0, rows * k + tau.clamp(max=k - 1))
        res = q_row.mul(weights.gather(1, tau.unsqueeze(-1))).sub_(p_row).clamp_min_(0.0)
        # q itself for the bonus, and where the block could not stop here (w_tau·q ≤ p
        # everywhere: never drawn in practice)
        use_q = (res.sum(-1, keepdim=True) <= 0) | (tau == k).unsqueeze(-1)
        use_q = use_q.to(p.dtype)
        res.mul_(1 - use_q).addcmul_(q_row, use_q)
        return inverse_cdf_(res, sample_uniforms)
