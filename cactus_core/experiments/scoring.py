"""The sweep's per-position scoring, off the decoding thread.

For every decided position a sweep needs the exact KL(pi ‖ q), the rule's exact expected
acceptance sum_n p(n)·a(n) and the one-price limit sums. That work is an O(V log V) pass or
more per position, and done inside the decoder's round it was 27–40% of a sweep's wall time
(docs/benchmarks.md, "A sweep's time"). It needs nothing the next round needs, so the decoder
hands the rows to a `PositionScores` probe, which scores them on one worker thread while the
models run the next rounds: torch releases the GIL in both, so on two cores the two overlap.
With `rows_top_m` it also keeps each position's compact rows (`estimate.compact_rows`), from
which the sweep estimates the rule's curve on the positions its own run decoded.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from cactus_core.experiments.estimate import compact_rows, estimate_frontier
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
    is known. Call `finish` when the decoding is over: it waits for the worker and stops it.
    rows_top_m > 0 also keeps each position's compact (p, q) rows over the union of their
    top rows_top_m ids and the tail."""

    def __init__(self, judge: Rule, limit: bool, rows_top_m: int = 0) -> None:
        self.judge = judge
        self.limit = limit
        self.rows_top_m = rows_top_m
        self.rounds: dict[tuple[int, int], list[Score]] = {}
        # (row, round) -> compact p and q, [decided, 2·rows_top_m + 1] each
        self.rows: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
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

    def at_row(self, row: int) -> Any:
        """This probe for a decoder of one sequence that is row `row` of the chunk."""
        return lambda _row, rnd, p, q: self(row, rnd, p, q)

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
        if self.rows_top_m:
            self.rows[(row, rnd)] = compact_rows(p, q, self.rows_top_m)

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
        return [s for rnd, n in _decided(trace) for s in self.rounds.get((row, rnd), [])[:n]]

    def own_curve(self, outs: list, rule: str, k: int) -> tuple[Any, int]:
        """The rule's estimated curve (an EstimatedCurve, or None) on the positions the
        chunk's outputs decoded and this probe kept, with their count."""
        parts = [self.kept_rows(row, out.trace) for row, out in enumerate(outs)]
        parts = [x for x in parts if x is not None]
        if not parts:
            return None, 0
        p = torch.cat([p for p, _ in parts])
        q = torch.cat([q for _, q in parts])
        return estimate_frontier(p, q, k, rules=[rule]).curves[rule], int(p.shape[0])

    def kept_rows(self, row: int, trace: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The compact rows of the same positions as `kept` ([N, W] each), or None if none."""
        kept = [
            (self.rows[(row, rnd)][0][:n], self.rows[(row, rnd)][1][:n])
            for rnd, n in _decided(trace)
            if (row, rnd) in self.rows and n > 0
        ]
        if not kept:
            return None
        return torch.cat([p for p, _ in kept]), torch.cat([q for _, q in kept])


def _decided(trace: Any) -> list[tuple[int, int]]:
    """(round index, positions whose token was kept) of the trace's drafting rounds; a tree
    round (even one that accepted nothing) hands the probe its judged rows on the path."""
    return [(rnd.index, len(rnd.emitted_ids)) for rnd in trace.rounds if not rnd.sampled]
