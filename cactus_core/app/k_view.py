"""Per-position acceptance and the k tuner as the pages show them, without Streamlit: a chart
of the conditional acceptance at each draft position with its counts and 95% intervals, and
predicted speedup against k with the best k marked and the extrapolated k drawn dotted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from cactus_core.app.frontier_figures import rule_colour
from cactus_core.engine.decoding.generation import PositionCounts
from cactus_core.engine.decoding.trace import RoundTrace
from cactus_core.experiments.k_tuner import KPrediction

POSITION_HELP = (
    "Conditional acceptance at draft position j: drafts accepted there ÷ drafts that got there "
    "(every earlier draft of the round accepted), with a 95% Wilson interval. The dotted line "
    "is vLLM's acceptance per position (accepted at j ÷ rounds); mean acceptance length = 1 + "
    "its sum."
)


def position_chart(
    counts: PositionCounts, title: str = "acceptance by draft position"
) -> go.Figure:
    """Bars of the conditional rate per position with intervals and counts; vLLM's
    unconditional rate as a dotted line."""
    js = list(range(1, len(counts.reached) + 1))
    cond, ci = counts.conditional(), counts.intervals()
    ys = [c if c is not None else 0.0 for c in cond]
    up = [(i[1] - y) if i else 0.0 for i, y in zip(ci, ys, strict=True)]
    down = [(y - i[0]) if i else 0.0 for i, y in zip(ci, ys, strict=True)]
    fig = go.Figure(
        layout={
            "height": 280,
            "margin": {"l": 50, "r": 10, "t": 36, "b": 40},
            "title": {"text": title, "font": {"size": 12}},
            "xaxis": {"title": {"text": "draft position j"}, "dtick": 1},
            "yaxis": {"title": {"text": "acceptance"}, "range": [0, 1.05]},
            "legend": {"orientation": "h", "y": -0.3},
        }
    )
    fig.add_bar(
        x=js,
        y=ys,
        name="accepted ÷ reached",
        error_y={"type": "data", "symmetric": False, "array": up, "arrayminus": down},
        text=[f"{a}/{r}" for a, r in zip(counts.accepted, counts.reached, strict=True)],
        textposition="inside",
        marker_color="#2ca02c",
        hovertemplate="position %{x}: %{y:.3f} (%{text})<extra></extra>",
    )
    fig.add_scatter(
        x=js,
        y=[u if u is not None else 0.0 for u in counts.unconditional()],
        mode="lines+markers",
        name="accepted ÷ rounds (vLLM)",
        line={"dash": "dot", "color": "#555555"},
        hovertemplate="position %{x}: %{y:.3f} of rounds<extra></extra>",
    )
    return fig


def k_chart(preds: Mapping[str, KPrediction], rule: str | None = None) -> go.Figure:
    """Predicted speedup against k per label; the measured positions solid, the extrapolated
    ones dotted; the best k of each marked with a star."""
    fig = go.Figure(
        layout={
            "height": 300,
            "margin": {"l": 50, "r": 10, "t": 36, "b": 40},
            "title": {"text": "predicted speedup against k (modelled)", "font": {"size": 12}},
            "xaxis": {"title": {"text": "k (draft tokens per round)"}, "dtick": 1},
            "yaxis": {"title": {"text": "predicted speedup vs verifier-only"}},
            "legend": {"orientation": "h", "y": -0.3},
        }
    )
    for i, (label, pred) in enumerate(preds.items()):
        colour = rule_colour(rule or label.split()[0]) if len(preds) == 1 else None
        measured = [k for k in pred.ks if not pred.extrapolated(k)]
        cut = max(measured) if measured else min(pred.ks)
        solid = [k for k in pred.ks if k <= cut]
        dotted = [k for k in pred.ks if k >= cut]
        style = {"color": colour} if colour else {}
        group = f"g{i}"
        if solid and not pred.pooled:
            fig.add_scatter(
                x=solid,
                y=[pred.at(k)[1] for k in solid],
                mode="lines+markers",
                name=label,
                legendgroup=group,
                line=style,
                hovertemplate="k %{x}: %{y:.2f}×<extra>" + label + "</extra>",
            )
        fig.add_scatter(
            x=dotted if not pred.pooled else list(pred.ks),
            y=[pred.at(k)[1] for k in (dotted if not pred.pooled else pred.ks)],
            mode="lines+markers",
            name=f"{label} (extrapolated)",
            legendgroup=group,
            line={**style, "dash": "dot"},
            hovertemplate="k %{x}: %{y:.2f}× (extrapolated)<extra>" + label + "</extra>",
        )
        best = pred.best_k
        fig.add_scatter(
            x=[best],
            y=[pred.at(best)[1]],
            mode="markers",
            name=f"best k = {best}",
            legendgroup=group,
            marker={"symbol": "star", "size": 14, **({"color": colour} if colour else {})},
            hovertemplate=f"best k {best}: %{{y:.2f}}×<extra>{label}</extra>",
        )
    return fig


def counts_from_rounds(rounds: Sequence[RoundTrace]) -> PositionCounts:
    """Per-position counts of the speculative rounds so far, from their draft fates (what Step
    through has decoded before the run is finished and its stats exist)."""
    k = max((r.k for r in rounds), default=0)
    reached, accepted, n = [0] * k, [0] * k, 0
    for r in rounds:
        if r.k == 0:
            continue
        n += 1
        for j, fate in enumerate(r.draft_fates):
            reached[j] += fate in ("accepted", "rejected")
            accepted[j] += fate == "accepted"
    return PositionCounts(tuple(reached), tuple(accepted), n)
