"""Why the measured speedup is what it is: a speculative round's cost in verifier-only steps.

The speedup (`experiments.estimates.speedup`) is tokens per round ÷ a round's cost in verifier-only
steps, every time taken over the decoding (the prefill apart). A round's cost is the verify
pass over k + 1 tokens (more than one step's worth on a CPU, where a forward's cost grows with
its width), k draft steps, and the rest of the loop (coins, the host sync, Python). The
textbook model (tokens per call ÷ (1 + k·c)) charges the verify pass 1 and the rest 0; the
parts show where this machine differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from cactus_core.app.shared.metrics import SpeedComparison
from cactus_core.experiments.estimates.speedup import decoding_seconds


@dataclass(frozen=True)
class CostParts:
    """A speculative round's cost in verifier-only steps, measured in one race."""

    tokens_per_round: float
    k: int
    verify: float  # the verify pass ÷ one verifier-only step
    draft: float  # k draft steps ÷ one verifier-only step
    other: float  # the rest of the round ÷ one verifier-only step

    @property
    def round(self) -> float:
        return self.verify + self.draft + self.other

    @property
    def speedup(self) -> float:
        """tokens per round ÷ the round's cost: the race's measured speedup."""
        return self.tokens_per_round / self.round if self.round > 0 else 0.0


def cost_parts(cmp: SpeedComparison) -> CostParts | None:
    """The race's round cost in parts, over the work the speedup compares (its rates): a
    round's time and a step's from the rates, split into verify, draft and the rest by the
    speculative run's own shares of its decoding time. So the parts give the measured speedup
    exactly. None without both runs' stats."""
    s, b = cmp.spec_stats, cmp.base_stats
    if s is None or b is None or not (s.rounds and b.new_tokens):
        return None
    decoding = decoding_seconds(s)
    if cmp.verifier_only_tokens_per_s <= 0 or cmp.speculative_tokens_per_s <= 0 or decoding <= 0:
        return None
    per_round = cmp.tokens / cmp.rounds if cmp.rounds else s.new_tokens / s.rounds
    step = 1 / cmp.verifier_only_tokens_per_s  # one verifier-only token, all included
    round_steps = per_round / cmp.speculative_tokens_per_s / step
    verify = round_steps * min(1.0, s.verify_s / decoding)
    draft = round_steps * min(1.0 - verify / round_steps, s.draft_s / decoding)
    return CostParts(per_round, cmp.k, verify, draft, max(0.0, round_steps - verify - draft))


def explanation(parts: CostParts) -> str:
    """The measured speedup from its parts, in words."""
    return (
        f"A speculative round cost {parts.round:.2f} verifier-only steps: the verify pass over "
        f"{parts.k + 1} tokens {parts.verify:.2f}, {parts.k} draft steps {parts.draft:.2f}, and "
        f"the rest of the loop {parts.other:.2f}. It wrote {parts.tokens_per_round:.2f} tokens "
        f"on average, so {parts.tokens_per_round:.2f} ÷ {parts.round:.2f} = "
        f"{parts.speedup:.2f}×, the measured speedup. The textbook model (tokens per call ÷ "
        "(1 + k·c), the Frontier's modelled tab) charges the verify pass 1 step and the rest 0."
    )


def parts_chart(parts: CostParts) -> go.Figure:
    """Two stacked bars: one verifier-only step (1 token) and a speculative round (its
    tokens per round), both in verifier-only steps."""
    fig = go.Figure(
        layout={
            "barmode": "stack",
            "height": 230,
            "margin": {"l": 40, "r": 10, "t": 40, "b": 30},
            "title": {"text": "cost in verifier-only steps", "font": {"size": 12}},
            "legend": {"orientation": "h", "y": -0.25},
        }
    )
    bars = ("verifier-only step (1 token)", f"round ({parts.tokens_per_round:.2f} tokens)")
    for name, vals, colour in (
        ("verify", (1.0, parts.verify), "#1f77b4"),
        ("draft", (0.0, parts.draft), "#ff7f0e"),
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
            "ran on a recording thread beside the decoding. The race records nothing, so its "
            "speedup leaves the recording out."
        )


def record_share(stats: Any) -> RecordShare | None:
    """The recording's shares of a run's wall time; None without a timed run."""
    if stats is None or stats.wall_s <= 0:
        return None
    work = getattr(stats, "record_work_s", stats.record_s)
    return RecordShare(stats.record_s / stats.wall_s, work / stats.wall_s)
