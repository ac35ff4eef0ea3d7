"""The decoding loop's clock: seconds per phase, summed over the rounds, and each round's own.

A round runs its phases inside `with clock.draft:` / `with clock.verify:` / `with clock.record:`
and reads its own draft and verify seconds from `clock.lap()`; nothing in a round reads the
time itself. On CUDA the clock can wait for the device at the end of each phase, so that a
phase's seconds are its own work rather than the kernels it queued (`sync`).
"""

from __future__ import annotations

import time
from types import TracebackType

import torch


class Phase:
    """One phase's stopwatch, a context manager: `total` over every round, `lap` since the
    round began."""

    def __init__(self, clock: RoundClock) -> None:
        self._clock = clock
        self._start = 0.0
        self.total = 0.0
        self.lap = 0.0

    def __enter__(self) -> Phase:
        self._start = time.perf_counter()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._clock.wait_for_device()
        spent = time.perf_counter() - self._start
        self.total += spent
        self.lap += spent


class RoundClock:
    """Seconds spent per phase of the decoding loop. `record` is recording on the decoding
    thread (the waits for the recording thread and the parts done inline), `record_inline`
    the inline parts alone."""

    def __init__(self, device: torch.device | None = None, sync: bool = False) -> None:
        self.device = device
        self.sync = sync and device is not None and device.type == "cuda"
        self.draft = Phase(self)
        self.verify = Phase(self)
        self.record = Phase(self)  # the waits and the inline parts
        self.record_inline = Phase(self)  # the inline parts alone

    def wait_for_device(self) -> None:
        if self.sync:
            torch.cuda.synchronize(self.device)

    def lap(self) -> tuple[float, float]:
        """(draft, verify) seconds since the last lap: the round's own; starts the next."""
        out = (self.draft.lap, self.verify.lap)
        for phase in (self.draft, self.verify, self.record, self.record_inline):
            phase.lap = 0.0
        return out
