"""Grouped-query attention read in place (`grouped_attention`): a verify pass of several new
tokens gives exactly what transformers' sdpa attention gives, for one sequence and for a batch
with holes, and every other case is transformers' own."""

from __future__ import annotations

import pytest
import torch

from cactus_core.engine.runtime import grouped_attention
from cactus_core.engine.runtime.grouped_attention import GROUPED_SDPA, use_grouped_attention
from cactus_core.engine.runtime.kv_cache import SequenceCache
from tests.conftest import tiny_llama

VOCAB = 259


def _verify_logits(model, prefixes: list[list[int]], holes: list[list[bool]] | None):
    """Prefill the prefixes, then one 5-token step (the shape of a k = 4 verify pass)."""
    cache = SequenceCache(model, VOCAB)
    cache.prefill(prefixes)
    ids = torch.arange(40, 40 + 5 * len(prefixes)).view(len(prefixes), 5)
    return cache.step(ids, holes, 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", ["one", "ragged"])
def test_a_verify_pass_is_the_same_bit_for_bit(dtype, batch, monkeypatch):
    model = tiny_llama(VOCAB, layers=2, seed=0).to(dtype)  # 4 query heads, 2 key/value heads
    if batch == "one":
        prefixes, holes = [list(range(3, 60))], None
    else:
        prefixes = [list(range(3, 60)), list(range(70, 91))]
        holes = [[True] * 5, [True, False, True, True, True]]
    want = _verify_logits(model, prefixes, holes)
    stacked = []
    real = grouped_attention._stacked_mask
    monkeypatch.setattr(
        grouped_attention, "_stacked_mask", lambda m, g: stacked.append(g) or real(m, g)
    )
    assert use_grouped_attention(model)
    assert model.config._attn_implementation == GROUPED_SDPA
    got = _verify_logits(model, prefixes, holes)
    assert stacked and set(stacked) == {2}  # the stacked path ran, two query heads per group
    assert torch.equal(got, want)


def test_one_new_token_and_the_prefill_are_transformers_own(monkeypatch):
    model = tiny_llama(VOCAB, layers=1, seed=0)
    use_grouped_attention(model)
    monkeypatch.setattr(grouped_attention, "_stacked_mask", lambda m, g: pytest.fail("stacked"))
    cache = SequenceCache(model, VOCAB)
    cache.prefill([list(range(3, 40))])
    assert cache.step(torch.tensor([[50]]), None, 1).shape == (1, 1, VOCAB)


def test_only_grouped_sdpa_models_on_cpu_are_switched():
    torch.manual_seed(0)
    assert not use_grouped_attention(torch.nn.Linear(2, 2))  # no config
    eager = tiny_llama(VOCAB, layers=1, seed=0)
    eager.set_attn_implementation("eager")
    assert not use_grouped_attention(eager)
    ungrouped = tiny_llama(VOCAB, layers=1, seed=0)
    ungrouped.config.num_key_value_heads = ungrouped.config.num_attention_heads
    assert not use_grouped_attention(ungrouped)
    own_attention = tiny_llama(VOCAB, layers=1, seed=0)
    own_attention._supports_attention_backend = False  # as a model with its own attention code
    assert not use_grouped_attention(own_attention)
    assert own_attention.config._attn_implementation == "sdpa"
