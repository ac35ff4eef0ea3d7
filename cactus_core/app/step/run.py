"""Step through: one real speculative round at a time, kept for the page to take apart.

A `StepRun` decodes the request lazily, round by round, from the decoder's own stream with
a fixed seed, and keeps every round it has decoded: going back, or opening the same link
again, never draws new randomness (the decoder's coins come from a generator seeded once per
run, in a fixed order per round). Besides the trace, it keeps what the trace's top-N lists
cannot give exactly: p, q and h at a handful of tokens of every decided position, and the
residual at the rejected one. It reads them from the decoder's `probe`, which sees the full
rows of the decided positions, and drops the rows as soon as the round is taken apart.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from cactus_core.app.shared.request import DecodeRequest
from cactus_core.engine.loading.pair import token_display
from cactus_core.maths.rules import Rule
from cactus_core.maths.tree import row_residual

if TYPE_CHECKING:
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder
    from cactus_core.engine.decoding.generation import DecodeStream, GenerationOutput
    from cactus_core.engine.decoding.trace import RoundTrace
    from cactus_core.engine.loading.pair import ModelPair

SHOWN = 6  # tokens taken from the top of each of p, q and h for a position's bars


@dataclass(frozen=True)
class PositionRows:
    """Exact values at the tokens a decided position's bars show: the drafted token first,
    then the top of q, p and h (each distinct token once)."""

    ids: list[int]
    p: list[float]
    q: list[float]
    h: list[float]


@dataclass(frozen=True)
class Residual:
    """The rejected position's residual r_n, normalised: its top entries and the recovered
    token's own probability under it."""

    ids: list[int]
    probs: list[float]
    recovered_prob: float


@dataclass
class RoundRows:
    """What a round's steps show beyond its trace: PositionRows at each row where the rule
    decided (by row), and the residual if the round ended in a rejection."""

    positions: dict[int, PositionRows] = field(default_factory=dict)
    residual: Residual | None = None


def _top_ids(x: torch.Tensor, count: int) -> list[int]:
    vals, ids = x.topk(min(count, x.shape[-1]))
    return [i for v, i in zip(vals.tolist(), ids.tolist(), strict=True) if v > 0]


def _unique(ids: list[int]) -> list[int]:
    return list(dict.fromkeys(ids))


def position_rows(judge: Rule, p: torch.Tensor, q: torch.Tensor, n: int) -> PositionRows:
    """p, q [V] at one decided position with drafted n -> the bars' exact values."""
    h = judge.adjusted_target(q, p, torch.tensor(n), validate=False)
    ids = _unique([n, *_top_ids(q, SHOWN), *_top_ids(p, SHOWN), *_top_ids(h, SHOWN)])
    index = torch.tensor(ids)
    return PositionRows(ids, p[index].tolist(), q[index].tolist(), h[index].tolist())


def residual_rows(
    judge: Rule, p: torch.Tensor, q: torch.Tensor, rejected: list[int], token: int
) -> Residual:
    """The residual the recovered token was drawn from, at the row whose candidates
    `rejected` (token ids, in the order tried) were all rejected."""
    r = row_residual(judge, p, q, rejected)
    ids = _unique([*_top_ids(r, 2 * SHOWN), token])
    return Residual(ids, r[torch.tensor(ids)].tolist(), float(r[token]))


@dataclass
class StepRun:
    """One request decoded round by round on demand. `rounds[i]` and `rows[i]` describe
    round i; `done` once the decoder has stopped (EOS, the token budget or the context)."""

    request: DecodeRequest
    decoder: SpeculativeDecoder
    stream: DecodeStream
    rounds: list[RoundTrace] = field(default_factory=list)
    rows: list[RoundRows] = field(default_factory=list)
    output: GenerationOutput | None = None
    _events: Iterator[RoundTrace] | None = None
    # round index -> its decided rows (p, q) [d, V] from the probe, until the round comes out
    _decided: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    _texts: dict[int, str] = field(default_factory=dict)
    _ended: bool = False
    _closing: bool = False  # `close` was called: no more rounds
    # Round index -> its steps (step_view.round_steps), built once: "Next step" only reads.
    step_cache: dict[int, list[Any]] = field(default_factory=dict)
    # Fast clicks overlap script runs on Streamlit's threads; one decodes at a time, and the
    # other then finds the rounds it wanted already there.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def start(cls, pair: ModelPair, request: DecodeRequest) -> StepRun:
        """Check the prompt and open the stream; nothing is decoded yet."""
        from cactus_core.engine.decoding.decoder import SpeculativeDecoder

        request.check_length(pair)
        # The probe writes into this dict, which the run holds too: the decoder never
        # references the run, so an abandoned run is freed at once by reference counting
        # (with its KV caches and its recording thread), not at some later cyclic collection.
        decided: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

        def probe(row: int, index: int, p: torch.Tensor, q: torch.Tensor) -> None:
            # The full rows exist only during the round; keep the decided ones until the
            # round comes out of the stream and names its drafts (a round comes out after
            # the next one ran, once its recording is in: key them by round).
            decided[index] = (p.detach().clone(), q.detach().clone())

        decoder = SpeculativeDecoder(
            pair, request.rule, probe=probe, **request.settings.decoder_kwargs()
        )
        stream = decoder.rounds(request.prompt, **request.generate_kwargs())
        return cls(request=request, decoder=decoder, stream=stream, _decided=decided)

    @property
    def judge(self) -> Rule:
        """The rule that decided (lossless at T = 0, whatever was picked)."""
        return self.decoder.judge

    @property
    def done(self) -> bool:
        return self._ended

    def text(self, token_id: int) -> str:
        """A token as the lab shows it (pairing.token_display; cached: every step's labels ask
        again)."""
        token_id = int(token_id)
        if token_id not in self._texts:
            tok, eos = self.decoder.pair.tokenizer, self.decoder.eos_ids
            self._texts[token_id] = token_display(tok, token_id, eos)
        return self._texts[token_id]

    @property
    def closed(self) -> bool:
        """Closed before its end (`close`): it decodes no more; a page starts it afresh (the
        same seed decodes the same rounds)."""
        return self._closing

    def ensure(self, index: int) -> bool:
        """Decode until round `index` exists (or the run ends); whether it exists."""
        with self._lock:
            if self._events is None:
                self._events = iter(self.stream)
            while len(self.rounds) <= index and not self.done and not self._closing:
                try:
                    rnd = next(self._events)
                except StopIteration:
                    self.output = self.stream.output
                    self._ended = True
                    break
                except Exception:
                    # Only the decoder's own failure ends the run (a generator an exception
                    # left is closed); what was decoded stays.
                    if inspect.getgeneratorstate(self._events) == inspect.GEN_CLOSED:
                        self._ended = True
                    raise
                self._keep(rnd)
            if self._closing:
                self._close_stream()
            elif not self.done:
                # A person reads this round now: no recording thread waits meanwhile.
                self.stream.pause()
            return len(self.rounds) > index

    def close(self) -> None:
        """Stop decoding (the page replaced the run, or its session ended): the stream ends,
        and with it the recording thread and the KV caches; the rounds decoded so far stay
        readable. Never waits for a round being decoded: that thread closes the stream after
        its round instead."""
        self._closing = True
        if self._lock.acquire(blocking=False):
            try:
                self._close_stream()
            finally:
                self._lock.release()

    def _close_stream(self) -> None:
        if self._events is not None:
            self._events.close()
        self.stream.close()

    def finish(self) -> None:
        """Decode the rest of the request."""
        while not self.done and not self._closing:
            self.ensure(len(self.rounds))

    def _keep(self, rnd: RoundTrace) -> None:
        rows = RoundRows()
        decided = self._decided.pop(rnd.index, None)
        v = rnd.verdict
        if decided is not None:
            p, q = decided  # [d, V] at the verdict's decided rows, root first
            kids = v.children
            for j, row in enumerate(v.decided_rows):
                first = v.tokens[kids[row][0]]
                rows.positions[row] = position_rows(self.judge, p[j], q[j], first)
            # A round-level rule's residual is its own, for the whole draft, not this one's.
            if v.last == "recovered" and not self.judge.caps.round_level:
                row = v.path_rows[-1]
                rejected = [v.tokens[i] for i in kids[row] if v.fates[i] == "rejected"]
                j = len(v.decided_rows) - 1
                rows.residual = residual_rows(self.judge, p[j], q[j], rejected, rnd.next_id)
        self.rounds.append(rnd)
        self.rows.append(rows)


class SessionRun:
    """A session's run, held weakly (its session state holds it, and the page closes a run it
    replaces): `close` closes it if it is still there, for the page's end-of-session hook."""

    def __init__(self) -> None:
        self._run: weakref.ref[StepRun] | None = None

    def hold(self, run: StepRun) -> None:
        self._run = weakref.ref(run)

    def close(self) -> None:
        run = self._run() if self._run is not None else None
        if run is not None:
            run.close()

    @property
    def open(self) -> bool:
        run = self._run() if self._run is not None else None
        return run is not None and not run.closed


class SessionRuns:
    """Every session's `SessionRun` by session id, for a janitor: Streamlit shuts a
    disconnected session down (and runs its end hook) only when its session storage is next
    touched, that is when the next visitor connects, so a closed tab kept its decoder until
    then. `close_gone` closes the runs of the sessions that are gone now."""

    def __init__(self) -> None:
        self._runs: dict[str, SessionRun] = {}
        self._lock = threading.Lock()

    def add(self, session_id: str, held: SessionRun) -> None:
        with self._lock:
            self._runs[session_id] = held

    def close_gone(self, is_active: Callable[[str], bool]) -> int:
        """Close the open runs of sessions `is_active` says are gone, forget every gone
        session; the number of runs closed."""
        with self._lock:
            gone = {sid: held for sid, held in self._runs.items() if not is_active(sid)}
            for sid in gone:
                del self._runs[sid]
        closed = 0
        for held in gone.values():
            closed += held.open
            held.close()
        return closed


def restart_reason(old: DecodeRequest, new: DecodeRequest) -> str:
    """Why a new request starts Step through again at round 1, in words: what changed other
    than the rule (another seed, prompt, sampling or pair is another text)."""
    what = ", ".join(new.changes_since(old, rule=False)) or "the settings"
    return f"New text ({what} changed): Step through starts again at round 1."
