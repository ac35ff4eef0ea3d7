"""benchmarks/bench_compiled_verifier.py compares the decoder's build of a verifier with plain
transformers modules of the same weights (and those compiled). The plain copy must really be
plain (no packed linears, transformers' sdpa), share nothing the decoder's build would see
change, and compute the same logits; each timed call must leave its cache as it found it, so
that every call times the same step. The compile itself takes minutes and is not run here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from cactus_core.engine.runtime.grouped_attention import GROUPED_SDPA, use_grouped_attention
from cactus_core.engine.runtime.packed_linear import PackedLinear, pack_linears, packing_available
from tests.conftest import tiny_llama
from tests.test_packed_linear import KERNELS, pack_dtype

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_compiled_verifier import dynamic_cache_step, plain_copy
from bench_steps import cache_step

pytestmark = pytest.mark.skipif(not packing_available(), reason="torch built without oneDNN")


@pytest.fixture(params=KERNELS, ids=str)
def built(request, monkeypatch):
    """A tiny verifier as `load_pair` builds a bfloat16 one on a CPU with native bfloat16, in
    each dtype this CPU's oneDNN packs (tests/test_packed_linear.py)."""
    pack_dtype(monkeypatch, request.param)
    model = tiny_llama(259, layers=2, seed=0).to(request.param)
    assert pack_linears(model) == 14
    assert use_grouped_attention(model)
    return model


def test_the_plain_copy_is_plain_and_computes_the_same_logits(built):
    plain = plain_copy(built)
    assert not any(isinstance(m, PackedLinear) for m in plain.modules())
    assert plain.config._attn_implementation == "sdpa"
    assert built.config._attn_implementation == GROUPED_SDPA  # the original is untouched
    assert sum(isinstance(m, PackedLinear) for m in built.modules()) == 14
    ids = torch.randint(3, 259, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        want, got = built(ids).logits, plain(ids).logits
    # Packed and plain products agree to a bfloat16 rounding of the layers' products.
    torch.testing.assert_close(got, want, rtol=0.02, atol=0.02)


@pytest.mark.parametrize("width", [1, 5])
def test_each_timed_call_leaves_its_cache_as_it_found_it(built, width):
    prefix = list(range(3, 23))
    plain = plain_copy(built)
    with torch.inference_mode():
        ours, our_cache = cache_step(built, 259, prefix, width)
        theirs, their_cache = dynamic_cache_step(plain, prefix, width)
        for step in (ours, theirs):
            for _ in range(3):
                step()
    assert our_cache.lengths == [len(prefix)]
    assert their_cache.get_seq_length() == len(prefix)
