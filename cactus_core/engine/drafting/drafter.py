"""The `Drafter` protocol: what proposes a round's draft, and what it keeps between rounds.

A drafter serves a batch of rows. Its life:

    prefill(tokens, verifier)   after the verifier's prefill of every row's tokens but the
                                last (the feature draft reads the features it captured)
    propose(coins, probs)       the round's proposal: k = coins.shape[1] drafted tokens per
                                row (a `Draft`), or a draft tree (`TreeDrafter`)
    after_verify(verifier, emitted)
                                the round's outcome per row (the accepted drafts, then the
                                recovered or bonus token): roll the drafter's own state back
                                to the accepted path and take in what was committed
    select(rows)                keep only these rows (finished sequences leave the batch)

`Drafter[Draft]` proposes chains, `Drafter[DraftTree]` trees; the decoder calls only these and
never asks which kind of drafter it holds. The k-step loop
(p from logits, a token drawn from p with the round's coin, one forward on it) is
`draft_loop`, shared by every drafter; each supplies its first logits and its step.

Implementations: `IndependentDrafter` (a separate draft model with its own KV cache, here)
and `FeatureDrafters` (the feature-conditioned draft on the verifier's features,
`feature_drafting`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.sampling import sample_from_probs

ProbsFn = Callable[[torch.Tensor], torch.Tensor]  # logits [..., V] -> p or q [..., V]
StepFn = Callable[[torch.Tensor], torch.Tensor]  # drafted ids [B] -> next logits [B, V]


@dataclass
class Draft:
    probs: torch.Tensor  # [B, k, V] p at each drafted position
    ids: torch.Tensor  # [B, k] int64, n_i drawn from p


# What a drafter proposes: a chain of drafts (`Draft`) or a draft tree (`maths.tree.DraftTree`).
Proposal = TypeVar("Proposal", covariant=True)


class Drafter(Protocol[Proposal]):
    """Proposes a round's draft of type `Proposal` and keeps its state between rounds."""

    def prefill(self, tokens: list[list[int]], verifier: SequenceCache) -> None:
        """tokens: each row's prompt; the verifier has just prefilled all of it but the last."""

    def propose(self, coins: torch.Tensor, probs: ProbsFn) -> Proposal:
        """coins [B, c] inverse-CDF coins -> the round's proposal (a chain: p [B, k, V] and
        ids [B, k] with k = c; a tree: its nodes and p rows)."""

    def after_verify(self, verifier: SequenceCache, emitted: list[list[int]]) -> None:
        """emitted[b]: row b's m_b accepted drafts then its recovered or bonus token."""

    def select(self, rows: list[int]) -> None:
        """Keep only these batch rows."""


def draft_loop(logits: torch.Tensor, coins: torch.Tensor, probs: ProbsFn, step: StepFn) -> Draft:
    """The k = coins.shape[1] drafting steps from the first logits [B, V]: p_i = probs(logits),
    n_i drawn from p_i with coin i, then step(n_i) gives the next logits (not after the last)."""
    k = coins.shape[1]
    ps, ns = [], []
    for i in range(k):
        p = probs(logits)  # [B, V]
        n = sample_from_probs(p, coins[:, i])  # [B]
        ps.append(p)
        ns.append(n)
        if i < k - 1:
            logits = step(n)
    return Draft(probs=torch.stack(ps, 1), ids=torch.stack(ns, 1))


class IndependentDrafter:
    """A separate draft model with its own KV cache (`SequenceCache`, holes per row).

    `pending[b]` are row b's committed tokens the draft has not encoded yet: the last token
    after a rejection, or the last draft and the bonus token after a full acceptance (the last
    draft was never fed back). The round's first forward encodes them, left-padded to one width
    with holes the cache skips, so that the batch needs no extra forward to catch up.
    """

    def __init__(self, model: torch.nn.Module, vocab: int) -> None:
        self.cache = SequenceCache(model, vocab)
        self.pending: list[list[int]] = []
        self.lengths: list[int] = []  # committed tokens per row
        self.k = 0  # the latest round's draft length

    def prefill(self, tokens: list[list[int]], verifier: SequenceCache) -> None:
        self.cache.prefill([t[:-1] for t in tokens])
        self.pending = [t[-1:] for t in tokens]
        self.lengths = [len(t) for t in tokens]

    def propose(self, coins: torch.Tensor, probs: ProbsFn) -> Draft:
        self.k = coins.shape[1]
        width = max(len(t) for t in self.pending)
        ids = torch.tensor([[0] * (width - len(t)) + t for t in self.pending], device=coins.device)
        holes = None
        if any(len(t) < width for t in self.pending):
            holes = [[j >= width - len(t) for j in range(width)] for t in self.pending]
        first = self.cache.step(ids, holes, 1)[:, -1]  # [B, V]
        return draft_loop(first, coins, probs, self._step)

    def _step(self, n: torch.Tensor) -> torch.Tensor:
        return self.cache.step(n[:, None], None, 1)[:, -1]  # [B] -> [B, V]

    def after_verify(self, verifier: SequenceCache, emitted: list[list[int]]) -> None:
        # The cache holds the committed tokens before the round and d_1 .. d_{k-1}: keep the
        # accepted ones; with all k accepted, d_k and the bonus token are still to encode.
        for b, out in enumerate(emitted):
            self.lengths[b] += len(out)
            self.pending[b] = out[-2:] if len(out) == self.k + 1 else out[-1:]
        self.cache.keep([n - len(p) for n, p in zip(self.lengths, self.pending, strict=True)])

    def select(self, rows: list[int]) -> None:
        self.cache.select(rows)
        self.pending = [self.pending[r] for r in rows]
        self.lengths = [self.lengths[r] for r in rows]
