"""Rules whose decision is a threshold on q (typical acceptance, top-k, relaxed top-K), not a
comparison of h with p.

For them h^(n) is the distribution of the emitted token given that n was drafted: a point
mass on n if n passes the threshold, the residual otherwise. It is a proper distribution (so
KL(h ‖ q) is defined), and a(n) = min(1, h_n / p_n) still holds (h_n is 1 or 0).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from cactus_core.maths.divergence import entropy
from cactus_core.maths.rules.base import (
    Capabilities,
    Drafted,
    Param,
    RowStats,
    Rule,
    RuleCard,
    fallback_,
    where_q_positive,
)
from cactus_core.maths.validation import work_dtype

_CHUNK = 64


def kth_largest(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest entry of each row, [..., V] -> [...], for 1 ≤ k ≤ V.

    For small k, through chunk maxima: the k chunks with the largest maxima hold the k
    largest entries (any entry elsewhere is at most its chunk's maximum, below k maxima
    already counted), so one read pass for the maxima and a top-k over k·64 entries replace
    a top-k over the whole row (three times faster at V = 49,152).
    """
    v = x.shape[-1]
    if v % _CHUNK or k * _CHUNK * 4 > v or x.numel() == 0:
        return x.topk(k, dim=-1).values[..., -1]
    chunks = x.reshape(*x.shape[:-1], v // _CHUNK, _CHUNK)  # [..., V/64, 64]
    top = chunks.amax(-1).topk(k, dim=-1).indices  # [..., k]
    cand = chunks.gather(-2, top.unsqueeze(-1).expand(*top.shape, _CHUNK))  # [..., k, 64]
    return cand.flatten(-2).topk(k, dim=-1).values[..., -1]


def _one_hot(ids: torch.Tensor, v: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.nn.functional.one_hot(ids, v).to(dtype)


class _QThreshold(Rule):
    """Accept n iff q_n passes the position's threshold (`position_stats()[0]`); a rejection
    draws from the normalised `residual_weights`. Subclasses set the threshold, the test and
    the residual."""

    caps = Capabilities(needs_rows=True)

    @staticmethod
    def _passes(q: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
        # q_n > 0 as well: at T = 0 the k-th largest q is 0, and the rule must stay exact match
        return (q >= threshold) & (q > 0)

    def accept(self, d: Drafted) -> torch.Tensor:
        return where_q_positive(self._passes(d.qn, d.stats[0]).to(d.qn.dtype), d.qn)

    def _accept_all(self, p: torch.Tensor, q: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return self._passes(q, stats[0].unsqueeze(-1)).to(q.dtype)

    def target(self, d: Drafted) -> torch.Tensor:
        q = d.rows.q
        drafted = _one_hot(d.rows.n, q.shape[-1], q.dtype)
        w = self.residual_weights(d)
        passes = self._passes(d.qn, d.stats[0]).unsqueeze(-1)
        return torch.where(passes, drafted, w / w.sum(-1, keepdim=True))

    def residual_weights(self, d: Drafted) -> torch.Tensor:
        return self._residual_rows(d.rows.q, d.rows.p, d.stats)

    def _residual_rows(self, q: torch.Tensor, p: torch.Tensor, stats: RowStats) -> torch.Tensor:
        """A threshold rule's residual [..., V] does not depend on the drafted token."""
        raise NotImplementedError

    def emitted(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(work_dtype(q), work_dtype(p))
        p, q = p.to(dtype), q.to(dtype)
        stats = self.position_stats(q, p)
        keep = self.accept_all(p, q, stats)
        rejected = (p * (1 - keep)).sum(-1, keepdim=True)
        w = self._residual_rows(q, p, stats)
        return p * keep + rejected * w / w.sum(-1, keepdim=True)


class TAS(_QThreshold):
    """Typical acceptance: accept n iff q_n > min(epsilon, alpha·exp(−H(q))); on rejection
    emit argmax q."""

    name = "tas"
    card = RuleCard(
        family="thresholds",
        colour="#F38400",
        description="typical acceptance: a threshold on q_n (epsilon, alpha·exp(−H(q)))",
        in_words=(
            "Keeps the drafted token whenever the verifier gives it more than a small threshold "
            "probability, and otherwise writes the verifier's single most likely token."
        ),
        residual_in_words=(
            "tas's residual ignores the draft: a rejection writes q's most likely token, so when "
            "the drafted token is that token the residual sits on the drafted token itself. With "
            "alpha below 1 that token always passes, so this residual is never drawn."
        ),
        citation="Cai et al., Medusa, ICML 2024 (typical acceptance)",
        guarantee="none on the divergence; a rejection emits argmax q",
    )
    epsilon = Param(
        "epsilon",
        "ε",
        default=0.09,
        low=0.0,
        high=1.0,
        ui=(0.0, 1.0),
        grid=(0.3, 0.09, 0.03, 0.01, 0.003, 0.001),
        help="Accept if q_n exceeds this…",
        log=True,
    )
    alpha = Param(
        "alpha",
        "α",
        default=0.3,
        low=0.0,
        high=1e6,
        ui=(0.0, 1.0),
        grid=(0.3,),
        help="…or alpha·exp(−H(q)), whichever is smaller.",
    )

    def position_stats(self, q: torch.Tensor, p: torch.Tensor) -> RowStats:
        threshold = self.alpha * torch.exp(-entropy(q))
        return (torch.clamp_max(threshold, self.epsilon).to(q.dtype),)

    @staticmethod
    def _passes(q: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
        return q > threshold

    def _residual_rows(self, q: torch.Tensor, p: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return _one_hot(q.argmax(-1), q.shape[-1], q.dtype)


class TopK(_QThreshold):
    """Accept n iff q_n > 0 and q_n is at least the k_top-th largest q (ties all pass); on
    rejection sample normalise(max(0, 1[passes] − p))."""

    name = "topk"
    card = RuleCard(
        family="thresholds",
        colour="#654522",
        description="accept a draft in q's top k_top",
        in_words=(
            "Keeps the drafted token when it is among the verifier's k_top most likely tokens, and "
            "otherwise draws a replacement from among those top tokens."
        ),
        citation="a common lossy baseline: top-k membership under the verifier",
        guarantee="emits only tokens in q's top k_top",
    )
    k_top = Param(
        "k_top",
        "k_top",
        default=5,
        low=1,
        high=2**31 - 1,
        ui=(1, 100),
        grid=(1, 2, 5, 10, 20, 50),
        help="Accept drafts among q's top k_top.",
        integer=True,
    )

    @classmethod
    def decisions_replay_exactly(cls, params: dict[str, float | int], kept: int) -> bool:
        # the k_top-th largest q is exact whenever the replay row kept that many entries
        return int(params["k_top"]) <= kept

    def position_stats(self, q: torch.Tensor, p: torch.Tensor) -> RowStats:
        return (kth_largest(q, min(int(self.k_top), q.shape[-1])),)

    def _residual_rows(self, q: torch.Tensor, p: torch.Tensor, stats: RowStats) -> torch.Tensor:
        inside = self._passes(q, stats[0].unsqueeze(-1)).to(q.dtype)
        # no mass only if the draft is certain of the one passing token (never rejected then)
        return fallback_((inside - p).clamp_min_(0.0), inside)


class RelaxedTopK(_QThreshold):
    """Relaxed acceptance: accept n for sure when it is among q's K most likely tokens and
    q_n ≥ max q − delta_r; otherwise reject and draw from q itself.

    With A that set, pi = p·1[A] + (1 − p(A))·q. Note the recovery draws from q, not from a
    residual: tokens in A can come out both ways, and delta_r = 0 still accepts the argmax
    of q whatever p gives it, so no setting is lossless.
    """

    name = "relaxed-topk"
    card = RuleCard(
        family="thresholds",
        colour="#C2B280",
        description=(
            "relaxed acceptance: n in q's top K with q_n ≥ max q − delta_r, else draw from q"
        ),
        in_words=(
            "Keeps the drafted token when it is among the verifier's K favourites and nearly as "
            "likely as the verifier's top choice (within δ_r), and otherwise draws a fresh token "
            "from the verifier."
        ),
        residual_in_words=(
            "relaxed-topk's residual is q itself, drafted token included: a rejected draft can be "
            "written again."
        ),
        citation=(
            "NVIDIA TensorRT-LLM, relaxed acceptance for multi-token prediction (DeepSeek-R1)"
        ),
        guarantee="pi ≥ (1 − p(A))·q: every token keeps a share of its verifier probability",
    )
    caps = replace(_QThreshold.caps, tunable=True)
    delta_r = Param(
        "delta_r",
        "δ_r",
        default=0.1,
        low=0.0,
        high=1.0,
        ui=(0.0, 1.0),
        grid=(0.0, 0.02, 0.05, 0.1, 0.2, 0.5),
        help="Accept a draft whose q_n is within delta_r of the verifier's top probability…",
    )
    K = Param(
        "K",
        "K",
        default=10,
        low=1,
        high=2**31 - 1,
        ui=(1, 100),
        grid=(10,),
        help="…and among the verifier's K most likely tokens.",
        integer=True,
    )

    @classmethod
    def decisions_replay_exactly(cls, params: dict[str, float | int], kept: int) -> bool:
        # the K-th largest and the largest q are exact whenever the replay row kept K entries
        return int(params["K"]) <= kept

    def position_stats(self, q: torch.Tensor, p: torch.Tensor) -> RowStats:
        kth = kth_largest(q, min(int(self.K), q.shape[-1]))
        floor = q.amax(-1) - self.delta_r
        return (torch.maximum(kth, floor),)

    def _residual_rows(self, q: torch.Tensor, p: torch.Tensor, stats: RowStats) -> torch.Tensor:
        return q.clone()
