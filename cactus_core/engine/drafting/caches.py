"""Opening a decode: the verifier's KV cache and the drafter that fits the pair and the
settings (the one place that knows which kinds exist)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cactus_core.engine.drafting.drafter import Drafter, IndependentDrafter
from cactus_core.engine.drafting.feature_drafting import FeatureCache, FeatureDrafters
from cactus_core.engine.drafting.tree_drafter import TreeDrafter
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.runtime.kv_cache import SequenceCache

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair


def open_caches(
    pair: ModelPair,
    vocab: int,
    tokens: list[list[int]],
    speculative: bool,
    tree: TreeSettings | None = None,
    greedy: bool = False,
) -> tuple[SequenceCache, Drafter | None]:
    """The verifier's cache and the drafter (None without speculation), both prefilled with
    every row's tokens but the last. With a feature draft the verifier's cache captures its
    features and the drafter reads them; `tree` makes it grow a draft tree (greedy: at T = 0)."""
    prefixes = [t[:-1] for t in tokens]
    feature = speculative and pair.feature_draft is not None
    if speculative and tree is not None and not feature:
        raise ValueError("tree drafting needs a feature draft (load_pair(feature_draft=...))")
    drafter: Drafter | None = None
    if feature:
        verifier = FeatureCache(pair.verifier, vocab, pair.feature_draft.feature_layers)
        if tree is not None:
            drafter = TreeDrafter(pair.feature_draft, vocab, tree, greedy)
        else:
            drafter = FeatureDrafters(pair.feature_draft, vocab, len(tokens))
    else:
        verifier = SequenceCache(pair.verifier, vocab)
        if speculative:
            drafter = IndependentDrafter(pair.draft, vocab)
    verifier.prefill(prefixes)
    if drafter is not None:
        drafter.prefill(tokens, verifier)
    return verifier, drafter
