"""Tensor helpers shared across the maths modules (prefix sums, gathers, a fast sort of
non-negative floats); a leaf, importing nothing of cactus_core."""

from __future__ import annotations

import numpy as np
import torch


def excl_cumsum(x: torch.Tensor) -> torch.Tensor:
    """[..., V] -> [..., V+1]: entry i is the sum of the first i entries."""
    return torch.nn.functional.pad(x.cumsum(-1), (1, 0))


def take(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return table.gather(-1, idx)


# CPU 1-D integer sorts this long take torch's radix path; shorter rows sort faster in numpy.
_RADIX_MIN = 1 << 14
_KEY = {torch.float64: (torch.int64, 0x7FFFFFFFFFFFFFFF), torch.float32: (torch.int32, 0x7FFFFFFF)}


def sort_nonneg(x: torch.Tensor, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x.sort(-1, descending) for x ≥ 0 (inf allowed, no NaN): (values, indices) [..., V].

    Non-negative IEEE floats order like their bit patterns read as integers, and torch sorts a
    1-D CPU integer tensor by radix: about ten times faster than its comparison sort of
    floats at V = 49,152, which makes the sort no longer dominate the emitted pi. The radix
    path only takes 1-D tensors, hence one sort per row of a long-row batch. Shorter CPU rows
    (a draft's support, 12,289 ids for the feature draft) go to numpy's vectorised argsort,
    three times faster than torch's there. Equal values may come in another order than
    torch's; every caller treats ties alike.
    """
    v = x.shape[-1]
    if x.device.type != "cpu" or x.dtype not in _KEY or x.numel() == 0:
        return x.sort(-1, descending=descending)
    if v < _RADIX_MIN:
        return _numpy_sort(x, descending)
    int_t, top = _KEY[x.dtype]
    key = x.contiguous().view(int_t).clamp_min(0)  # -0.0 reads as a negative integer
    if descending:
        key = torch.sub(top, key)
    rows = [row.sort(stable=True) for row in key.reshape(-1, v)]
    keys = torch.stack([row.values for row in rows]).reshape(x.shape)
    order = torch.stack([row.indices for row in rows]).reshape(x.shape)
    if descending:
        keys = torch.sub(top, keys)
    return keys.view(x.dtype), order  # the sorted keys are the sorted values' bits


def _numpy_sort(x: torch.Tensor, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    a = x.detach().contiguous().numpy()
    order = np.argsort(np.negative(a) if descending else a, axis=-1)
    values = np.take_along_axis(a, order, axis=-1)
    return torch.from_numpy(values), torch.from_numpy(order)


def xlogx(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x * torch.log(x), torch.zeros_like(x))
