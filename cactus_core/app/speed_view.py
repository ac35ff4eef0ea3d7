"""Why the modelled and the measured speedup differ: the parts of a round's cost.

The model charges a round 1 + k·c verifier steps and gives tokens per call ÷ (1 + k·c). A
measured round costs, in verifier-only tokens (v₁ = one verifier-only step, its own overhead
included): the verify pass over k + 1 tokens (more than one step's worth on a CPU, where a
forward's cost grows with its width), k draft steps, and the rest of the loop (coins, the host
sync, Python). The measured speedup is tokens per call ÷ that sum, so each part's excess over
the model's is what the model leaves out. The speculative run records (trace rows and exact
emitted KL) as Generate does, on a worker thread beside the decoding: what that costs the
decoding (its waits, `record_s`) is given apart and left out of the rest of the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from cactus_core.app.metrics import SpeedComparison, modelled_speedup


@dataclass(frozen=True)
class CostParts:
    """A speculative round's cost in verifier-only steps, measured and as the model has it."""

    tokens_per_call: float
    k: int
    c: float  # the c the model is given
    verify: float  # the verify pass ÷ one verifier-only step
    draft: float  # k draft steps ÷ one verifier-only step
    other: float  # the rest of the round ÷ one verifier-only step

    @property
    def measured_round(self) -> float:
        return self.verify + self.draft + self.other

    @property
    def modelled_round(self) -> float:
        return 1.0 + self.k * self.c

    @property
    def implied_speedup(self) -> float:
        """tokens per call ÷ the measured round: what the parts give."""
        return self.tokens_per_call / self.measured_round if self.measured_round > 0 else 0.0

    @property
    def modelled_speedup(self) -> float:
        return modelled_speedup(self.tokens_per_call, self.k, self.c)


def cost_parts(cmp: SpeedComparison, c: float) -> CostParts | None:
    """The comparison's round cost in parts; None without both runs' stats."""
    s, b = cmp.spec_stats, cmp.base_stats
    if s is None or b is None or not (s.rounds and b.new_tokens and b.wall_s > 0):
        return None
    step = (b.wall_s - b.prefill_s) / b.new_tokens  # one verifier-only token, all included
    verify = s.verify_s / s.rounds
    draft = s.draft_s / s.rounds
    other = max(0.0, s.wall_s - s.prefill_s - s.draft_s - s.verify_s - s.record_s) / s.rounds
    return CostParts(s.tokens_per_call, cmp.k, c, verify / step, draft / step, other / step)


def explanation(parts: CostParts, measured: float) -> str:
    """The gap between the modelled and the measured speedup, part by part, in words."""
    return (
        f"The model charges a round 1 + k·c = 1 + {parts.k}·{parts.c:.3g} = "
        f"{parts.modelled_round:.2f} verifier steps, so {parts.tokens_per_call:.2f} tokens per "
        f"call give {parts.modelled_speedup:.2f}×. Measured here, a round cost "
        f"{parts.measured_round:.2f} verifier-only steps: the verify pass over {parts.k + 1} "
        f"tokens {parts.verify:.2f} (the model: 1), {parts.k} draft steps {parts.draft:.2f} "
        f"(the model: {parts.k * parts.c:.2f}), and the rest of the loop {parts.other:.2f} "
        f"(the model: 0). {parts.tokens_per_call:.2f} ÷ {parts.measured_round:.2f} = "
        f"{parts.implied_speedup:.2f}×, against {measured:.2f}× measured end to end (prefill "
        "and timing noise make up the rest)."
    )


def parts_chart(parts: CostParts) -> go.Figure:
    """Two stacked bars: a round's cost as the model has it and as measured."""
    fig = go.Figure(
        layout={
            "barmode": "stack",
            "height": 230,
            "margin": {"l": 40, "r": 10, "t": 30, "b": 30},
            "title": {"text": "a round's cost, in verifier-only steps", "font": {"size": 12}},
            "legend": {"orientation": "h", "y": -0.25},
        }
    )
    bars = ("modelled", "measured")
    for name, vals, colour in (
        ("verify", (1.0, parts.verify), "#1f77b4"),
        ("draft", (parts.k * parts.c, parts.draft), "#ff7f0e"),
        ("rest of the loop", (0.0, parts.other), "#7f7f7f"),
    ):
        fig.add_bar(
            y=bars,
            x=list(vals),
            orientation="h",
            name=name,
            marker_color=colour,
            hovertemplate=f"{name}: %{{x:.2f}} steps<extra></extra>",
        )
    return fig


@dataclass(frozen=True)
class RecordShare:
    """The recording's cost in a run (trace rows and exact emitted KL), as shares of its wall
    time: on the critical path (the decoding thread's waits and inline parts) and its own work
    (most of it on the recording thread, beside the decoding)."""

    critical: float
    work: float

    def caption(self, whose: str) -> str:
        return (
            f"Recording (trace rows and the exact emitted KL) cost {whose} {self.critical:.0%} "
            f"of its time, on the decoding thread; its own work, {self.work:.0%} of that time, "
            "ran on a recording thread beside the decoding. The measured speedup includes it."
        )


def record_share(stats: Any) -> RecordShare | None:
    """The recording's shares of a run's wall time; None without a timed run."""
    if stats is None or stats.wall_s <= 0:
        return None
    work = getattr(stats, "record_work_s", stats.record_s)
    return RecordShare(stats.record_s / stats.wall_s, work / stats.wall_s)
