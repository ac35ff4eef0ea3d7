"""A padded batch is prefilled in pieces of columns: memory stays bounded, numbers unchanged."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from cactus_core.engine.runtime import kv_cache
from cactus_core.engine.runtime.kv_cache import SequenceCache

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def test_pieces_give_the_same_next_logits_as_one_row_alone(tiny_pair, monkeypatch):
    prefixes = [[3 + (i * 5 + j) % 250 for j in range(90 - 17 * i)] for i in range(3)]
    last = torch.tensor([[7], [8], [9]])
    calls = []
    original = SequenceCache._forward

    def counting(self, *args, **kwargs):
        calls.append(args[0].shape[1])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SequenceCache, "_forward", counting)
    monkeypatch.setattr(kv_cache, "MASK_BUDGET", 3 * 90 * 20)  # pieces of 20 columns
    batch = SequenceCache(tiny_pair.verifier, 259)
    batch.prefill(prefixes)
    assert calls == [20, 20, 20, 20, 10]
    batched = batch.step(last, None, 1)[:, 0]  # [3, V]
    for i, prefix in enumerate(prefixes):
        alone = SequenceCache(tiny_pair.verifier, 259)
        alone.prefill([prefix])
        torch.testing.assert_close(alone.step(last[i : i + 1], None, 1)[0, 0], batched[i])


def test_a_near_context_batch_prefill_stays_bounded():
    """5 prompts of ~8k tokens: 1.6 GB of mask and scores at 4k before the pieces; now the
    peak grows by ~110 MB (benchmarks/bench_prefill_memory.py, docs/benchmarks.md)."""
    from bench_prefill_memory import peak_growth_mb

    assert peak_growth_mb(rows=5, tokens=8000) < 400
