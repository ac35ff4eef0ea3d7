"""Handing freed memory back to the system.

glibc's allocator keeps the pages of freed blocks for reuse, so a server whose decoders and KV
caches were freed still shows their size in its resident memory (+126 MB after twelve closed
Step-through tabs). `malloc_trim(0)` returns the free pages at the top of each heap and every
whole free page inside it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_free_memory() -> bool:
    """Return freed heap pages to the system; False where the C library has no malloc_trim
    (not glibc), where nothing is done."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0) >= 0)
