"""What a generation hands back: per-sequence counts (`GenerationStats`), the output
(`GenerationOutput`), pooled metrics over several outputs (`summarize`) and the round iterator
of a streaming generation (`DecodeStream`). The metrics follow DESIGN.md's definitions."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from cactus_core.engine.decoding.trace import RoundTrace, Trace


@dataclass
class GenerationStats:
    """Counts for one sequence. In a batch the time fields are the batch's (one clock)."""

    new_tokens: int = 0
    rounds: int = 0
    verifier_calls: int = 0  # decoding forwards of the verifier (the prefill is not counted)
    draft_calls: int = 0  # decoding forwards of the draft (k per speculative round)
    drafted_tokens: int = 0
    decided_tokens: int = 0  # drafted tokens that got an accept/reject decision
    accepted_tokens: int = 0
    rejected_q_zero: int = 0  # rejected drafts the verifier gave q_n = 0 (outside its support)
    # rounds by m, their accepted drafts: index 0 .. k (speculative rounds only)
    accepted_histogram: list[int] = field(default_factory=list)
    # per draft position j = 1, 2, … (index j - 1): drafts that reached a decision there (every
    # earlier draft of the round accepted), and those accepted; see `PositionCounts`
    position_reached: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    kl_sum: float = 0.0  # sum of KL(pi ‖ q) over the positions whose token was emitted
    nll_sum: float = 0.0  # the verifier's NLL of the emitted tokens (T = 1, nats)
    kl_measured: bool = True
    stop_reason: str = ""  # "eos", "max_new_tokens" or "context"
    batch_size: int = 1
    batch_new_tokens: int = 0
    wall_s: float = 0.0  # prefill + decoding (time spent in on_round is left out)
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    # Recording (the exact emitted KL, the trace rows): record_s is what it cost the decoding
    # thread (waits for the recording thread, the parts done inline); record_work_s is its own
    # work, most of it on the recording thread beside the decoding.
    record_s: float = 0.0
    record_work_s: float = 0.0

    @property
    def tokens_per_call(self) -> float:
        """Emitted tokens ÷ verifier forwards (vLLM's mean acceptance length)."""
        return self.new_tokens / self.verifier_calls if self.verifier_calls else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted ÷ decided drafted tokens; None when nothing was drafted."""
        return self.accepted_tokens / self.decided_tokens if self.decided_tokens else None

    @property
    def rejected_tokens(self) -> int:
        return self.decided_tokens - self.accepted_tokens

    @property
    def mean_emitted_kl(self) -> float | None:
        """Mean KL(pi ‖ q) per emitted token (bonus and verifier-only tokens count 0); None
        when the decoder ran with measure_kl=False."""
        if not self.kl_measured:
            return None
        return self.kl_sum / self.new_tokens if self.new_tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        """New tokens ÷ wall time (prefill included); in a batch, the batch's throughput."""
        return self.batch_new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def positions(self) -> PositionCounts:
        return PositionCounts(
            tuple(self.position_reached), tuple(self.position_accepted), self.spec_rounds
        )

    @property
    def spec_rounds(self) -> int:
        """Speculative rounds (verifier-only steps left out)."""
        return sum(self.accepted_histogram)

    def to_dict(self) -> dict[str, Any]:
        derived = ("tokens_per_call", "acceptance_rate", "mean_emitted_kl", "tokens_per_s")
        return {
            **asdict(self),
            **{name: getattr(self, name) for name in derived},
            "acceptance_by_position": self.positions.to_dict(),
        }


@dataclass(frozen=True)
class PositionCounts:
    """Acceptance at each draft position, in vLLM's definitions (its counters
    `num_accepted_tokens_per_pos` and `num_drafts`; DESIGN.md "Per-position acceptance"):

    - reached[j]: drafts at position j + 1 that got a decision (the round's drafts 1..j were
      accepted); accepted[j]: those accepted. vLLM's per-position counter is accepted[j].
    - conditional rate at position j + 1: accepted[j] ÷ reached[j], the draft's quality there;
    - unconditional rate (vLLM's "acceptance per position"): accepted[j] ÷ rounds;
    - mean acceptance length (vLLM's): 1 + the sum of the unconditional rates, which is the
      tokens per verifier call before EOS or the token budget cut a round.
    """

    reached: tuple[int, ...]
    accepted: tuple[int, ...]
    rounds: int

    @classmethod
    def pooled(cls, counts: list[PositionCounts]) -> PositionCounts:
        width = max((len(c.reached) for c in counts), default=0)

        def total(name: str) -> tuple[int, ...]:
            out = [0] * width
            for c in counts:
                for j, n in enumerate(getattr(c, name)):
                    out[j] += n
            return tuple(out)

        return cls(total("reached"), total("accepted"), sum(c.rounds for c in counts))

    def conditional(self) -> list[float | None]:
        return [a / r if r else None for a, r in zip(self.accepted, self.reached, strict=True)]

    def unconditional(self) -> list[float | None]:
        return [a / self.rounds if self.rounds else None for a in self.accepted]

    @property
    def mean_acceptance_length(self) -> float | None:
        if not self.rounds:
            return None
        return 1.0 + sum(self.accepted) / self.rounds

    def intervals(self, z: float = 1.96) -> list[tuple[float, float] | None]:
        """Wilson 95% intervals of the conditional rates (None where no draft got there)."""
        out: list[tuple[float, float] | None] = []
        for a, n in zip(self.accepted, self.reached, strict=True):
            if not n:
                out.append(None)
                continue
            p = a / n
            centre = (p + z * z / (2 * n)) / (1 + z * z / n)
            half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
            out.append((max(0.0, centre - half), min(1.0, centre + half)))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "reached": list(self.reached),
            "accepted": list(self.accepted),
            "rounds": self.rounds,
            "conditional": self.conditional(),
            "unconditional": self.unconditional(),
            "mean_acceptance_length": self.mean_acceptance_length,
        }


def acceptance_by_position(histogram: list[int]) -> list[float | None]:
    """Acceptance at each draft position j = 1 .. k, given the round got that far: rounds
    that accepted at least j drafts ÷ rounds that accepted at least j - 1 (None where no round
    got there). histogram[m]: rounds that accepted m drafts (`accepted_histogram`)."""
    at_least = [sum(histogram[m:]) for m in range(len(histogram))]  # rounds with >= m accepted
    return [
        at_least[j] / at_least[j - 1] if at_least[j - 1] else None for j in range(1, len(histogram))
    ]


@dataclass
class GenerationOutput:
    prompt: str
    prompt_ids: list[int]
    token_ids: list[int]  # the new tokens only
    text: str  # the new tokens decoded, special tokens left out
    stats: GenerationStats
    trace: Trace


def summarize(outputs: list[GenerationOutput]) -> dict[str, Any]:
    """Pooled metrics over several outputs (token-weighted; times add up unless the outputs
    come from one batch, whose single clock is counted once)."""
    stats = [o.stats for o in outputs]
    tokens = sum(s.new_tokens for s in stats)
    decided = sum(s.decided_tokens for s in stats)
    rejected = sum(s.rejected_tokens for s in stats)
    calls = sum(s.verifier_calls for s in stats)
    # Outputs of one batch share one clock: count each batch's time once.
    clocks: dict[Any, tuple[float, float]] = {}
    for i, o in enumerate(outputs):
        key = o.trace.meta.get("batch", {}).get("id", ("single", i))
        clocks[key] = (o.stats.wall_s, o.stats.record_s)
    wall = sum(w for w, _ in clocks.values())
    return {
        "sequences": len(outputs),
        "new_tokens": tokens,
        "verifier_calls": calls,
        "draft_calls": sum(s.draft_calls for s in stats),
        "tokens_per_call": tokens / calls if calls else 0.0,
        "acceptance_rate": sum(s.accepted_tokens for s in stats) / decided if decided else None,
        "mean_emitted_kl": (
            (sum(s.kl_sum for s in stats) / tokens if tokens else 0.0)
            if all(s.kl_measured for s in stats)
            else None
        ),
        "rejected_q_zero_share": (
            sum(s.rejected_q_zero for s in stats) / rejected if rejected else None
        ),
        "wall_s": wall,
        "tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "record_s": sum(r for _, r in clocks.values()),
        "acceptance_by_position": PositionCounts.pooled([s.positions for s in stats]).to_dict(),
    }


class DecodeStream:
    """Iterator over the rounds of one generation (`SpeculativeDecoder.rounds`); once it is
    exhausted, `.output` holds the GenerationOutput. Every round it yields is complete (its
    trace rows and emitted KL recorded). `close()` stops the decode midway and ends its
    recording thread; garbage collection of an abandoned stream does the same. `pause()` ends
    the recording thread while the consumer holds the stream between rounds."""

    def __init__(
        self,
        events: Generator[tuple[int, RoundTrace], None, Any],
        pause: Callable[[], None] | None = None,  # the decode's Recorder.pause
    ) -> None:
        self._events = events
        self._pause = pause
        self.output: GenerationOutput | None = None

    def __iter__(self) -> Iterator[RoundTrace]:
        try:
            while True:
                _, rnd = next(self._events)
                yield rnd
        except StopIteration as stop:
            self.output = stop.value[0]

    def pause(self) -> None:
        """The consumer will not ask for a round for a while: the recordings already asked for
        finish and the recording thread ends; the next round starts it again. Call it between
        rounds, never while a round is being decoded."""
        if self._pause is not None:
            self._pause()

    def close(self) -> None:
        """Stop decoding (a no-op once the stream is exhausted)."""
        self._events.close()
