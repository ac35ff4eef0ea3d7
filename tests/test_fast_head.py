"""head_logits: the transposed-copy path equals the head itself, and follows weight changes."""

from __future__ import annotations

import torch
from torch import nn

from cactus_core.engine.fast_head import head_logits
from cactus_core.engine.subset_head import VocabSubsetHead


def test_single_row_matches_the_head_for_linear_and_subset_heads() -> None:
    gen = torch.Generator().manual_seed(0)
    emb = torch.randn(300, 16, generator=gen)
    linear = nn.Linear(16, 300, bias=True)
    subset = VocabSubsetHead(emb, torch.randperm(300, generator=gen)[:40])
    for head in (linear, subset):
        for shape in ((1, 1, 16), (1, 16), (2, 3, 16)):
            hidden = torch.randn(*shape, generator=gen)
            with torch.no_grad():
                torch.testing.assert_close(head_logits(head, hidden), head(hidden))


def test_copy_follows_in_place_weight_updates() -> None:
    head = nn.Linear(8, 50, bias=False)
    hidden = torch.randn(1, 1, 8)
    with torch.no_grad():
        before = head_logits(head, hidden)
        head.weight.mul_(2.0)
        after = head_logits(head, hidden)
        torch.testing.assert_close(after, 2 * before)
        torch.testing.assert_close(after, head(hidden))


def test_heads_built_under_inference_mode() -> None:
    with torch.inference_mode():
        emb = torch.randn(100, 8)
        head = VocabSubsetHead(emb, torch.arange(0, 100, 3))
        hidden = torch.randn(1, 1, 8)
        torch.testing.assert_close(head_logits(head, hidden), head(hidden))
