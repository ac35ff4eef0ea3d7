"""Linear layers whose bfloat16 weights are packed once for oneDNN, on CPU.

torch's CPU linear in bfloat16 runs oneDNN's matmul, which lays the weight out in oneDNN's
blocked format on every call. Done once at load instead, the product is the same, bit for bit
(`tests/test_packed_linear.py`), and cheaper: the embedded verifier's 210 decoder-layer
products took 32.3 ms for 1 row and 34.6 ms for 5 through `F.linear`, and 25.6 and 25.4 ms
packed (one thread, an AMX CPU; docs/benchmarks.md, "Step costs"). The packed copy costs the
weights' size once more in memory.

Only where it pays: bfloat16 weights on a CPU with native bfloat16 (`native_bfloat16`) whose
oneDNN packs them (`can_pack`), with no gradient to track (oneDNN's packed product has no
backward), so training and float32 run as before. An LM head stays an nn.Linear: `fast_head`
scores it through `packed_product`."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from functools import cache
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

# oneDNN picks a blocking for this many rows; a verify pass of k + 1 = 5 rows, a draft or
# decoding step of 1 and a reference sweep's batch of 24 all measured alike with it.
ROWS_HINT = 5


def native_bfloat16() -> bool:
    """Whether this CPU has bfloat16 matrix instructions (AVX-512 BF16 or AMX tiles); torch's
    CPU matmul uses them, and without them it widens bfloat16 to float32 on every call."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


@cache
def packing_available() -> bool:
    """Whether this torch can pack a linear weight for oneDNN."""
    return torch.backends.mkldnn.is_available() and hasattr(
        torch.ops.mkldnn, "_reorder_linear_weight"
    )


@cache
def can_pack(dtype: torch.dtype) -> bool:
    """Whether oneDNN packs linear weights of this dtype on this CPU. It packs float32 on any
    x86-64, but bfloat16 only with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT, and refuses (a
    RuntimeError) rather than widen on a CPU without them, an AVX2 one say."""
    if not packing_available():
        return False
    try:
        with torch.inference_mode():
            torch.ops.mkldnn._reorder_linear_weight(torch.ones(8, 8, dtype=dtype), ROWS_HINT)
    except RuntimeError:
        return False
    return True


def packing_pays(weight: torch.Tensor) -> bool:
    """Whether products with this weight run faster packed: bfloat16 on a CPU with native
    bfloat16, whose oneDNN packs it."""
    return (
        weight.dtype == torch.bfloat16
        and weight.device.type == "cpu"
        and native_bfloat16()
        and can_pack(torch.bfloat16)
    )


def _key(weight: torch.Tensor) -> tuple[int, torch.dtype, int]:
    # A weight moved, cast or replaced gets new storage; one trained in place bumps its version.
    # Inference tensors keep no version; nothing changes them in place.
    return weight.data_ptr(), weight.dtype, -1 if weight.is_inference() else weight._version


# owner -> (the weight's _key when packed, the packed copy). Keyed by the module that owns the
# weight (modules hash by identity), so a head shared by two decoders is packed once.
_PACKED: weakref.WeakKeyDictionary[nn.Module, tuple[tuple[Any, ...], torch.Tensor]] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()


def packed_copy(owner: nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """`weight` [N, K] packed for oneDNN, kept for `owner` until the weight changes."""
    key = _key(weight)
    hit = _PACKED.get(owner)  # read without the lock: every product of a decoding step asks
    if hit is not None and hit[0] == key:
        return hit[1]
    with _LOCK:
        hit = _PACKED.get(owner)
        if hit is None or hit[0] != key:
            with torch.inference_mode():
                hit = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT))
            _PACKED[owner] = hit
        return hit[1]


def packed_product(
    owner: nn.Module, weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [..., K] -> [..., N]: through `packed_copy` where
    packing pays and no gradient is tracked (oneDNN's packed product has no backward). Under
    torch.compile it is F.linear: the packed copy's cache breaks the graph, and inductor packs
    weights itself when it freezes them."""
    plain = torch.compiler.is_compiling() or x.dtype != weight.dtype or torch.is_grad_enabled()
    if plain or not packing_pays(weight):
        return F.linear(x, weight, bias)
    return _packed_linear_op()(x, packed_copy(owner, weight), bias, "none", [], "")


@cache
def _packed_linear_op() -> Callable[..., torch.Tensor]:
    # Resolved once: looking an op up through torch.ops costs a few microseconds a call, and a
    # verifier step makes 211 of them.
    return torch.ops.mkldnn._linear_pointwise


class PackedLinear(nn.Linear):
    """An nn.Linear (the same weight and bias Parameters, the same state dict) whose forward
    goes through `packed_product`."""

    @classmethod
    def wrap(cls, linear: nn.Linear) -> PackedLinear:
        packed = cls.__new__(cls)
        nn.Module.__init__(packed)
        packed.in_features, packed.out_features = linear.in_features, linear.out_features
        packed.weight, packed.bias = linear.weight, linear.bias
        return packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return packed_product(self, self.weight, x, self.bias)


def pack_linears(model: nn.Module) -> int:
    """Swap every nn.Linear of `model` whose products run faster packed (`packing_pays`) for a
    `PackedLinear` over the same Parameters; returns how many. The LM head stays an nn.Linear
    (`fast_head.head_logits` packs it the same way). The packed copies are made now, so that
    the first decoding step does not pay for them."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if get_head is not None else None
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear or not packing_pays(child.weight):
                continue
            if child is head:
                packed_copy(child, child.weight)
                continue
            packed = PackedLinear.wrap(child)
            packed_copy(packed, packed.weight)
            setattr(parent, name, packed)
            swapped += 1
    return swapped
