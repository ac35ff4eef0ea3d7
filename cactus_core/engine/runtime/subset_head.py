"""A tied LM head over a subset of the vocabulary, for cheap drafts.

A small draft's head over the full vocabulary (49,152 x 576 for SmolLM2) costs as much per
token as several of its layers: every draft step reads the whole embedding matrix. A draft
only needs to propose tokens the verifier is likely to emit, so its head can score a fixed
subset S of ids (the frequent ones) and give every other id probability 0. Speculative
sampling stays exact with such a draft: p_n = 0 for n outside S only means those n are never
drafted; the verifier's residual still emits them when it rejects.

The head returns full-vocabulary logits, with FILL outside S, so the decoder, the rules and
transformers' assisted generation see an ordinary causal LM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from cactus_core.engine.runtime.transformers_names import PreTrainedModel

# Finite, so that p * log p stays 0 (not NaN) downstream; exp(FILL - max) is exactly 0 in
# float32, and FILL / temperature stays finite for any temperature above 1e-8.
FILL = -1e30


class VocabSubsetHead(nn.Module):
    """hidden [..., H] -> logits [..., V]: embedding rows `token_ids` scored, FILL elsewhere.

    embedding: the full [V, H] (tied) matrix; only its rows in token_ids are kept (a copy, so
    a head of S ids reads S x H weights per token instead of V x H).
    token_ids: [S] distinct ids in [0, V).
    """

    token_ids: torch.Tensor  # [S] the ids it scores (a buffer)

    def __init__(self, embedding: torch.Tensor, token_ids: torch.Tensor) -> None:
        super().__init__()
        vocab = embedding.shape[0]
        ids = torch.as_tensor(token_ids).to(device=embedding.device, dtype=torch.long).flatten()
        if ids.numel() == 0:
            raise ValueError("VocabSubsetHead: token_ids is empty")
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise ValueError(f"VocabSubsetHead: token_ids must lie in [0, {vocab})")
        if ids.unique().numel() != ids.numel():
            raise ValueError("VocabSubsetHead: token_ids has repeated ids")
        self.out_features = vocab  # what callers read off an nn.Linear head
        self.register_buffer("token_ids", ids, persistent=False)
        self.weight = nn.Parameter(embedding.detach()[ids].clone(), requires_grad=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.scatter(hidden @ self.weight.T)

    def scatter(self, sub: torch.Tensor) -> torch.Tensor:
        """Scores of the subset [..., S] -> full-vocabulary logits [..., V]."""
        fill = max(torch.finfo(sub.dtype).min, FILL)
        out = sub.new_full((*sub.shape[:-1], self.out_features), fill)  # [..., V]
        return out.index_copy_(-1, self.token_ids, sub)

    def extra_repr(self) -> str:
        return f"subset={self.token_ids.numel()}, vocab={self.out_features}"


def attach_subset_head(model: PreTrainedModel, token_ids: torch.Tensor) -> PreTrainedModel:
    """Replace a causal LM's output head by a VocabSubsetHead over its input embedding."""
    emb = model.get_input_embeddings().weight
    model.lm_head = VocabSubsetHead(emb, token_ids)
    # transformers re-ties lm_head to the embedding when this flag is set.
    model.config.tie_word_embeddings = False
    return model
