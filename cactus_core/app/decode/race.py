"""The race: speculative decoding and verifier-only sampling of the same prompt, on one time
axis, each token at the moment its decoder wrote it. No Streamlit here; pages/decode/race_panel.py
draws it.

How it is timed (the page says so too; the definition is `experiments.estimates.speedup`'s):

- Before either clock starts, each decoder runs once on the prompt, untimed: the first calls'
  one-time work (kernels chosen for these shapes, caches and packed weights made on first use)
  stays out of the race. `Race.events` records it, in order, for the page and the tests.
- Both decoders then run in this one thread and take turns, one round at a time, always
  advancing the one that has written fewer tokens: the two stay at the same point of their
  texts (the same context length, so rounds of the same cost) at the same moment, and a swing
  in the machine's load lands on both. Each clock counts only its own decoder's work (the
  time inside its `next()`: its prefill, then each round), never the other's rounds or the
  page's drawing.
- Neither lane records the lab's trace rows or the exact emitted KL: the race times decoding
  as a server runs it (Generate's run holds the trace).
- The speedup compares equal work (`EqualWork`): the same number of tokens written by both
  lanes after their first round (which holds the prompt's prefill), up to the end of the last
  speculative round that the verifier-only lane also got past. It is the verifier-only lane's
  time for those tokens ÷ the speculative lane's. The chart draws both lanes from the end of
  their first round and marks those tokens with a line, so the headline is the ratio the chart
  shows. Tokens one lane wrote after the other had stopped (a longer answer, run alone on the
  clock and under whatever load came then) are outside the comparison.
- Its spread is taken over stretches of wall-clock time in which both lanes ran rounds inside
  that window (`speedup.spread`): a stretch pairs the rounds the two decoders ran under the
  same load. The stated spread holds the headline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from cactus_core.app.shared.figures import FATE_COLOURS
from cactus_core.app.shared.metrics import SpeedComparison, speed_comparison
from cactus_core.experiments.estimates.speedup import spread

if TYPE_CHECKING:
    from cactus_core.app.shared.request import DecodeRequest
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder
    from cactus_core.engine.decoding.generation import DecodeStream, GenerationOutput
    from cactus_core.engine.decoding.trace import RoundTrace
    from cactus_core.engine.loading.pair import ModelPair

SPECULATIVE = "speculative"
VERIFIER_ONLY = "verifier only"
LANE_COLOURS = {SPECULATIVE: "#008856", VERIFIER_ONLY: "#848482"}  # rule_style's cactus, sps
WARM_UP = "warm-up (untimed)"
CLOCKS_START = "clocks start"
EQUAL_WORK = "equal work"  # the figure's trace of the tokens both lanes are judged on


@dataclass(frozen=True)
class RaceEvent:
    """One thing the race did, in order: a lane's warm-up, the clocks' start, a lane's end."""

    what: str
    lane: str = ""  # the lane's name; "" for both
    seconds: float = 0.0  # how long it took (wall time)

    def text(self) -> str:
        who = f"{self.lane}: " if self.lane else ""
        took = f" ({self.seconds:.2f} s)" if self.seconds else ""
        return f"{who}{self.what}{took}"


@dataclass(frozen=True)
class RaceRound:
    """One round of a lane: when it ended on the lane's clock, what it wrote and how."""

    index: int
    t: float  # seconds of the lane's own decoding time when the round's tokens were written
    seconds: float  # this round's own time (the first round's holds the prefill too)
    ended: float  # when it ended on the wall clock (perf_counter), shared by both lanes
    tokens: tuple[str, ...]
    accepted: int  # drafts accepted (0 for verifier-only steps)
    drafted: int  # k (0 for verifier-only steps)

    @property
    def ending(self) -> str:
        if not self.drafted:
            return "sampled"
        return "bonus" if self.accepted == self.drafted else "recovered"


@dataclass
class Lane:
    """One decoder's progress in the race."""

    name: str
    label: str  # what the chart's legend says
    stream: DecodeStream
    rounds: list[RaceRound] = field(default_factory=list)
    clock: float = 0.0  # this lane's own decoding time so far, s
    done: bool = False
    _events: Iterator[RoundTrace] | None = None

    @property
    def tokens(self) -> int:
        return sum(len(r.tokens) for r in self.rounds)

    @property
    def text(self) -> str:
        return "".join(t for r in self.rounds for t in r.tokens)

    @property
    def output(self) -> GenerationOutput | None:
        return self.stream.output

    def advance(self) -> None:
        """Decode one more round (the first call also prefills), timing only the decoder."""
        if self.done:
            return
        if self._events is None:
            self._events = iter(self.stream)
        start = time.perf_counter()
        try:
            rnd = next(self._events)
        except StopIteration:
            self.clock += time.perf_counter() - start
            self.done = True
            return
        ended = time.perf_counter()
        took = ended - start
        self.clock += took
        self.rounds.append(
            RaceRound(
                len(self.rounds),
                self.clock,
                took,
                ended,
                tuple(rnd.emitted_text),
                rnd.num_accepted,
                rnd.k,
            )
        )

    def timed_rounds(self) -> list[tuple[float, float]]:
        """(wall-clock end, seconds) of every round after the first, whose time holds the
        prefill."""
        return [(r.ended, r.seconds) for r in self.rounds[1:]]

    def progress(self) -> tuple[list[float], list[int]]:
        """(times, tokens) after the first round, which holds the prefill: each round's end on
        this lane's clock less the first round's, and the tokens written since it."""
        if not self.rounds:
            return [], []
        first = self.rounds[0]
        times, tokens, total = [0.0], [0], 0
        for r in self.rounds[1:]:
            total += len(r.tokens)
            times.append(r.t - first.t)
            tokens.append(total)
        return times, tokens


@dataclass(frozen=True)
class EqualWork:
    """Both lanes over the same tokens: the `tokens` written after the first round by the
    speculative lane's rounds 2 … `rounds` + 1, and by as many verifier-only steps."""

    tokens: int
    rounds: int  # speculative rounds (after the first) that wrote them
    speculative_s: float  # each lane's own decoding time for them
    verifier_only_s: float

    @property
    def speedup(self) -> float:
        return self.verifier_only_s / self.speculative_s


def equal_work(speculative: Lane, verifier_only: Lane) -> EqualWork | None:
    """The longest stretch both lanes wrote, ending on a speculative round (a round's tokens
    are written at once); None when there is none (a lane with no round after its first)."""
    spec_t, spec_n = speculative.progress()
    base_t, base_n = verifier_only.progress()
    if len(spec_t) < 2 or len(base_t) < 2:
        return None
    last = max(i for i, n in enumerate(spec_n) if n <= base_n[-1])
    if last == 0:
        return None
    n = spec_n[last]
    at = base_n.index(n)  # a verifier-only step writes one token, so every count is there
    return EqualWork(n, last, spec_t[last], base_t[at])


def warm_up(dec: SpeculativeDecoder, request: DecodeRequest, speculative: bool) -> float:
    """Run the decoder once on the request's prompt, untimed by the race: two rounds at the
    prompt's own length reach every first call a timed run makes. Returns its seconds."""
    k = request.settings.k if speculative else 0
    kw = {**request.generate_kwargs(), "max_new_tokens": min(request.max_new_tokens, 2 * k + 2)}
    start = time.perf_counter()
    run = dec.generate if speculative else dec.generate_autoregressive
    run(request.prompt, **kw)
    return time.perf_counter() - start


@dataclass
class Race:
    """The two lanes, advanced in turns by `step()` until both are done."""

    speculative: Lane
    verifier_only: Lane
    k: int
    events: list[RaceEvent] = field(default_factory=list)

    @classmethod
    def start(cls, pair: ModelPair, request: DecodeRequest, rule_label: str) -> Race:
        """Both decoders built, warmed up on the prompt, and their streams opened: the clocks
        start at the first `step()`."""
        request.check_length(pair)
        kw = request.generate_kwargs()
        decoders = {
            name: request.decoder(pair, record_trace=False, measure_kl=False)
            for name in (SPECULATIVE, VERIFIER_ONLY)
        }
        events = [
            RaceEvent(WARM_UP, name, warm_up(dec, request, name == SPECULATIVE))
            for name, dec in decoders.items()
        ]
        events.append(RaceEvent(CLOCKS_START))
        spec = decoders[SPECULATIVE].rounds(request.prompt, **kw)
        base = decoders[VERIFIER_ONLY].rounds(request.prompt, **kw, speculative=False)
        return cls(
            Lane(SPECULATIVE, f"speculative, {rule_label}", spec),
            Lane(VERIFIER_ONLY, "verifier only", base),
            request.settings.k,
            events,
        )

    @property
    def lanes(self) -> tuple[Lane, Lane]:
        return self.speculative, self.verifier_only

    @property
    def done(self) -> bool:
        return self.speculative.done and self.verifier_only.done

    def step(self) -> bool:
        """Advance the lane that has written fewer tokens (the speculative one on a tie); False
        once both are done. Pacing by tokens keeps the two at the same context length at the
        same moment, so a stretch of wall-clock time pairs rounds of the same cost and load."""
        live = [lane for lane in self.lanes if not lane.done]
        if not live:
            return False
        lane = min(live, key=lambda x: x.tokens)
        lane.advance()
        if lane.done:
            self.events.append(RaceEvent("finished", lane.name, lane.clock))
        return not self.done

    def run(self) -> Race:
        while self.step():
            pass
        return self

    def equal_work(self) -> EqualWork | None:
        return equal_work(self.speculative, self.verifier_only)

    def comparison(self) -> SpeedComparison:
        """The measured speedup over equal work, with its spread (the module docstring); a
        race too short to have any compares the two runs whole."""
        spec, base = self.speculative.output, self.verifier_only.output
        if spec is None or base is None:
            raise ValueError("the race has not finished")
        out = speed_comparison(spec.stats, base.stats, self.k)
        rounds, steps = self.speculative.timed_rounds(), self.verifier_only.timed_rounds()
        per_round = spec.stats.new_tokens / max(spec.stats.rounds, 1)
        work = self.equal_work()
        if work is not None:
            out.speculative_tokens_per_s = work.tokens / work.speculative_s
            out.verifier_only_tokens_per_s = work.tokens / work.verifier_only_s
            out.tokens, out.rounds = work.tokens, work.rounds
            rounds, steps = rounds[: work.rounds], steps[: work.tokens]
            per_round = work.tokens / work.rounds
        spread_ = spread(per_round, rounds, steps)
        # the stated spread holds the verdict it is stated with
        out.spread = spread_.including(out.speedup) if spread_ is not None else None
        return out


def race_figure(
    lanes: tuple[Lane, ...], work: EqualWork | None = None, height: int = 320
) -> go.Figure:
    """Tokens written against each decoder's own decoding time, both from the end of their
    first round (which holds the prefill): one step line per lane, a marker at every round
    (speculative rounds coloured by how they ended), and, once the race is over, the equal
    work it is judged on as a line between the two lanes' times for the same tokens."""
    fig = go.Figure(
        layout={
            "height": height,
            "margin": {"l": 60, "r": 20, "t": 40, "b": 45},
            "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
            "font": {"size": 13},
            "hoverlabel": {"font": {"size": 14}, "bgcolor": "#ffffff"},
            "xaxis": {"title": {"text": "decoding time (s, each decoder's own, from its prefill)"}},
            "yaxis": {"title": {"text": "tokens written"}, "rangemode": "tozero"},
        }
    )
    for lane in lanes:
        xs, ys = lane.progress()
        hover, colours = ["first round (with the prefill)"], [LANE_COLOURS[lane.name]]
        for r in lane.rounds[1:]:
            text = "".join(r.tokens).replace("<", "&lt;")
            how = (
                f"{r.accepted}/{r.drafted} drafts accepted, {r.ending}"
                if r.drafted
                else "one verifier step"
            )
            hover.append(f"round {r.index + 1}: +{len(r.tokens)} ({how})<br>“{text}”")
            colours.append(FATE_COLOURS.get(r.ending, LANE_COLOURS[lane.name]))
        fig.add_scatter(
            x=xs,
            y=ys,
            mode="lines+markers",
            name=lane.label,
            meta=lane.name,
            line={"color": LANE_COLOURS[lane.name], "shape": "hv", "width": 2.5},
            marker={"color": colours, "size": 7 if lane.name == SPECULATIVE else 4},
            customdata=hover,
            hovertemplate="%{customdata}<br>%{x:.2f} s, %{y} tokens<extra></extra>",
        )
    if work is not None:
        fig.add_scatter(
            x=[work.speculative_s, work.verifier_only_s],
            y=[work.tokens, work.tokens],
            mode="lines+markers",
            name=f"the same {work.tokens} tokens: {work.speedup:.2f}×",
            meta=EQUAL_WORK,
            line={"color": "#333333", "dash": "dot", "width": 1.5},
            marker={"color": "#333333", "size": 9, "symbol": "line-ns-open"},
            hovertemplate=(
                f"{work.tokens} tokens: verifier-only {work.verifier_only_s:.2f} s ÷ speculative "
                f"{work.speculative_s:.2f} s = {work.speedup:.2f}×<extra></extra>"
            ),
        )
    return fig
