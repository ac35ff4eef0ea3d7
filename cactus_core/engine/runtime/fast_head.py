"""LM-head logits, fast on CPU in either dtype.

At batch 1 a decoding step scores one hidden row against the whole head: a [1, H] x [H, V]
product that only streams the weights. Which weight layout streams faster depends on the dtype
(one thread, on a CPU with native bfloat16, AVX-512 BF16; the figures and the commands that
give them are in docs/benchmarks.md, section "Step costs"):

- float32: torch's CPU linear (x @ W.T with W stored [V, H]) runs one row about twice as slowly
  as a product with a contiguous [H, V] copy. So the decoder keeps such a copy of each float32
  head it uses (the head's size once more in memory) for single rows. Several rows go through
  torch's linear and cost several times one row through the copy, so scoring a verify pass's
  rows one by one, up to the first rejection (the lazy head), pays.
- bfloat16: the opposite. torch's linear on the [V, H] layout is the faster one, and k + 1
  rows cost about what 1 does, so a verify pass scores its rows in one call. On a CPU with
  native bfloat16 that product runs through a copy packed once for oneDNN
  (`packed_linear.packed_product`: the same scores, the verifier's head in 2.42 ms for 1 row
  and 2.45 ms for 5 on an AMX CPU).

`single_row_copy` says which regime a head is in; the decoder reads it to choose between the
lazy head and one call. It goes by dtype alone: on a CPU without native bfloat16, k + 1
bfloat16 rows cost about twice one (docs/benchmarks.md, "On a CPU without native
bfloat16"), so there the lazy head would score sps's rows (about 1.7 of 5) for less than one
call, and float32 is the faster build: the embedded pair's default there
(`embedded_drafts.native_bfloat16`).
"""

from __future__ import annotations

import threading
import weakref
from typing import cast

import torch
from torch import nn

from cactus_core.engine.runtime.packed_linear import packed_product, packing_pays
from cactus_core.engine.runtime.subset_head import VocabSubsetHead

# owner -> (weight, weight._version when copied, weight.T contiguous). A weight changed in place
# (training) bumps its version and a replaced one is another object: both invalidate the copy.
# Keyed by the module that owns the weight, which hashes by identity (tensors compare
# elementwise, so they cannot be the keys).
_TRANSPOSED: weakref.WeakKeyDictionary[nn.Module, tuple[torch.Tensor, int, torch.Tensor]] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()


def _version(weight: torch.Tensor) -> int:
    # Inference tensors (made under torch.inference_mode) keep no version counter; they are
    # not trained, so identity is enough for them.
    return -1 if weight.is_inference() else weight._version


def _transposed(owner: nn.Module, weight: torch.Tensor) -> torch.Tensor:
    with _LOCK:
        hit = _TRANSPOSED.get(owner)
        if hit is None or hit[0] is not weight or hit[1] != _version(weight):
            # Made outside inference mode, so that a copy first made while decoding can
            # still serve a forward that autograd tracks (training a draft, say).
            with torch.inference_mode(False):
                hit = (weight, _version(weight), weight.detach().t().contiguous())
            _TRANSPOSED[owner] = hit
        return hit[2]


def copy_pays(weight: torch.Tensor) -> bool:
    """Whether one row scores faster through a transposed copy of this [V, H] weight: float32
    on CPU."""
    return weight.dtype == torch.float32 and weight.device.type == "cpu"


def single_row_copy(head: nn.Module) -> bool:
    """Whether `head_logits` scores single rows of this head through the transposed copy, so
    that k + 1 rows cost several times one (float32 on CPU); otherwise they cost about one."""
    weight = getattr(head, "weight", None)
    return (
        type(head) in (nn.Linear, VocabSubsetHead)
        and isinstance(weight, torch.Tensor)
        and copy_pays(weight)
    )


def linear_scores(owner: nn.Module, weight: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """hidden [..., H] @ weight[V, H].T -> [..., V]: a single float32 row on CPU through a
    transposed copy of the weight kept for `owner` (the module the weight belongs to),
    bfloat16 through a packed copy where that pays (`packed_product`)."""
    if copy_pays(weight) and hidden.dtype == torch.float32 and hidden.shape[:-1].numel() == 1:
        return hidden @ _transposed(owner, weight)
    return packed_product(owner, weight, hidden)


def head_logits(head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """head(hidden) for hidden [..., H]: through `linear_scores` for an nn.Linear or
    VocabSubsetHead head where that pays (float32 on CPU, bfloat16 on a CPU with native
    bfloat16), the head itself otherwise."""
    weight = getattr(head, "weight", None)
    linear = type(head) in (nn.Linear, VocabSubsetHead) and isinstance(weight, torch.Tensor)
    if not isinstance(weight, torch.Tensor) or not (
        single_row_copy(head) or (linear and packing_pays(weight))
    ):
        return cast(torch.Tensor, head(hidden))
    scores = linear_scores(head, weight, hidden)  # [..., V] or [..., S]
    if isinstance(head, VocabSubsetHead):
        return head.scatter(scores)
    bias = getattr(head, "bias", None)
    return scores if not isinstance(bias, torch.Tensor) else scores + bias
