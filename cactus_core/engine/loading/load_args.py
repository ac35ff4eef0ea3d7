"""The arguments `load_pair` resolves before it loads anything: the device, the dtype and the
cache folder (GGUF conversions, weight hashes)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

CACHE_ENV = "CACTUS_CACHE_DIR"


def resolve_device(device: str | torch.device) -> torch.device:
    if isinstance(device, torch.device):
        dev = device
    elif device == "auto":
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    elif isinstance(device, str) and device.split(":")[0] in ("cpu", "cuda"):
        dev = torch.device(device)
    else:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or a torch.device, got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was requested but torch sees no CUDA device")
    return dev


_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: torch.dtype | str | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in _DTYPES:
        return _DTYPES[dtype.removeprefix("torch.")]
    raise ValueError(f"dtype must be one of {sorted(_DTYPES)} or None, got {dtype!r}")


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "cactus-lab"
    return Path(cache_dir).expanduser()
