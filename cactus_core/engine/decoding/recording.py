"""What a round records: its `RoundTrace` and draft counts, the exact emitted KL(pi ‖ q) at
the decided positions, and the per-position trace rows (top-N of p, q and h, replay rows) that
the Decode page's inspector and trace replay read.

The emitted KL and the trace rows are the costly part (an O(V log V) pass per decided position,
a bisection per position for cactus-budget and cactus-exact). A `Recorder` computes them on one
worker thread from the round's own tensors while the decoder runs the next round: torch's
kernels release the GIL, so with one torch thread per Python thread the two run on two cores.
The decoder hands a round out only once its recording is in (`Recorded.get`), so every round a
consumer sees is complete.

Shapes: B = sequences, k = draft length, J = verifier positions (k + 1 with a full trace), V =
vocabulary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch

from cactus_core.engine.decoding.generation import GenerationStats
from cactus_core.engine.decoding.round import HostRound
from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import Rule

TopRows = list[list[tuple[list[int], list[float]]]]  # [B][J] -> (ids, probs)
T = TypeVar("T")
RECORDER_THREAD = "cactus-recorder"  # the worker thread's name prefix (tests look for it)


@dataclass
class RoundRecord:
    """One sequence's recording of one round: KL(pi ‖ q) at its drafted positions (None after
    the decision) and its trace rows (empty without a full trace)."""

    kl_pi: list[float | None]
    positions: list[PositionTrace] = field(default_factory=list)


class Recorded(Generic[T]):
    """A recording's result: at hand already, or still being computed by a `Recorder`."""

    def __init__(self, value: T | None = None, future: Future | None = None, what: str = ""):
        self._value, self._future, self._what = value, future, what

    @property
    def pending(self) -> bool:
        return self._future is not None

    def get(self) -> T:
        """The result, waiting for the worker if need be; the worker's exception is raised
        here, in the caller, with a note naming the round it was recording."""
        if self._future is None:
            return self._value  # type: ignore[return-value]
        try:
            return self._future.result()
        except Exception as exc:
            exc.add_note(f"raised on the decoder's recording thread while recording {self._what}")
            raise


class Recorder:
    """Runs a decode's recording jobs in order on one worker thread, started at the first job
    and ended by `close` (which the decoder calls however the decode ends: finished, failed,
    or closed by its consumer midway). `work_s` sums the jobs' own time."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.work_s = 0.0

    def submit(self, what: str, fn: Callable[..., T], *args: object) -> Recorded[T]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=RECORDER_THREAD)
        return Recorded(future=self._pool.submit(self._run, fn, *args), what=what)

    def _run(self, fn: Callable[..., T], *args: object) -> T:
        start = time.perf_counter()
        try:
            # inference mode is per thread; the rows are inference tensors of the decode loop
            with torch.inference_mode():
                return fn(*args)
        finally:
            with self._lock:
                self.work_s += time.perf_counter() - start

    def pause(self) -> None:
        """Finish the jobs submitted (their results stay readable) and end the thread; the
        next job starts a new one. For a consumer that holds the decode between rounds for
        as long as a person reads a page: no idle thread waits meanwhile."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def close(self) -> None:
        """Drop the jobs not started, wait for the running one, and end the thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def record_round(
    judge: Rule,
    p: torch.Tensor,
    q: torch.Tensor,
    n: torch.Tensor,
    decided: list[int],
    measure_kl: bool,
    trace: tuple[int, int] | None,
) -> list[RoundRecord]:
    """A speculative round's recording per sequence: the exact emitted KL at the decided
    positions (zero for a lossless judge, or when not measured) and, with trace = (top_n,
    top_m), the trace rows. p [B, k, V], q [B, J, V], n [B, k]."""
    k = n.shape[1]
    if judge.lossless or not measure_kl:
        kl_pi = zero_kl(k, decided)  # pi = q, or not asked for
    else:
        kl_pi = emitted_kl(judge, p, q[:, :k], decided)
    if trace is None:
        return [RoundRecord(row) for row in kl_pi]
    positions = position_traces(judge, p, q, n, kl_pi, *trace)
    return [RoundRecord(row, pos) for row, pos in zip(kl_pi, positions, strict=True)]


def emitted_kl(
    judge: Rule, p: torch.Tensor, q: torch.Tensor, decided: list[int]
) -> list[list[float | None]]:
    """KL(pi ‖ q) at the first decided[b] drafted positions of row b (p, q [B, k, V]), exact
    from the full rows, None after them: drafts dropped after a rejection were never verified,
    and skipping them saves an O(V log V) pass each."""
    b, k = p.shape[:2]
    rows = torch.tensor([i for i in range(b) for _ in range(decided[i])], device=p.device)
    cols = torch.tensor([j for i in range(b) for j in range(decided[i])], device=p.device)
    p_d, q_d = p[rows, cols], q[rows, cols]  # [N, V], N = sum(decided)
    values, out = kl(emitted_distribution(judge, p_d, q_d), q_d).tolist(), []
    for d in decided:
        out.append(values[:d] + [None] * (k - d))
        values = values[d:]
    return out


def zero_kl(k: int, decided: list[int]) -> list[list[float | None]]:
    """`emitted_kl` where pi = q (a lossless judge) or where KL is not measured."""
    return [[0.0] * d + [None] * (k - d) for d in decided]


def position_traces(
    judge: Rule,
    p: torch.Tensor,
    q: torch.Tensor,
    n: torch.Tensor,
    kl_pi: list[list[float | None]],
    top_n: int,
    top_m: int,
) -> list[list[PositionTrace]]:
    """Top-N of p, q, h, the divergences and the top-M replay rows, per row and position:
    p [B, k, V], q [B, k+1, V], n [B, k] -> [B][k + 1]."""
    k = p.shape[1]
    qk = q[:, :k]
    h = judge.adjusted_target(qk, p, n, validate=False)  # [B, k, V]
    kl_h = kl(h, qk).tolist()
    g = n[..., None]
    pn, qn, hn = (x.gather(-1, g)[..., 0].tolist() for x in (p, qk, h))
    tp, tq, th = top_entries(p, top_n), top_entries(q, top_n), top_entries(h, top_n)
    rp, rq = top_entries(p, top_m), top_entries(q, top_m)
    ids = n.tolist()
    out = []
    for b in range(p.shape[0]):
        row = []
        for j in range(k + 1):
            pos = PositionTrace(q_ids=tq[b][j][0], q_probs=tq[b][j][1])
            pos.replay_q_ids, pos.replay_q_probs = rq[b][j]
            if j < k:
                d = ids[b][j]
                pos.p_ids, pos.p_probs = tp[b][j]
                pos.h_ids, pos.h_probs = th[b][j]
                pos.draft_id, pos.p_n, pos.q_n, pos.h_n = d, pn[b][j], qn[b][j], hn[b][j]
                pos.kl_h_q, pos.kl_pi_q = kl_h[b][j], kl_pi[b][j]
                pos.replay_p_ids, pos.replay_p_probs = rp[b][j]
                ensure_entry(pos.replay_p_ids, pos.replay_p_probs, d, pn[b][j])
                ensure_entry(pos.replay_q_ids, pos.replay_q_probs, d, qn[b][j])
            row.append(pos)
        out.append(row)
    return out


def top_entries(x: torch.Tensor, n: int) -> TopRows:
    """[B, J, V] -> per row and position (ids, probs) of the n largest, zeros left out."""
    vals, ids = x.topk(min(n, x.shape[-1]), dim=-1)
    out = []
    for vb, ib in zip(vals.tolist(), ids.tolist(), strict=True):
        row = []
        for v, i in zip(vb, ib, strict=True):
            cut = sum(1 for x in v if x > 0)  # topk sorts, so the zeros are at the end
            row.append((i[:cut], v[:cut]))
        out.append(row)
    return out


def ensure_entry(ids: list[int], probs: list[float], token: int, prob: float) -> None:
    """Make sure the drafted token is among a replay row's kept entries (with its exact prob):
    replay rebuilds the row from these entries and must find p_n and q_n there."""
    if token not in ids:
        ids.append(token)
        probs.append(prob)


def draft_round_trace(
    index: int,
    h: HostRound,
    positions: list[PositionTrace],
    text: Callable[[int], str],
    draft_s: float,
    verify_s: float,
) -> RoundTrace:
    """A speculative round's trace, before `_commit` cuts it at EOS or the budget."""
    k, m = h.k, h.num_accepted
    dropped = ["dropped"] * (k - m - 1)  # drafts after the rejection got no decision
    return RoundTrace(
        index=index,
        k=k,
        draft_ids=h.draft_ids,
        draft_text=[text(t) for t in h.draft_ids],
        draft_fates=["accepted"] * m + (["rejected"] if m < k else []) + dropped,
        accept_probs=h.accept_probs,
        accept_coins=h.accept_coins,
        num_accepted=m,
        next_id=h.output_ids[m],
        sample_coin=h.sample_coin,
        emitted_ids=h.emitted_ids,
        emitted_text=[],
        emitted_fates=["accepted"] * m + ["recovered" if m < k else "bonus"],
        draft_s=draft_s,
        verify_s=verify_s,
        positions=positions,
        emitted_logprobs=h.logprobs[: m + 1],
    )


def plain_round_trace(
    index: int, token: int, coin: float, logprob: float, positions: list[PositionTrace]
) -> RoundTrace:
    """A verifier-only step's trace: one sampled token, no draft."""
    return RoundTrace(
        index=index,
        k=0,
        draft_ids=[],
        draft_text=[],
        draft_fates=[],
        accept_probs=[],
        accept_coins=[],
        num_accepted=0,
        next_id=token,
        sample_coin=coin,
        emitted_ids=[token],
        emitted_text=[],
        emitted_fates=["sampled"],
        draft_s=0.0,
        verify_s=0.0,
        positions=positions,
        emitted_logprobs=[logprob],
    )


def count_draft(st: GenerationStats, h: HostRound) -> None:
    """Add a speculative round's draft counts (`_commit` adds the emitted ones)."""
    m = h.num_accepted
    st.draft_calls += h.k
    st.drafted_tokens += h.k
    st.decided_tokens += h.decided
    st.accepted_tokens += m
    st.rejected_q_zero += int(m < h.k and h.q_n[m] == 0.0)
    if len(st.accepted_histogram) <= h.k:
        st.accepted_histogram += [0] * (h.k + 1 - len(st.accepted_histogram))
    st.accepted_histogram[m] += 1
    if len(st.position_reached) < h.k:
        grow = [0] * (h.k - len(st.position_reached))
        st.position_reached += grow
        st.position_accepted += list(grow)
    for j in range(h.decided):
        st.position_reached[j] += 1
    for j in range(m):
        st.position_accepted[j] += 1
