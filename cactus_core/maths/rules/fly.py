"""FLy's entropy gate with a deferred window (Li et al., ICLR 2026, arXiv 2511.22972; code
AMD-AGI/FLy, `SPDGenerate.generate_chunks` with `enable_fly` and `rej_by_entropy`).

FLy checks every draft of a round first (at T = 0 by exact match, at T > 0 by comparing with
two samples of the verifier); the lab uses sps's coins for that check, u_i < min(1, q_i(n_i) /
p_i(n_i)), so "passed" below is lossless speculative sampling's decision at each draft, taken
for all k drafts at once. A draft that did not pass (a mismatch) at position i is accepted
anyway when

- the verifier's top-3 entropy there, −sum over q's three largest entries of q·log q, is at
  least theta (FLy's `entropy_thre`, 0.3 in its config; `rej_by_entropy`), and
- the next W − 1 drafts of the round all passed (FLy's `win_len`: the window pattern
  [False, True, …, True] matched at i), and
- the window is not among the round's last W drafts: FLy clamps the last W positions back to
  their own check (`updated_accept[:, -win_len:] &= accepted[:, -win_len:]`), so i ≤ k − W − 1.
  A window that would run past the draft (i > k − W) never matched in the first place.

The round keeps its drafts up to the first position that still did not pass (FLy's
`_create_output`), and then emits one token: at that position, sps's recovered token, a draw
from normalise((q − p)+) (the draft there failed sps's own coin, and sps's residual is what a
rejection draws); after a fully kept draft, the bonus from q at position k + 1.

Where the lab differs from FLy's code:

- T > 0 uses sps's coins as the check (FLy compares with two verifier samples and recovers with
  the first of them); at T = 0 both are exact match and agree.
- The gate reads the lab's q, after temperature, top-k and top-p (FLy reads the verifier's raw
  logits); FLy turns the gate off for a threshold at or below 0.01, the lab reads theta as
  given (theta = 0 is no gate, as in FLy).
- A draft the verifier gives probability 0 (outside its top-k / top-p) is never accepted, as
  for every rule here, so a mismatch there stays rejected whatever its window.

With k = 1 nothing can be overridden (the one draft is its round's last), so the per-position
methods (the Playground's a(n) and pi, which describe a round with k = 1) are sps's. For
W = 1 the window is the gate alone and every draft but a round's last has an exact law of its
own: where the gate is open, the drafted token is kept whenever q allows it, so pi = p̃
(`override.overridden_law`: p on q's support, its mass off the support redrawn from sps's
residual); where it is closed, pi = q. `emitted_inner` gives it. For W ≥ 2 whether a draft is
overridden depends on the later drafts, which one position does not have: pi is estimated from
a decode (`experiments.estimates.override`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from cactus_core.maths.divergence import top_entropy
from cactus_core.maths.rules.base import UNBOUNDED, Param
from cactus_core.maths.rules.override import kept_round, overridden_law
from cactus_core.maths.rules.sps import SPS
from cactus_core.maths.validation import check_pair, work_dtype

TOP_ENTROPY_OF = 3  # FLy's calculate_topk_entropy(logits, 3)


def fly_kept(passed: torch.Tensor, gate: torch.Tensor, window: int) -> torch.Tensor:
    """Which drafts FLy keeps before causality: passed [..., k] (each draft's own check),
    gate [..., k] (where an override is allowed at all: the entropy gate, q_n > 0) -> bool
    [..., k], passed or overridden. A draft at i is overridden when it did not pass, the
    next window − 1 drafts did, and i ≤ k − window − 1 (FLy's clamp of the last `window`)."""
    k = passed.shape[-1]
    span = k - window  # positions 0..span-1 may be overridden
    if span <= 0:
        return passed.clone()
    counts = torch.nn.functional.pad(passed.long().cumsum(-1), (1, 0))  # [..., k+1]
    # drafts i+1..i+window-1 that passed, for i < span, from the prefix counts
    later = counts[..., window : window + span] - counts[..., 1 : 1 + span]  # [..., span]
    over = torch.zeros_like(passed)
    over[..., :span] = (later == window - 1) & ~passed[..., :span]
    return passed | (over & gate)


class FLy(SPS):
    """FLy: an sps mismatch is kept where the verifier's top-3 entropy is at least theta and the
    next W − 1 drafts pass; decides on the whole round (module docstring)."""

    name = "fly"
    card = replace(
        SPS.card,
        family="deferral",
        colour="#E25822",
        shown_first=False,
        description=(
            "FLy: an sps mismatch is kept where q's top-3 entropy ≥ theta and the next W − 1 "
            "drafts pass sps (sps when k = 1)"
        ),
        round_in_words=(
            "the round also keeps a draft whose coin fails where the verifier's top-3 entropy is "
            "at least θ and the next W − 1 drafts pass, and stops at the first other failure"
        ),
        in_words=(
            "Checks each draft like sps, but keeps a rejected one when the verifier was unsure "
            "there (its top-3 entropy at least θ) and the next W − 1 drafts all pass the check."
        ),
        citation=(
            "Li et al., Training-Free Loosely Speculative Decoding (FLy), ICLR 2026 (arXiv "
            "2511.22972; code AMD-AGI/FLy)"
        ),
        guarantee=(
            "none on the divergence; sps on a round's last W drafts (so at k = 1); pi depends on "
            "later drafts and is estimated from a decode"
        ),
    )
    caps = replace(SPS.caps, lossless=False, round_level=True, overrides_sps=True)
    theta = Param(
        "theta",
        "H₃≥",
        default=0.3,
        low=0.0,
        high=UNBOUNDED,  # past log 3 ≈ 1.0986 the gate never opens: sps
        ui=(0.0, 1.1),
        # from sps (nothing opens past log 3) to no gate at all
        grid=(1.1, 0.9, 0.7, 0.5, 0.3, 0.0),
        help="Keep a rejected draft only where the verifier's top-3 entropy is at least theta.",
        unit="nats",
    )
    W = Param(
        "W",
        "W",
        default=2,
        low=1,
        high=12,
        ui=(1, 12),
        grid=(1, 2, 3),
        help="…and the next W − 1 drafts pass sps (FLy's win_len; 1 is the gate alone).",
        integer=True,
    )

    @classmethod
    def decisions_replay_exactly(cls, params: dict[str, float | int], kept: int) -> bool:
        # p_n and q_n are kept exactly; the gate needs q's three largest entries
        return kept >= TOP_ENTROPY_OF

    def gate(self, q: torch.Tensor) -> torch.Tensor:
        """Where the entropy gate is open: q [..., V] -> bool [...]."""
        return top_entropy(q, TOP_ENTROPY_OF) >= self.theta

    def could_override(self, q: torch.Tensor, k: int) -> torch.Tensor:
        """Where a round's drafts could be overridden at all: q [d, V] at its first d drafts
        -> bool [d], the gate open and a window that fits before the round's last W drafts."""
        depth = torch.arange(q.shape[0], device=q.device)
        return self.gate(q) & (depth <= k - int(self.W) - 1)

    def verify_round(
        self,
        p: torch.Tensor,
        n: torch.Tensor,
        q: torch.Tensor,
        uniforms: torch.Tensor,
        sample_uniforms: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(num_accepted [B], sps's a(n_i) [B, k], the token emitted after the kept drafts [B])
        from p [B, k, V], drafts n [B, k], q [B, k+1, V] (work dtype), coins uniforms [B, k]
        (draft i passes sps iff u_i < a(n_i)) and sample_uniforms [B]."""
        k = p.shape[1]
        q_k = q[:, :k]  # [B, k, V] view
        d = self.drafted(q_k, p, n)
        a = self.accept(d)  # [B, k]
        passed = uniforms.to(a.dtype) < a
        kept = fly_kept(passed, self.gate(q_k) & (d.qn > 0), int(self.W))
        num, last = kept_round(self, p, n, q, d, kept, sample_uniforms)
        return num, a, last

    def emitted_inner(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """The exact pi [..., V] at a draft followed by at least W more drafts in its round, for
        W = 1 only (p̃ where the gate is open, q elsewhere); ValueError for W ≥ 2, whose law
        there depends on the later drafts."""
        if int(self.W) != 1:
            raise ValueError(
                f"rule {self.name!r}: a draft's own law exists only for W = 1 (got W = "
                f"{self.W}); estimate it from a decode (experiments.estimates.override)"
            )
        check_pair(p, q)
        dtype = torch.promote_types(work_dtype(p), work_dtype(q))
        p, q = p.to(dtype), q.to(dtype)
        return torch.where(self.gate(q).unsqueeze(-1), overridden_law(p, q), q)
