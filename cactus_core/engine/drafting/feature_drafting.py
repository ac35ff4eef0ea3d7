"""Decoding with a feature-conditioned draft (`feature_draft.FeatureDraft`, EAGLE-1 style).

The draft reads the verifier's own top-layer features, so it needs them for every committed
position. They come from the verifier's forwards the decoder runs anyway: `FeatureCache`
captures the input of the verifier's final norm (the last decoder layer's output before the
norm, exactly what the draft was trained on) with a forward pre-hook, in the prefill and in
every verify pass, the lazy head's `step_hidden` included. Nothing runs twice. For a
multi-depth draft it also captures the outputs of the draft's `feature_layers` and puts them
before the top feature ([B, w, (n + 1) D]), the layout the draft was trained on.

Positions (x_t: committed token t; f_t: the verifier's feature at position t, which predicts
x_{t+1}): the draft at position t reads (f_t, x_{t+1}) and gives the logits of x_{t+2} and a
predicted feature f^_{t+1}. With N tokens committed the verifier's cache holds positions
0 .. N - 2 (the decoder feeds the last token at the start of the next round), and so does the
draft's (`FeatureDrafter`), whose output at position N - 2 is p of x_N, the first token to draft.

A round (batch 1):
    propose   p_1 from the held logits; d_i drafted on the draft's own features f^: k - 1
              forwards at positions N - 1 .. N + k - 3.
    verify    the verifier reads [x_{N-1}, d_1 .. d_k]: q at k + 1 positions, and features
              f_{N-1} .. f_{N+k-1} as a by-product.
    feed      m drafts accepted, y emitted after them: crop the draft's cache back to N - 1
              positions (the drafted ones go) and read f_{N-1} .. f_{N-1+m} with their next
              tokens d_1 .. d_m, y in one forward. The cache again matches the verifier's
              (N + m positions), and its last row holds p of the next round's first token.

The rule, the coins, the trace, replay and streaming see an ordinary `Draft` (p [B, k, V] and
the drafted ids [B, k]), so every rule works unchanged. The draft's head runs at the last row of
each forward only (`FeatureDraft.predict`).

A batch (`FeatureDrafters`): the verifier runs batched as with any draft (its prefill, its
verify pass, the holes of uneven acceptance), and the draft runs row by row, each row with its
own `FeatureDrafter`. The rows' draft caches have different lengths after every round, and a
draft step costs a few percent of a verifier step, so batching the draft would save little of
a round and need a second hole-keeping cache.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from cactus_core.engine.drafting.drafter import (
    Draft,
    ProbsFn,
    draft_loop,
)
from cactus_core.engine.loading.feature_draft import DraftKVCache, FeatureDraft
from cactus_core.engine.runtime.kv_cache import SequenceCache

if TYPE_CHECKING:
    from cactus_core.engine.runtime.transformers_names import PreTrainedModel


def final_norm(model: PreTrainedModel) -> nn.Module:
    """The verifier's final norm, whose input is the feature the draft reads."""
    norm = getattr(model.base_model, "norm", None)
    if not isinstance(norm, nn.Module):
        raise ValueError(
            f"a feature draft needs a verifier whose base model ends in a `norm` module; "
            f"{type(model).__name__} has none"
        )
    return norm


def decoder_layers(model: PreTrainedModel, wanted: list[int]) -> list[nn.Module]:
    """The verifier's decoder layers of these indices (a multi-depth draft reads them)."""
    layers = getattr(model.base_model, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(
            f"a multi-depth feature draft needs a verifier whose base model has `layers`; "
            f"{type(model).__name__} has none"
        )
    if any(not 0 <= i < len(layers) for i in wanted):
        raise ValueError(f"feature layers {wanted}: the verifier has {len(layers)} layers")
    return [layers[i] for i in wanted]


class FeatureCache(SequenceCache):
    """The verifier's `SequenceCache`, also keeping `features` [B, w, (n + 1) D]: the outputs
    of `feature_layers` (n of them, none by default) and the pre-norm top features of the w
    positions its latest forward read (None before any forward)."""

    def __init__(
        self, model: PreTrainedModel, vocab_size: int, feature_layers: list[int] | None = None
    ) -> None:
        super().__init__(model, vocab_size)
        self.norm = final_norm(model)
        self.layers = decoder_layers(model, list(feature_layers or []))
        self.features: torch.Tensor | None = None
        self._pieces: list[torch.Tensor] | None = None

    def prefill(self, prefixes: list[list[int]]) -> None:
        """As `SequenceCache.prefill`; `features` [B, W, D] then holds every column of the
        right-padded prefixes (a long padded batch is encoded in several pieces)."""
        self._pieces = []
        try:
            super().prefill(prefixes)
            self.features = torch.cat(self._pieces, 1) if self._pieces else None
        finally:
            self._pieces = None

    def _forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        with self._capturing():
            out = super()._forward(*args, **kwargs)
        if self._pieces is not None and self.features is not None:
            self._pieces.append(self.features)
        return out

    def step_tree(self, input_ids: torch.Tensor, parents: list[int]) -> torch.Tensor:
        """As `SequenceCache.step_tree`; `features` then holds every column of the tree."""
        with self._capturing():
            return super().step_tree(input_ids, parents)

    def keep_path(self, columns: list[int]) -> None:
        """As `SequenceCache.keep_path`; `features` keeps the same columns, so that the draft
        reads the accepted path's features as it reads a chain's."""
        super().keep_path(columns)
        if self.features is not None:
            self.features = self.features[:, columns]

    @contextlib.contextmanager
    def _capturing(self) -> Iterator[None]:
        """Capture `features` during the forwards run inside."""
        self.features = None
        owner = threading.get_ident()
        layer_outputs: list[torch.Tensor] = []

        def capture(module: nn.Module, inputs: tuple[Any, ...]) -> None:
            # The app shares one verifier between sessions' threads: only this thread's
            # forward is this cache's (one thread runs its forwards one at a time).
            if threading.get_ident() == owner:
                self.features = inputs[0]  # [B, w, D], the verifier's dtype

        def capture_layer(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            if threading.get_ident() == owner:
                layer_outputs.append(output[0] if isinstance(output, tuple) else output)

        # Hooked per forward, not for the cache's life: a decode abandoned mid-stream (a
        # closed rounds() iterator) must not leave a hook on the caller's model. Forward
        # hooks fire in layer order, which is the order `feature_layers` lists (ascending).
        handles = [self.norm.register_forward_pre_hook(capture)]
        handles += [layer.register_forward_hook(capture_layer) for layer in self.layers]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
        if layer_outputs and self.features is not None:
            self.features = torch.cat([*layer_outputs, self.features], dim=-1)


class FeatureDrafter:
    """The feature draft's decoding state for one sequence.

    Between rounds `cache` holds the `length` positions whose verifier features are known
    (the verifier cache's length: committed tokens - 1), and `logits` [1, V] float32 and
    `feature` [1, 1, D] are the draft's output at the last of them: the logits of the next
    token to draft and the predicted feature that drafting continues from.
    """

    def __init__(self, draft: FeatureDraft, vocab: int) -> None:
        self.draft = draft
        self.vocab = vocab
        self.cache = DraftKVCache()
        self.length = 0
        self.logits: torch.Tensor | None = None
        self.feature: torch.Tensor | None = None

    def prefill(self, tokens: list[int], features: torch.Tensor | None) -> None:
        """tokens: the prompt x_0 .. x_{P-1}; features [1, P - 1, D]: the verifier's f_0 ..
        f_{P-2} from its prefill (None for a one-token prompt); [1, P - 1, input_width] for
        a multi-depth draft."""
        device = self.draft.fc.weight.device
        if features is None or features.shape[1] == 0:
            # No feature to start from: read a zero feature with x_0 once, for the first
            # round's p only, and drop the position (p is still a proper distribution, so the
            # rules stay exact; the first feed reads the real f_0).
            zero = torch.zeros(1, 1, self.draft.config.hidden_size, device=device)
            self.logits, self.feature = self._read(zero, torch.tensor([tokens[:1]], device=device))
            self.cache.crop(0)
            return
        self.feed(features, torch.tensor([tokens[1:]], device=device))

    def feed(self, features: torch.Tensor, next_ids: torch.Tensor) -> None:
        """Read the verifier's features [1, T, D] of the next T committed positions with the
        token after each, next_ids [1, T], after dropping what drafting appended."""
        self.cache.crop(self.length)
        self.logits, self.feature = self._read(features, next_ids)
        self.length += features.shape[1]

    def propose(self, coins: torch.Tensor, probs: ProbsFn) -> Draft:
        """k = coins.shape[1] drafted tokens: p_1 from the held logits, then k - 1 forwards,
        each on the draft's own predicted feature and the token just drafted."""
        if self.logits is None or self.feature is None:
            raise ValueError("a feature drafter proposes after its prefill")
        feature = self.feature

        def step(n: torch.Tensor) -> torch.Tensor:
            nonlocal feature
            logits, feature = self._read(feature, n[:, None])
            return logits

        return draft_loop(self.logits, coins, probs, step)

    def _read(
        self, features: torch.Tensor, next_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft forward appended to the cache -> (logits [1, V] float32 of the token
        after the last position, its predicted feature [1, 1, D])."""
        new = self.draft.predict(features, next_ids, self.cache)[:, -1:]
        return self.draft.logits(new)[:, -1, : self.vocab].float(), new


class FeatureDrafters:
    """The feature draft's state for a batch, a `Drafter`: one `FeatureDrafter` per row (module
    docstring: the verifier is batched, the draft is not). It reads the features that the
    verifier's `FeatureCache` captured."""

    def __init__(self, draft: FeatureDraft, vocab: int, batch: int) -> None:
        self.rows = [FeatureDrafter(draft, vocab) for _ in range(batch)]

    def prefill(self, tokens: list[list[int]], verifier: SequenceCache) -> None:
        """tokens: each row's prompt; the verifier's prefill features [B, W, D] are of the
        right-padded prefixes (row b's own are its first len(tokens[b]) - 1 columns)."""
        features = _features(verifier)
        for b, (row, ids) in enumerate(zip(self.rows, tokens, strict=True)):
            own = None if features is None else features[b : b + 1, : len(ids) - 1]
            row.prefill(ids, own)

    def propose(self, coins: torch.Tensor, probs: ProbsFn) -> Draft:
        """coins [B, k] -> p [B, k, V] and ids [B, k], row b from its own drafter."""
        drafts = [row.propose(coins[b : b + 1], probs) for b, row in enumerate(self.rows)]
        return Draft(
            probs=torch.cat([d.probs for d in drafts]), ids=torch.cat([d.ids for d in drafts])
        )

    def after_verify(self, verifier: SequenceCache, emitted: list[list[int]]) -> None:
        """The verify pass's features [B, k + 1, D]: row b reads its m_b + 1 committed
        positions [x_{N-1}, d_1 .. d_m] with next tokens [d_1 .. d_m, y] (its `feed` crops
        what drafting appended first)."""
        features = _verify_features(verifier)
        for b, (row, out) in enumerate(zip(self.rows, emitted, strict=True)):
            ids = torch.tensor([out], device=features.device)  # [1, m + 1]
            row.feed(features[b : b + 1, : len(out)], ids)

    def select(self, rows: list[int]) -> None:
        self.rows = [self.rows[r] for r in rows]


def _features(verifier: SequenceCache) -> torch.Tensor | None:
    if not isinstance(verifier, FeatureCache):
        raise ValueError("a feature draft reads the features of a FeatureCache verifier")
    return verifier.features


def _verify_features(verifier: SequenceCache) -> torch.Tensor:
    """The features of the verifier's latest forward (a verify pass ran: there are some)."""
    features = _features(verifier)
    if features is None:
        raise ValueError("the verifier's cache holds no features: no forward ran")
    return features
