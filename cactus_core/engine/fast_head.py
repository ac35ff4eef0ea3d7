"""LM-head logits of a single hidden row, fast on CPU.

At batch 1 a decoding step scores one hidden row against the whole head: a [1, H] x [H, V]
product that only streams the weights. torch's CPU linear (x @ W.T with W stored [V, H]) runs
it about twice as slowly as a product with a contiguous [H, V] copy: for SmolLM2's
49,152 x 576 head, 16 ms against 9 ms (one thread, float32, `benchmarks/bench_steps.py`). So
on CPU the decoder keeps such a copy of each head it uses (the head's size once more in
memory) and uses it for single rows. Several rows go through the head itself, which gets no
faster from the copy, and so does bfloat16, which is slow this way on a CPU without native
bf16.
"""

from __future__ import annotations

import threading
import weakref

import torch
from torch import nn

from cactus_core.engine.subset_head import VocabSubsetHead

# head -> (weight, weight._version when copied, weight.T contiguous). A weight changed in place
# (training) bumps its version and a replaced one is another object: both invalidate the copy.
# Keyed by the module, which hashes by identity (tensors compare elementwise).
_TRANSPOSED: weakref.WeakKeyDictionary[nn.Module, tuple[torch.Tensor, int, torch.Tensor]] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()


def _version(weight: torch.Tensor) -> int:
    # Inference tensors (made under torch.inference_mode) keep no version counter; they are
    # not trained, so identity is enough for them.
    return -1 if weight.is_inference() else weight._version


def _transposed(head: nn.Module, weight: torch.Tensor) -> torch.Tensor:
    with _LOCK:
        hit = _TRANSPOSED.get(head)
        if hit is None or hit[0] is not weight or hit[1] != _version(weight):
            hit = (weight, _version(weight), weight.detach().t().contiguous())
            _TRANSPOSED[head] = hit
        return hit[2]


def head_logits(head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """head(hidden) for hidden [..., H], through a transposed copy of the weight when that is
    faster: a single float32 row on CPU, with an nn.Linear or VocabSubsetHead head."""
    weight = getattr(head, "weight", None)
    fast = (
        type(head) in (nn.Linear, VocabSubsetHead)
        and isinstance(weight, torch.Tensor)
        and weight.dtype == torch.float32
        and weight.device.type == "cpu"
        and hidden.dtype == torch.float32
        and hidden.shape[:-1].numel() == 1
    )
    if not fast:
        return head(hidden)
    scores = hidden @ _transposed(head, weight)  # [..., V] or [..., S]
    if isinstance(head, VocabSubsetHead):
        return head.scatter(scores)
    return scores if head.bias is None else scores + head.bias
