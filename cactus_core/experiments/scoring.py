"""The sweep's per-position scoring, off the decoding thread.

For every decided position a sweep needs the exact KL(pi ‖ q), the rule's exact expected
acceptance sum_n p(n)·a(n) and the one-price limit sums. That work is an O(V log V) pass or
more per position, and done inside the decoder's round it was 25–40% of a sweep's wall time
(docs/benchmarks.md, "Faster sweeps"). It needs nothing the next round needs, so the decoder
hands the rows to a `PositionScores` probe, which scores them on one worker thread while the
models run the next rounds: torch releases the GIL in both, so on two cores the two overlap.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from cactus_core.maths.divergence import kl
from cactus_core.maths.limit import LimitSums, limit_sums_per_row
from cactus_core.maths.rules import Rule

# One score per decided position: (limit sums or None, expected acceptance, KL(pi ‖ q)).
Score = tuple[LimitSums | None, float, float]
# Rounds whose rows may wait for the worker at once: each holds its round's [B, k, V] tensors
# alive, so the backlog is bounded (the decoder then waits for the oldest).
_MAX_PENDING = 8


class PositionScores:
    """Decoder probe: per decided position, its exact KL(pi ‖ q), the rule's expected
    acceptance and (with `limit`) its one-position limit sums, kept until the sequence's fate
    is known. Call `finish` when the decoding is over: it waits for the worker and stops it."""

    def __init__(self, judge: Rule, limit: bool) -> None:
        self.judge = judge
        self.limit = limit
        self.rounds: dict[tuple[int, int], list[Score]] = {}
        # OpenMP's thread count is per thread: a new thread would use every core and spin
        # against the decoding thread, so the worker takes the caller's count.
        self._pool = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="sweep-scores",
            initializer=torch.set_num_threads,
            initargs=(torch.get_num_threads(),),
        )
        self._pending: deque[Future[None]] = deque()

    def __call__(self, row: int, rnd: int, p: torch.Tensor, q: torch.Tensor) -> None:
        while len(self._pending) >= _MAX_PENDING:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(self._score, row, rnd, p, q))

    def _score(self, row: int, rnd: int, p: torch.Tensor, q: torch.Tensor) -> None:
        # The worker's torch ops run on this thread (intra-op parallelism is the caller's
        # setting); the result is written under a key only this call owns.
        a, pi = self.judge.accept_probs_all_and_emitted(p, q, validate=False)
        expected = (p.double() * a.double()).sum(-1).tolist()
        div = [0.0] * p.shape[0] if self.judge.lossless else kl(pi, q).tolist()
        sums: list[LimitSums | None] = (
            list(limit_sums_per_row(p, q)) if self.limit else [None] * p.shape[0]
        )
        self.rounds[(row, rnd)] = list(zip(sums, expected, div, strict=True))

    def finish(self) -> None:
        """Wait for every submitted round (re-raising a worker's error) and stop the worker."""
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def kept(self, row: int, trace: Any) -> list[Score]:
        """The scores of the row's decided positions whose token was kept (a round cut by EOS
        or max_new_tokens loses its tail). Call after `finish`."""
        out: list[Score] = []
        for rnd in trace.rounds:
            if rnd.k > 0:
                out.extend(self.rounds.get((row, rnd.index), [])[: len(rnd.emitted_ids)])
        return out
