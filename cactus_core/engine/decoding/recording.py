"""What a round records: the exact emitted KL(pi ‖ q) at the rows the rule decided at, and the
per-position trace rows (top-N of p, q and h, replay rows) that the Decode page's inspector and
trace replay read.

The emitted KL and the trace rows are the costly part (an O(V log V) pass per decided position,
a bisection per position for cactus-budget and cactus-exact). A `Recorder` computes them on one
worker thread from the round's own tensors while the decoder runs the next round: torch's
kernels release the GIL, so with one torch thread per Python thread the two run on two cores.
The decoder hands a round out only once its recording is in (`Recorded.get`), so every round a
consumer sees is complete.

A round's rows follow its `RoundOutcome` (row 0 at the root, row i + 1 after node i; a chain is
a one-child tree, so its rows are its positions), and one code records chains and trees.

Shapes: B = sequences, M = rows with children in the round, J = rows the verifier scored, V =
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

from cactus_core.engine.decoding.outcome import RoundOutcome
from cactus_core.engine.decoding.trace import PositionTrace
from cactus_core.maths.divergence import kl
from cactus_core.maths.rules import Rule
from cactus_core.maths.tree import unjudged_first_accepts

TopRows = list[tuple[list[int], list[float]]]  # [M] -> (ids, probs)
T = TypeVar("T")
RECORDER_THREAD = "cactus-recorder"  # the worker thread's name prefix (tests look for it)


@dataclass
class RoundRecord:
    """One sequence's recording of one round: KL(pi ‖ q) at the row each emitted token was
    drawn at (0 for a bonus from q, and where KL is not measured) and its trace rows (empty
    without a full trace)."""

    kl_pi: list[float]
    positions: list[PositionTrace] = field(default_factory=list)
    # a(n) of the chain's drafts that the lazy head left without a decision, by position
    accept_probs: dict[int, float] = field(default_factory=dict)


class Recorded(Generic[T]):
    """A recording's result: at hand already, or still being computed by a `Recorder`."""

    def __init__(
        self, value: T | None = None, future: Future[T] | None = None, what: str = ""
    ) -> None:
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
            result: T = self._future.result()
            return result
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
    judge: Rule, out: RoundOutcome, measure_kl: bool, trace: tuple[int, int] | None
) -> list[RoundRecord]:
    """A round's recording per sequence: KL(pi ‖ q) at the row each emitted token was drawn at
    (0 for a lossless judge, a bonus, or when not measured) and, with trace = (top_n, top_m),
    one `PositionTrace` per row of the proposal (`position_traces`).

    KL is taken at the rows the walk decided at; a row with children off the walk (a chain's
    drafts after a rejection, a tree's untried branches) keeps None: nothing was judged there."""
    rows = [v.decided_rows for v in out.verdicts]
    kl_rows = row_kl(judge, out, rows, measure_kl)
    # a token drawn at a row without children is a bonus from q (KL 0); 0 too where KL is
    # not measured (`GenerationStats.kl_measured` says so)
    records = [
        RoundRecord([values.get(r, 0.0) for r in v.path_rows])
        for v, values in zip(out.verdicts, kl_rows, strict=True)
    ]
    if trace is not None:
        q_all = out.full_q()  # with the lazy head, the rows past the decisions are scored here
        traces = position_traces(judge, out, q_all, kl_rows, *trace)
        unjudged = unjudged_accept_probs(judge, out, q_all)
        for record, positions, accept in zip(records, traces, unjudged, strict=True):
            record.positions, record.accept_probs = positions, accept
    return records


def unjudged_accept_probs(
    judge: Rule, out: RoundOutcome, q_all: torch.Tensor
) -> list[dict[int, float]]:
    """Per sequence, a(n) at the first candidates of rows the walk did not decide at
    (`maths.tree.unjudged_first_accepts`: NaN there, also when the lazy head scored q only up
    to the decisions), from every row of q, so that a trace reads the same whichever head
    scored it."""
    return [
        unjudged_first_accepts(judge, v, out.p[b], q_all[b]) for b, v in enumerate(out.verdicts)
    ]


def row_kl(
    judge: Rule, out: RoundOutcome, rows: list[list[int]], measure: bool
) -> list[dict[int, float]]:
    """KL(pi ‖ q) at these rows of each sequence, exact from the full rows: at a row with
    children the rule judged its first child, and the emitted pi there is the chain's pi of
    (p, q) (`maths.tree`). 0 for a lossless judge; {} when not measured."""
    if not measure:
        return [{} for _ in rows]
    if judge.caps.lossless:
        return [dict.fromkeys(r, 0.0) for r in rows]
    seq = torch.tensor([b for b, r in enumerate(rows) for _ in r], dtype=torch.long)
    row = torch.tensor([j for r in rows for j in r], dtype=torch.long)
    seq, row = seq.to(out.p.device), row.to(out.p.device)
    # the rows come from the round's own softmax, checked finite by its host sync: no validation
    p, q = out.p[seq, row], out.q[seq, row]
    values = judge.emitted_kl(p, q).tolist() if len(row) else []
    found: list[dict[int, float]] = []
    for r in rows:
        found.append(dict(zip(r, values[: len(r)], strict=True)))
        values = values[len(r) :]
    return found


def position_traces(
    judge: Rule,
    out: RoundOutcome,
    q_all: torch.Tensor,
    kl_rows: list[dict[int, float]],
    top_n: int,
    top_m: int,
) -> list[list[PositionTrace]]:
    """One `PositionTrace` per row of each sequence's proposal ([B][R + 1]): top-N of q and the
    replay rows of q at every row (q_all [B, J, V], `RoundOutcome.full_q`); at a row with
    children also top-N of p and of the rule's h for its first child (the one the rule judges;
    later ones are judged against residuals), its p_n, q_n, h_n, KL(h ‖ q), KL(pi ‖ q) from
    `kl_rows`, and the replay rows of p, with every child's exact p and q kept so that a
    replay finds them. One batched pass over the judged rows of the whole round, then one
    over every q row."""
    kids = [v.children for v in out.verdicts]
    judged = [(b, r) for b, k in enumerate(kids) for r, c in enumerate(k) if c]
    seq = torch.tensor([b for b, _ in judged], dtype=torch.long, device=out.p.device)
    row = torch.tensor([r for _, r in judged], dtype=torch.long, device=out.p.device)
    first = [out.verdicts[b].tokens[kids[b][r][0]] for b, r in judged]
    n = torch.tensor(first, dtype=torch.long, device=out.p.device)  # [M]
    p, q = out.p[seq, row], q_all[seq, row]  # [M, V]
    h = judge.adjusted_target(q, p, n, validate=False)  # [M, V]
    kl_h = kl(h, q).tolist()
    pn, qn, hn = (x.gather(-1, n[:, None])[:, 0].tolist() for x in (p, q, h))
    wide = max(top_m, top_n)  # the replay rows' top-M, sorted, hold the shown top-N
    rp, th = top_entries(p, wide), top_entries(h, top_n)
    rows_q = q_all.shape[1]
    rq = top_entries(q_all.reshape(-1, q_all.shape[-1]), wide)  # [B * J]
    traces = []
    for b, k in enumerate(kids):
        traces.append(
            [
                PositionTrace(
                    q_ids=rq[b * rows_q + r][0][:top_n],
                    q_probs=rq[b * rows_q + r][1][:top_n],
                    replay_q_ids=rq[b * rows_q + r][0][:top_m],
                    replay_q_probs=rq[b * rows_q + r][1][:top_m],
                )
                for r in range(len(k))
            ]
        )
    for i, (b, r) in enumerate(judged):
        pos, v = traces[b][r], out.verdicts[b]
        pos.p_ids, pos.p_probs = rp[i][0][:top_n], rp[i][1][:top_n]
        pos.h_ids, pos.h_probs = th[i]
        pos.draft_id, pos.p_n, pos.q_n, pos.h_n = first[i], pn[i], qn[i], hn[i]
        pos.kl_h_q, pos.kl_pi_q = kl_h[i], kl_rows[b].get(r)
        pos.replay_p_ids, pos.replay_p_probs = rp[i][0][:top_m], rp[i][1][:top_m]
        ensure_entry(pos.replay_p_ids, pos.replay_p_probs, first[i], pn[i])
        ensure_entry(pos.replay_q_ids, pos.replay_q_probs, first[i], qn[i])
        for c in kids[b][r][1:]:
            ensure_entry(pos.replay_p_ids, pos.replay_p_probs, v.tokens[c], v.p[c])
            ensure_entry(pos.replay_q_ids, pos.replay_q_probs, v.tokens[c], v.q[c])
    return traces


def top_entries(x: torch.Tensor, n: int) -> TopRows:
    """[M, V] -> per row (ids, probs) of the n largest, zeros left out."""
    vals, ids = x.topk(min(n, x.shape[-1]), dim=-1)
    out = []
    for v, i in zip(vals.tolist(), ids.tolist(), strict=True):
        cut = sum(1 for x in v if x > 0)  # topk sorts, so the zeros are at the end
        out.append((i[:cut], v[:cut]))
    return out


def ensure_entry(ids: list[int], probs: list[float], token: int, prob: float) -> None:
    """Make sure the drafted token is among a replay row's kept entries (with its exact prob):
    replay rebuilds the row from these entries and must find p_n and q_n there."""
    if token not in ids:
        ids.append(token)
        probs.append(prob)
