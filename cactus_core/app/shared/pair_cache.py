"""The app's process-wide cache of loaded model pairs: a small LRU where "warm" means exactly
"held in the cache".

The sidebar says which pair is loaded, and a page that asks for a warm pair gets it without a
load. Both read this one object, so the sidebar can never list a pair that was evicted: with a
separate list of labels (as before), a third pair evicted the first from the cache but not from
the list, and the page then "reloaded" the first pair outside its error handling (a traceback
when its folder had been removed meanwhile).

One load per key at a time: a session asking for a pair that another session (or the start-up
preload) is loading waits for that load instead of starting a second one. A failed load caches
nothing, so the next request tries again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class PairCache(Generic[T]):
    """At most `max_entries` loaded values, least recently used evicted first; thread-safe."""

    def __init__(self, max_entries: int = 2) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._items: OrderedDict[Hashable, tuple[T, str]] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, load: Callable[[], T], label: Callable[[T], str] = str) -> T:
        """The cached value for `key`, or `load()` (cached under `key` with `label(value)` once
        it returns; its exceptions propagate and nothing is cached)."""
        hit = self._touch(key)
        if hit is not None:
            return hit
        with self._lock:
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            hit = self._touch(key)  # another thread may have loaded it while we waited
            if hit is not None:
                return hit
            try:
                value = load()
                text = label(value)
                with self._lock:
                    self._items[key] = (value, text)
                    self._items.move_to_end(key)
                    while len(self._items) > self.max_entries:
                        self._items.popitem(last=False)
            finally:
                with self._lock:
                    self._loading.pop(key, None)
        return value

    def _touch(self, key: Hashable) -> T | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def label(self, key: Hashable) -> str | None:
        """The label of a cached value, None when `key` is not cached (never loads)."""
        with self._lock:
            item = self._items.get(key)
            return None if item is None else item[1]

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def keys(self) -> list[Hashable]:
        """The cached keys, least recently used first."""
        with self._lock:
            return list(self._items)

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
