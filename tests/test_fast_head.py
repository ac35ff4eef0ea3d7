"""head_logits: the transposed-copy path equals the head itself, and follows weight changes."""

from __future__ import annotations

import torch
from torch import nn

from cactus_core.engine.runtime.fast_head import head_logits, linear_scores, single_row_copy
from cactus_core.engine.runtime.subset_head import VocabSubsetHead


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


def test_a_copy_made_while_decoding_serves_autograd_later() -> None:
    head = nn.Linear(8, 50, bias=False)
    with torch.inference_mode():
        head_logits(head, torch.randn(1, 1, 8))
    hidden = torch.randn(1, 1, 8, requires_grad=True)
    head_logits(head, hidden).sum().backward()
    torch.testing.assert_close(hidden.grad[0, 0], head.weight.detach().sum(0))


def test_which_heads_score_rows_through_the_copy() -> None:
    """float32 on CPU: one row through the copy, so the decoder's lazy head pays; bfloat16:
    torch's own layout, where k + 1 rows cost about one."""
    assert single_row_copy(nn.Linear(8, 50, bias=False))
    assert not single_row_copy(nn.Linear(8, 50, bias=False).to(torch.bfloat16))
    assert not single_row_copy(nn.Embedding(50, 8))
    head = nn.Linear(8, 50, bias=False).to(torch.bfloat16)
    hidden = torch.randn(1, 1, 8, dtype=torch.bfloat16)
    torch.testing.assert_close(linear_scores(head, head.weight, hidden), head(hidden))
