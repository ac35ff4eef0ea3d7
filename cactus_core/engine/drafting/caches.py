"""Opening a decode: the verifier's KV cache and the drafter that fits the pair and the
settings (the one place that knows which kinds exist)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cactus_core.engine.drafting.drafter import Draft, Drafter, IndependentDrafter
from cactus_core.engine.drafting.feature_drafting import FeatureCache, FeatureDrafters
from cactus_core.engine.drafting.tree_drafter import TreeDrafter
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.tree import DraftTree

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair


@dataclass
class Caches:
    """A decode's verifier cache and its drafter: one that proposes chains, one that grows
    trees, or neither (verifier-only sampling)."""

    verifier: SequenceCache
    chain: Drafter[Draft] | None = None
    tree: Drafter[DraftTree] | None = None

    @property
    def drafter(self) -> Drafter[Draft] | Drafter[DraftTree] | None:
        return self.chain if self.chain is not None else self.tree


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
    if feature is not None:
        caches = Caches(FeatureCache(pair.verifier, vocab, feature.feature_layers))
        if tree is not None:
            caches.tree = TreeDrafter(feature, vocab, tree, greedy)
        else:
            caches.chain = FeatureDrafters(feature, vocab, len(tokens))
    else:
        caches = Caches(SequenceCache(pair.verifier, vocab))
        if speculative:
            caches.chain = IndependentDrafter(pair.draft, vocab)
    caches.verifier.prefill(prefixes)
    if caches.drafter is not None:
        caches.drafter.prefill(tokens, caches.verifier)
    return caches
