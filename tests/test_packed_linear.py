"""Packed linears (`PackedLinear`): the same products as torch's F.linear, the same Parameters
and state dict, and torch's own path wherever packing does not apply (float32, autograd, a
weight moved or cast, a CPU whose oneDNN refuses bfloat16).

The library packs bfloat16 only, and only on a CPU with native bfloat16. The packing itself
(which modules are swapped, the cache of packed copies, the fallbacks) does not depend on the
dtype, so the `packs` fixture turns it on for each dtype this CPU's oneDNN packs: float32 on
any x86-64, bfloat16 too where the CPU has AVX-512 or AVX-NE-CONVERT. Every test runs on any
CPU oneDNN runs on; none is skipped for want of bfloat16."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from cactus_core.engine.loading.embedded_drafts import native_bfloat16
from cactus_core.engine.runtime import fast_head, packed_linear
from cactus_core.engine.runtime.fast_head import head_logits
from cactus_core.engine.runtime.packed_linear import (
    _PACKED,
    PackedLinear,
    can_pack,
    pack_linears,
    packed_product,
    packing_available,
    packing_pays,
)
from tests.conftest import tiny_llama

pytestmark = pytest.mark.skipif(not packing_available(), reason="torch built without oneDNN")

# The dtypes oneDNN packs on this CPU (float32 on any x86-64).
KERNELS = [d for d in (torch.float32, torch.bfloat16) if can_pack(d)]


def pack_dtype(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    """Let packing pay for CPU weights of `dtype` (the library's rule is bfloat16 on a CPU
    with native bfloat16)."""

    def pays(weight: torch.Tensor) -> bool:
        return weight.dtype == dtype and weight.device.type == "cpu"

    monkeypatch.setattr(packed_linear, "packing_pays", pays)
    monkeypatch.setattr(fast_head, "packing_pays", pays)


@pytest.fixture(params=KERNELS, ids=str)
def packs(request, monkeypatch) -> torch.dtype:
    pack_dtype(monkeypatch, request.param)
    return request.param


def _assert_same_product(got: torch.Tensor, want: torch.Tensor) -> None:
    # bfloat16 with native bfloat16: both run the same oneDNN kernel, bit for bit. Elsewhere
    # the packed kernel may sum in another order (float32) or widen differently (bfloat16):
    # within a few units in the last place of the product.
    assert got.dtype == want.dtype
    if got.dtype == torch.bfloat16 and native_bfloat16():
        assert torch.equal(got, want)
    elif got.dtype == torch.bfloat16:
        torch.testing.assert_close(got, want, rtol=2**-7, atol=1e-3)
    else:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 5, 24])
def test_a_packed_product_equals_torch_s(packs, rows, bias):
    gen = torch.Generator().manual_seed(rows)
    linear = nn.Linear(576, 1536, bias=bias).to(packs)
    x = torch.randn(2, rows, 576, generator=gen).to(packs)
    packed = PackedLinear.wrap(linear)
    with torch.inference_mode():
        got, want = packed(x), F.linear(x, linear.weight, linear.bias)
    assert packed in _PACKED  # it went through the packed copy
    assert got.shape == (2, rows, 1536) and got.dtype == packs
    _assert_same_product(got, want)


def test_pack_linears_swaps_the_layers_but_not_the_head(packs):
    model = tiny_llama(259, layers=2, seed=0).to(packs)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert pack_linears(model) == 2 * 7  # q, k, v, o, gate, up, down per layer
    assert type(model.lm_head) is nn.Linear
    assert model.lm_head in _PACKED  # packed at load for `head_logits`, not swapped
    layer = model.model.layers[0]
    assert isinstance(layer.self_attn.q_proj, PackedLinear)
    assert isinstance(layer.mlp.down_proj, PackedLinear)
    after = model.state_dict()
    assert after.keys() == state.keys()
    assert all(torch.equal(after[k], v) for k, v in state.items())
    assert pack_linears(model) == 0  # already packed


def test_a_packed_model_computes_the_same_logits(packs):
    model = tiny_llama(259, layers=2, seed=0).to(packs)
    ids = torch.randint(3, 259, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        want = model(input_ids=ids).logits
        pack_linears(model)
        got = model(input_ids=ids).logits
    _assert_same_product(got, want)


def test_the_head_scores_through_its_packed_copy(packs):
    model = tiny_llama(259, layers=1, seed=0).to(packs)
    head = model.lm_head
    hidden = torch.randn(1, 5, 64).to(packs)
    with torch.inference_mode():
        want = F.linear(hidden, head.weight)
        pack_linears(model)
        _assert_same_product(head_logits(head, hidden), want)
        _assert_same_product(packed_product(head, head.weight, hidden[:, :1]), want[:, :1])


def test_float32_and_machines_without_native_bfloat16_are_left_alone(monkeypatch):
    model = tiny_llama(259, layers=2, seed=0)
    assert pack_linears(model) == 0  # float32
    monkeypatch.setattr(packed_linear, "native_bfloat16", lambda: False)
    assert pack_linears(model.to(torch.bfloat16)) == 0


def test_a_cpu_whose_onednn_refuses_bfloat16_keeps_torch_s_linear(monkeypatch):
    """oneDNN packs bfloat16 only with AVX-512 or AVX-NE-CONVERT. Where it refuses (an AVX2
    CPU; on a CPU that packs, the refusal is played by a stand-in that raises as oneDNN does),
    nothing is packed, even if the CPU were taken for one with native bfloat16, and the model
    computes what it computed before."""
    if can_pack(torch.bfloat16):

        def refuse(*args: object) -> torch.Tensor:
            raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support")

        monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
        monkeypatch.setattr(packed_linear, "can_pack", can_pack.__wrapped__)  # asks again
    monkeypatch.setattr(packed_linear, "native_bfloat16", lambda: True)
    assert not packed_linear.can_pack(torch.bfloat16)
    model = tiny_llama(259, layers=2, seed=0).to(torch.bfloat16)
    assert not packing_pays(model.lm_head.weight)
    ids = torch.randint(3, 259, (1, 9), generator=torch.Generator().manual_seed(2))
    hidden = torch.randn(1, 5, 64).to(torch.bfloat16)
    with torch.inference_mode():
        want = model(input_ids=ids).logits
        assert pack_linears(model) == 0 and model.lm_head not in _PACKED
        assert torch.equal(model(input_ids=ids).logits, want)
        assert torch.equal(head_logits(model.lm_head, hidden), model.lm_head(hidden))


def test_with_autograd_it_is_torch_s_linear_and_trains(packs):
    """oneDNN's packed product has no backward: a forward that tracks gradients takes torch's
    path, so a draft can still be trained after it was packed."""
    torch.manual_seed(0)
    plain = nn.Linear(64, 32).to(packs)
    packed = PackedLinear.wrap(copy.deepcopy(plain))
    x = torch.randn(3, 64).to(packs)
    plain(x).float().square().sum().backward()
    packed(x).float().square().sum().backward()
    assert torch.equal(packed.weight.grad, plain.weight.grad)
    assert torch.equal(packed.bias.grad, plain.bias.grad)
    with torch.no_grad():
        packed.weight.add_(1.0)  # trained in place: the next product re-packs
        _assert_same_product(packed(x), F.linear(x, packed.weight, packed.bias))


def test_a_copied_or_cast_packed_linear_computes_what_torch_does(packs):
    linear = nn.Linear(64, 32).to(packs)
    packed = PackedLinear.wrap(linear)
    x = torch.randn(4, 64)
    other = torch.float64 if packs == torch.float32 else torch.float32  # never packed
    with torch.inference_mode():
        copied = copy.deepcopy(packed)  # packs its own copy on first use
        copied.weight.add_(1.0)
        _assert_same_product(copied(x.to(packs)), F.linear(x.to(packs), copied.weight, copied.bias))
        assert not torch.equal(copied.weight, packed.weight)
        packed.to(other)  # cast: torch's own product
        assert torch.equal(packed(x.to(other)), F.linear(x.to(other), packed.weight, packed.bias))


@pytest.mark.slow
def test_the_embedded_pair_in_bfloat16_is_packed_where_it_pays():
    from cactus_core.engine.loading.embedded_drafts import FEATURE_DRAFT_DIR
    from cactus_core.engine.loading.models import load_pair

    pair = load_pair(device="cpu", dtype=torch.bfloat16, feature_draft=FEATURE_DRAFT_DIR)
    models = {"verifier": pair.verifier, "draft": pair.draft, "feature": pair.feature_draft}
    for name, model in models.items():
        head = getattr(model, "get_output_embeddings", lambda: None)()
        linears = {id(m) for m in model.modules() if isinstance(m, nn.Linear) and m is not head}
        packed = {id(m) for m in model.modules() if isinstance(m, PackedLinear)}
        assert len(linears) >= 7, name
        assert packed == (linears if packing_pays(pair.verifier.lm_head.weight) else set()), name
    assert type(pair.verifier.lm_head) is nn.Linear
    assert not any(isinstance(m, PackedLinear) for m in load_pair(device="cpu").verifier.modules())


def test_under_torch_compile_a_packed_linear_is_torch_s_linear(packs):
    # The packed copy's cache would break the graph; inductor packs weights itself when it
    # freezes them (benchmarks/bench_compiled_verifier.py). fullgraph: no break is allowed.
    linear = nn.Linear(64, 96).to(packs)
    packed = PackedLinear.wrap(linear)
    x = torch.randn(1, 3, 64).to(packs)
    traced = torch.compile(packed, backend="eager", fullgraph=True)
    with torch.inference_mode():
        assert torch.equal(traced(x), F.linear(x, linear.weight, linear.bias))
