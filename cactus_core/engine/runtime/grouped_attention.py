"""SDPA attention for grouped-query models that reads the key/value heads as they are stored,
for a verify pass of several new tokens on CPU.

transformers' "sdpa" attention lets torch share a key/value head among its query heads only
without a mask (or for a single new token). A verify pass reads k + 1 new tokens after a cached
prefix, so its mask is not plain causal, and transformers copies every key/value head once per
query head it serves (`repeat_kv`) in every layer, and the masked kernel runs on every query
head. Here
the query rows of the heads that share a key/value head are stacked into one head instead:
query [B, H, q, D] -> [B, H_kv, (H / H_kv) q, D], the mask's q rows repeated H / H_kv times
([B, 1, q, kv] -> [B, 1, (H / H_kv) q, kv]). Each query row sees the same keys, values and mask
row as before, so the output is the same, bit for bit (`tests/test_grouped_attention.py`), and
nothing is copied but the queries. On the embedded verifier in bfloat16 a 5-token step went
from 49.45 to 45.76 ms (one thread, an AMX CPU; docs/benchmarks.md, "Step costs").

Every other case (no mask, one new token, a mask per head, no grouping) is transformers' own
`sdpa_attention_forward`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from cactus_core.engine.runtime.transformers_names import (
    AttentionInterface,
    AttentionMaskInterface,
    sdpa_attention_forward,
)

if TYPE_CHECKING:
    from cactus_core.engine.runtime.transformers_names import PreTrainedModel

# The name models are switched to (`use_grouped_attention`); its masks are sdpa's.
GROUPED_SDPA = "cactus_grouped_sdpa"


def grouped_sdpa_forward(
    module: nn.Module,
    query: torch.Tensor,  # [B, H, q, D]
    key: torch.Tensor,  # [B, H_kv, kv, D]
    value: torch.Tensor,  # [B, H_kv, kv, D]
    attention_mask: torch.Tensor | None,  # [B or 1, 1, q, kv] or None
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature -> (output [B, q, H, D], None)."""
    groups = getattr(module, "num_key_value_groups", 1)
    b, heads, q, d = query.shape
    stackable = (
        groups > 1
        and q > 1
        and attention_mask is not None
        and attention_mask.dim() == 4
        and attention_mask.shape[1] == 1
        and dropout == 0.0
        and kwargs.get("position_bias") is None
        and kwargs.get("softcap") is None
    )
    if not stackable or attention_mask is None:
        out, _ = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
        return out, None
    stacked = query.reshape(b, heads // groups, groups * q, d)
    mask = _stacked_mask(attention_mask, groups)
    out = nn.functional.scaled_dot_product_attention(stacked, key, value, mask, scale=scaling)
    return out.reshape(b, heads, q, d).transpose(1, 2).contiguous(), None


# (mask, groups, the mask's rows repeated): every layer of a forward gets the same mask object,
# so one repeat serves them all (it cost more than the attention itself). A mask is made anew
# for every forward (transformers' and `SequenceCache._mask`), never changed in place. Read and
# replaced as one tuple, so concurrent decoders at worst repeat their own mask again.
_LAST_MASK: tuple[torch.Tensor, int, torch.Tensor] | None = None


def _stacked_mask(mask: torch.Tensor, groups: int) -> torch.Tensor:
    global _LAST_MASK
    last = _LAST_MASK
    if last is not None and last[0] is mask and last[1] == groups:
        return last[2]
    stacked = mask.repeat(1, 1, groups, 1)  # rows (head in group, position)
    _LAST_MASK = (mask, groups, stacked)
    return stacked


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
AttentionMaskInterface.register(GROUPED_SDPA, AttentionMaskInterface._global_mapping["sdpa"])


def use_grouped_attention(model: PreTrainedModel) -> bool:
    """Switch a model that runs transformers' "sdpa" attention on CPU with grouped key/value
    heads to `grouped_sdpa_forward`; returns whether it was switched."""
    config = getattr(model, "config", None)
    device = next(model.parameters()).device
    if config is None or device.type != "cpu":
        return False
    # Only models whose attention goes through transformers' registry (a model with its own
    # attention code may branch on the name) and that run sdpa now.
    if not getattr(model, "_supports_attention_backend", False):
        return False
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    heads = getattr(config, "num_attention_heads", 0)
    if getattr(config, "num_key_value_heads", heads) in (0, heads):
        return False
    try:
        model.set_attn_implementation(GROUPED_SDPA)
    except (ValueError, ImportError):  # a model that refuses other attention functions
        return False
    return True
