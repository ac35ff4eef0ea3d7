"""Opening a decode: the verifier's KV cache, the drafter that fits the pair and the settings,
and the rounds that drafter runs (the one place that knows which kinds exist).

The decoder never asks which kind of drafter it holds: it asks the `Rounds` for how far a round
can draft, for the round's coins and for the round itself (`ChainRounds`: k drafts per row of a
batch; `TreeRounds`: a draft tree for one sequence). Both rounds return a `RoundOutcome`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from cactus_core.engine.decoding.chain_round import ChainRounds
from cactus_core.engine.decoding.clock import RoundClock
from cactus_core.engine.decoding.outcome import RoundOutcome
from cactus_core.engine.decoding.tree_round import TreeRounds
from cactus_core.engine.drafting.drafter import Draft, Drafter, IndependentDrafter
from cactus_core.engine.drafting.feature_drafting import FeatureCache, FeatureDrafters
from cactus_core.engine.drafting.tree_drafter import TreeDrafter
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.rules import Rule
from cactus_core.maths.sampling import SamplingSettings
from cactus_core.maths.tree import DraftTree

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair


class Rounds(Protocol):
    """What a drafter's rounds are to the decoder: how many tokens a round drafts ahead, its
    coins (drawn from each row's generator in a fixed order, whatever the round does) and the
    round (draft, verify under the rule, read back, cut the caches to the accepted path)."""

    def size(self, k: int, room: int, rows: int) -> int:
        """Tokens a round drafts ahead at draft length k with `room` positions left in the
        context for `rows` sequences; 0 when no round fits (a verifier-only step then)."""

    def draw_coins(self, generators: list[torch.Generator], size: int, device: torch.device) -> Any:
        """The round's coins, one row per generator."""

    def run(
        self,
        judge: Rule,
        verifier: SequenceCache,
        last: list[int],
        coins: Any,
        sampling: SamplingSettings,
        clock: RoundClock,
        lazy: bool,
    ) -> RoundOutcome:
        """One round from each row's last committed token."""


@dataclass
class Caches:
    """A decode's verifier cache and, when it speculates, its drafter and the drafter's rounds."""

    verifier: SequenceCache
    drafter: Drafter[Draft] | Drafter[DraftTree] | None = None
    rounds: Rounds | None = None


def open_caches(
    pair: ModelPair,
    vocab: int,
    tokens: list[list[int]],
    speculative: bool,
    tree: TreeSettings | None = None,
    greedy: bool = False,
) -> Caches:
    """The verifier's cache and the drafter (none without speculation), both prefilled with
    every row's tokens but the last. With a feature draft the verifier's cache captures its
    features and the drafter reads them; `tree` makes it grow a draft tree (greedy: at T = 0)."""
    prefixes = [t[:-1] for t in tokens]
    feature = pair.feature_draft if speculative else None
    if speculative and tree is not None and feature is None:
        raise ValueError("tree drafting needs a feature draft (load_pair(feature_draft=...))")
    caches: Caches
    if feature is not None:
        verifier: SequenceCache = FeatureCache(pair.verifier, vocab, feature.feature_layers)
        if tree is not None:
            grower = TreeDrafter(feature, vocab, tree, greedy)
            caches = Caches(verifier, grower, TreeRounds(grower, tree))
        else:
            chains = FeatureDrafters(feature, vocab, len(tokens))
            caches = Caches(verifier, chains, ChainRounds(chains))
    elif speculative:
        independent = IndependentDrafter(pair.draft, vocab)
        caches = Caches(SequenceCache(pair.verifier, vocab), independent, ChainRounds(independent))
    else:
        caches = Caches(SequenceCache(pair.verifier, vocab))
    caches.verifier.prefill(prefixes)
    if caches.drafter is not None:
        caches.drafter.prefill(tokens, caches.verifier)
    return caches
