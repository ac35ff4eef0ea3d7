"""Forcing two threads to overlap, instead of hoping a sleep makes them: a lock that counts the
threads that came to take it, so that the thread holding it can wait until the others are
queued behind it."""

from __future__ import annotations

import threading


class CountedLock:
    """A lock (a context manager, like threading.Lock in a `with`) that counts arrivals."""

    def __init__(self) -> None:
        self._lock, self._arrivals, self.arrived = threading.Lock(), threading.Condition(), 0

    def __enter__(self) -> None:
        with self._arrivals:
            self.arrived += 1
            self._arrivals.notify_all()
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def wait_for(self, n: int, timeout: float = 30) -> bool:
        """Wait until n threads (the caller among them) came to take the lock."""
        with self._arrivals:
            return self._arrivals.wait_for(lambda: self.arrived >= n, timeout=timeout)
