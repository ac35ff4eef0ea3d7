"""The sweep's per-position scoring, off the decoding thread.

For every decided position a sweep needs the exact KL(pi ‖ q) (and, beside it, TV(pi, q) and
the reverse KL(q ‖ pi), from the same pi), the rule's exact expected acceptance
sum_n p(n)·a(n) and the one-price limit sums. That work is an O(V log V) pass or
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
from typing import Any, NamedTuple

import torch

from cactus_core.experiments.estimates.curves import compact_rows, estimable, estimate_frontier
from cactus_core.experiments.estimates.override import OverrideSums
from cactus_core.maths.divergence import kl, reverse_kl, total_variation
from cactus_core.maths.limit import LimitSums, limit_sums_per_row
from cactus_core.maths.rules import Rule


class Score(NamedTuple):
    """One decided position's scores, each from the rule's exact pi at that position."""

    limit: LimitSums | None  # its one-position limit sums (with `limit`)
    expected: float  # sum_n p(n)·a(n)
    kl: float  # KL(pi ‖ q)
    tv: float  # TV(pi, q)
    reverse_kl: float  # KL(q ‖ pi), inf where pi = 0 < q


# Rounds whose rows may wait for the worker at once: each holds its round's [B, k, V] tensors
# alive, so the backlog is bounded (the decoder then waits for the oldest).
_MAX_PENDING = 8


class PositionScores:
    """Decoder probe: per decided position, its exact KL(pi ‖ q), the rule's expected
    acceptance and (with `limit`) its one-position limit sums, kept until the sequence's fate
    is known. Call `finish` when the decoding is over: it waits for the worker and stops it.
    rows_top_m > 0 also keeps each position's compact (p, q) rows over the union of their
    top rows_top_m ids and the tail."""

    def __init__(self, judge: Rule, limit: bool, rows_top_m: int = 0, k: int = 0) -> None:
        self.judge = judge
        self.limit = limit
        # a rule that overrides sps is scored from the decode (`override_sums`), which reads
        # compact rows and where each decided draft could have been overridden (k drafts a round)
        self.k = k
        self.rows_top_m = (
            max(rows_top_m, OVERRIDE_TOP_M) if judge.caps.overrides_sps else rows_top_m
        )
        self.eligible: dict[tuple[int, int], torch.Tensor] = {}
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
        zeros = [0.0] * p.shape[0]
        # the three divergences read the one pi already computed: O(V) passes each, beside
        # the O(V log V) of pi itself
        lossless = self.judge.caps.lossless
        div = zeros if lossless else kl(pi, q).tolist()
        tv = zeros if lossless else total_variation(pi, q).tolist()
        rev = zeros if lossless else reverse_kl(pi, q).tolist()
        sums: list[LimitSums | None] = (
            list(limit_sums_per_row(p, q)) if self.limit else [None] * p.shape[0]
        )
        self.rounds[(row, rnd)] = [
            Score(*s) for s in zip(sums, expected, div, tv, rev, strict=True)
        ]
        if self.rows_top_m:
            self.rows[(row, rnd)] = compact_rows(p, q, self.rows_top_m)
        if self.judge.caps.overrides_sps:
            self.eligible[(row, rnd)] = self.judge.could_override(q, self.k)

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
        chunk's outputs decoded and this probe kept, with their count; None for a rule rows
        cannot estimate (`estimate.estimable`)."""
        if not estimable(rule):
            return None, 0
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

    def override_sums(self, row: int, trace: Any) -> OverrideSums:
        """For a rule that overrides sps: the trials and divergence sums of the row's kept
        decided positions (`override_estimate.OverrideSums`), from each round's verdict (sps's
        a(n) and coin per draft, its fate) and the probe's compact rows. Call after `finish`."""
        ps, qs, qn, rejected, overridden, eligible = [], [], [], [], [], []
        by_index = {r.index: r for r in trace.rounds}
        for rnd, n in _decided(trace):
            if (row, rnd) not in self.rows or n == 0:
                continue
            p, q = self.rows[(row, rnd)]
            n = min(n, p.shape[0])
            v = by_index[rnd].verdict
            sps_no = [u >= a for u, a in zip(v.coins[:n], v.accept_probs[:n], strict=True)]
            ps.append(p[:n])
            qs.append(q[:n])
            qn += v.q[:n]
            rejected += sps_no
            overridden += [
                f == "accepted" and no for f, no in zip(v.fates[:n], sps_no, strict=True)
            ]
            eligible.append(self.eligible[(row, rnd)][:n])
        if not ps:
            return OverrideSums.empty()
        return OverrideSums.of(
            torch.cat(ps),
            torch.cat(qs),
            torch.tensor(qn, dtype=torch.float64),
            torch.tensor(rejected, dtype=torch.bool),
            torch.tensor(overridden, dtype=torch.bool),
            torch.cat(eligible),
        )


# The top ids of p and of q each decided position keeps when a rule's law is estimated from
# the decode (compact rows: a divergence on them, the rest merged into one tail bin, is at most
# the full rows' one, by the data-processing inequality).
OVERRIDE_TOP_M = 128


def _decided(trace: Any) -> list[tuple[int, int]]:
    """(round index, positions whose token was kept) of the trace's drafting rounds; a tree
    round (even one that accepted nothing) hands the probe its judged rows on the path."""
    return [(rnd.index, len(rnd.emitted_ids)) for rnd in trace.rounds if not rnd.sampled]
