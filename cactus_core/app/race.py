"""The race: speculative decoding and verifier-only sampling of the same prompt, on one time
axis, each token at the moment its decoder wrote it. No Streamlit here; pages/_race.py draws it.

How it is timed (the page says so too): both decoders run in this one thread and take turns,
one round at a time, always advancing the one whose clock is behind. Each decoder's clock
counts only its own work: the time inside its `next()` (its prefill, then each round), never
the other decoder's rounds or the page's drawing. So both see the same machine load, and a
token's time is the decoding time its decoder had spent when it wrote it.

The speculative lane is the decoder as Generate runs it, recording on (trace rows and the exact
emitted KL): its recording thread works beside the decoding, and its clock holds what the
recording costs the decoding (the waits for that thread, `stats.record_s`). A round comes out
of it once its recording is in, one round after its tokens were decided, so its points sit one
round late; the lane's total time is exact. The verifier-only lane records nothing it could
defer (one top-N of q per token).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from cactus_core.app.figures import FATE_COLOURS
from cactus_core.app.metrics import SpeedComparison, speed_comparison

if TYPE_CHECKING:
    from cactus_core.app.decode_view import DecodeRequest
    from cactus_core.engine.decoding.generation import DecodeStream, GenerationOutput
    from cactus_core.engine.decoding.trace import RoundTrace
    from cactus_core.engine.loading.pair import ModelPair

SPECULATIVE = "speculative"
VERIFIER_ONLY = "verifier only"
LANE_COLOURS = {SPECULATIVE: "#008856", VERIFIER_ONLY: "#848482"}  # rule_style's cactus, sps


@dataclass(frozen=True)
class RaceRound:
    """One round of a lane: when it ended on the lane's clock, what it wrote and how."""

    index: int
    t: float  # seconds of the lane's own decoding time when the round's tokens were written
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
        self.clock += time.perf_counter() - start
        self.rounds.append(
            RaceRound(
                len(self.rounds), self.clock, tuple(rnd.emitted_text), rnd.num_accepted, rnd.k
            )
        )


@dataclass
class Race:
    """The two lanes, advanced in turns by `step()` until both are done."""

    speculative: Lane
    verifier_only: Lane
    k: int

    @classmethod
    def start(cls, pair: ModelPair, request: DecodeRequest, rule_label: str) -> Race:
        request.check_length(pair)
        dec = request.decoder(pair)
        kw = request.generate_kwargs()
        spec = dec.rounds(request.prompt, **kw)
        base = request.decoder(pair, record_trace=False, measure_kl=False).rounds(
            request.prompt, **kw, speculative=False
        )
        return cls(
            Lane(SPECULATIVE, f"speculative, {rule_label}", spec),
            Lane(VERIFIER_ONLY, "verifier only", base),
            request.settings.k,
        )

    @property
    def lanes(self) -> tuple[Lane, Lane]:
        return self.speculative, self.verifier_only

    @property
    def done(self) -> bool:
        return self.speculative.done and self.verifier_only.done

    def step(self) -> bool:
        """Advance the lane that is behind (by its own clock); False once both are done."""
        live = [lane for lane in self.lanes if not lane.done]
        if not live:
            return False
        min(live, key=lambda lane: lane.clock).advance()
        return not self.done

    def run(self) -> Race:
        while self.step():
            pass
        return self

    def comparison(self) -> SpeedComparison:
        spec, base = self.speculative.output, self.verifier_only.output
        if spec is None or base is None:
            raise ValueError("the race has not finished")
        return speed_comparison(spec.stats, base.stats, self.k)


def race_figure(lanes: tuple[Lane, ...], height: int = 320) -> go.Figure:
    """Tokens written against each decoder's own decoding time: one step line per lane, a
    marker at every round (speculative rounds coloured by how they ended), so the rounds and
    the gap between the lanes are both in view."""
    fig = go.Figure(
        layout={
            "height": height,
            "margin": {"l": 60, "r": 20, "t": 40, "b": 45},
            "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
            "font": {"size": 13},
            "hoverlabel": {"font": {"size": 14}, "bgcolor": "#ffffff"},
            "xaxis": {"title": {"text": "decoding time (s, each decoder's own clock)"}},
            "yaxis": {"title": {"text": "tokens written"}, "rangemode": "tozero"},
        }
    )
    for lane in lanes:
        xs, ys, hover, colours = [0.0], [0], ["start"], [LANE_COLOURS[lane.name]]
        total = 0
        for r in lane.rounds:
            total += len(r.tokens)
            xs.append(r.t)
            ys.append(total)
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
            line={"color": LANE_COLOURS[lane.name], "shape": "hv", "width": 2.5},
            marker={"color": colours, "size": 7 if lane.name == SPECULATIVE else 4},
            customdata=hover,
            hovertemplate="%{customdata}<br>%{x:.2f} s, %{y} tokens<extra></extra>",
        )
    return fig
