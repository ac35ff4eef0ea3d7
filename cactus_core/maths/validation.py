"""Input checks shared by the rules, verify and the emitted distribution.

Checks on tensor values run in the decode loop, so every value check is a reduction that stays
on the device; all of them are gathered and read back with one host sync (`raise_if_any`).
Shape and dtype checks are host-side and free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import torch

T = TypeVar("T")  # what a blockwise function returns: a tensor or a tuple of them

ROW_SUM_TOLERANCE = 1e-3


def work_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64; everything else (bf16, fp16, fp32) is computed in float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def check_float(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def check_int(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got dtype {x.dtype}")


def check_shape(name: str, x: torch.Tensor, shape: Sequence[int]) -> None:
    if tuple(x.shape) != tuple(shape):
        raise ValueError(
            f"{name} has shape {list(x.shape)}, expected {list(shape)} "
            "(shapes of the inputs do not match)"
        )


def prob_checks(name: str, x: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Device-side flags for 'x holds probability rows over its last dim'.

    A row sum (which also catches NaN and inf, since they propagate into the sum) and a
    global minimum, taken block by block on the CPU (see `_row_sums_and_min`).
    """
    check_float(name, x)
    if x.dim() == 0:
        raise ValueError(f"{name} must have a vocabulary dimension, got a scalar")
    if x.shape[-1] == 0:
        raise ValueError(f"{name} has an empty vocabulary dimension")
    if x.numel() == 0:
        return []
    s, low = _row_sums_and_min(x)
    # bf16 cannot hold a row to 1e-3: its rounding alone moves a sum by up to 2^-9.
    tol = max(ROW_SUM_TOLERANCE, torch.finfo(x.dtype).eps)
    return [
        (f"{name} contains NaN or infinite values", ~torch.isfinite(s).all()),
        (f"{name} has negative probabilities", low < 0),
        (
            f"{name} has rows that do not sum to 1 (tolerance {tol:g})",
            (s - 1).abs().amax() > tol,
        ),
    ]


# Blocks of rows this big stay in the CPU's cache between the sum and the minimum.
_CACHE_BLOCK = 3 << 19


def _row_sums_and_min(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row sums [...] in the work dtype, global minimum) of x [..., V].

    On the CPU both reductions run per block of rows that fits in cache, so x is read from
    memory about once instead of twice (validation then costs ~1.5 read passes, not 2);
    elsewhere (CUDA) two plain reductions.
    """
    v = x.shape[-1]
    rows = max(1, _CACHE_BLOCK // (v * x.element_size()))
    dtype = work_dtype(x)
    total = x.numel() // v
    if x.device.type != "cpu" or not x.is_contiguous() or total < 2 * rows:
        return x.sum(-1, dtype=dtype), x.amin()
    flat = x.view(total, v)
    sums = torch.empty(total, dtype=dtype)
    mins = []
    for i in range(0, total, rows):
        block = flat[i : i + rows]
        torch.sum(block, -1, dtype=dtype, out=sums[i : i + rows])
        mins.append(block.amin())
    return sums.view(x.shape[:-1]), torch.stack(mins).amin()


def id_checks(name: str, ids: torch.Tensor, vocab: int) -> list[tuple[str, torch.Tensor]]:
    if ids.numel() == 0:
        return []
    return [
        (f"{name} has token ids outside [0, {vocab})", (ids.amin() < 0) | (ids.amax() >= vocab))
    ]


def uniform_checks(name: str, u: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    check_float(name, u)
    if u.numel() == 0:
        return []
    return [(f"{name} must lie in [0, 1)", ~((u >= 0) & (u < 1)).all())]


def raise_if_any(checks: list[tuple[str, torch.Tensor]]) -> None:
    """One host sync for every flag; raise ValueError naming the first failed check."""
    if not checks:
        return
    flags = torch.stack([flag.reshape(()) for _, flag in checks])
    for (message, _), bad in zip(checks, flags.tolist(), strict=True):
        if bad:
            raise ValueError(message)


def check_pair(p: torch.Tensor, q: torch.Tensor, validate: bool = True) -> None:
    """p (draft) and q (verifier) at the same positions: same shape, probability rows."""
    check_float("p", p)
    check_float("q", q)
    if p.shape != q.shape:
        raise ValueError(f"p has shape {list(p.shape)} but q has shape {list(q.shape)}")
    if p.device != q.device:
        raise ValueError(f"p is on {p.device} but q is on {q.device}")
    if validate:
        raise_if_any(prob_checks("p", p) + prob_checks("q", q))


def blockwise(fn: Callable[..., T], *xs: torch.Tensor, block: int = 1 << 18) -> T:
    """fn over blocks of positions of xs [..., V] (same shape); fn returns per-position
    tensors [n] (or a tuple of them), stitched back to [...].

    Not a loop over rows: blocks hold ~2^18 entries so that the many temporaries of the
    bisections stay small. Past glibc's 32 MiB mmap threshold every fresh temporary page
    faults, which made a [100k, 50] float64 bisection 10x slower than the same work in blocks.
    """
    v = xs[0].shape[-1]
    lead = xs[0].shape[:-1]
    flat = [x.reshape(-1, v) for x in xs]
    rows = max(1, block // v)
    total = flat[0].shape[0]
    outs: list[Any]
    if total <= rows:
        outs = [fn(*flat)]
    else:
        outs = [fn(*(f[i : i + rows] for f in flat)) for i in range(0, total, rows)]
    if isinstance(outs[0], tuple):
        parts = zip(*outs, strict=True)
        return cast(T, tuple(torch.cat(list(p)).reshape(lead) for p in parts))
    return cast(T, torch.cat(outs).reshape(lead))


def check_number(
    rule: str,
    name: str,
    value: object,
    low: float,
    high: float,
    integer: bool = False,
) -> float | int:
    """A scalar rule parameter in [low, high]; the error names the allowed range."""
    allowed = (
        f"an integer in [{low:g}, {high:g}]" if integer else f"a number in [{low:g}, {high:g}]"
    )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"rule {rule!r}: {name} must be {allowed}, got {value!r}")
    if integer and float(value) != int(value):
        raise ValueError(f"rule {rule!r}: {name} must be {allowed}, got {value!r}")
    v = float(value)
    if not (low <= v <= high):
        raise ValueError(f"rule {rule!r}: {name} must be {allowed}, got {value!r}")
    return int(v) if integer else v
