"""Plotly figures of the Step through page and of "Why drafts get rejected", built without
Streamlit so tests can check them."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from cactus_core.app.shared import figures
from cactus_core.app.shared.tree_figure import tree_figure
from cactus_core.app.step.steps import Step

# The look of the other figures (figures.py, which also makes plotly_white the default).
_LAYOUT = {"margin": {"l": 50, "r": 20, "t": 50, "b": 40}}


def step_figures(step: Step) -> dict[str, go.Figure]:
    """The step's pictures by name: `bars` (p, q, h, the residual ...), `coin` (the rule's a(n)
    against u), `sps_coin` (lossless a(n) against the same u) and `tree` (a tree round's
    tree), as far as the step has them."""
    out: dict[str, go.Figure] = {}
    if step.tree is not None:
        out["tree"] = tree_figure(step.tree)
    if step.bars is not None:
        b = step.bars
        fig = figures.distribution_bars(b.labels, b.series, title=b.title)
        if b.highlight is not None:
            top = max(max(v) for v in b.series.values())
            x = fig.data[0].x[b.highlight]  # the label as the figure shows it
            fig.add_annotation(x=x, y=top * 1.08 if top > 0 else 0.05, text=b.mark, showarrow=False)
        out["bars"] = fig
    if step.coin is not None:
        a, u = step.coin
        out["coin"] = figures.coin_figure(a, u, title=_coin_title("this rule", a, u))
    if step.sps_coin is not None:
        a, u = step.sps_coin
        out["sps_coin"] = figures.coin_figure(a, u, title=_coin_title("lossless", a, u))
    return out


def _coin_title(who: str, a: float, u: float) -> str:
    verdict = "accepts" if u < a else "rejects"
    return f"{who}: a(n) = {a:.3f}, u = {u:.3f}, {verdict}"


def rescue_curve_figure(deltas: Sequence[float], shares: Sequence[float]) -> go.Figure:
    """The share of the rejected drafts Cactus would have accepted for sure, against delta."""
    if len(deltas) != len(shares):
        raise ValueError("deltas and shares differ in length")
    fig = go.Figure()
    fig.add_scatter(
        x=list(deltas),
        y=list(shares),
        mode="lines",
        line={"shape": "hv", "width": 3, "color": figures.SERIES_COLOURS["h"]},
        name="rescued",
        hovertemplate="delta = %{x:.3g}: %{y:.0%} rescued<extra></extra>",
    )
    fig.update_layout(
        _LAYOUT,
        title="Rescue curve: share accepted for sure",
        xaxis_title="Cactus delta (nats, log scale)",
        yaxis_title="share rescued",
        height=300,
    )
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    fig.update_xaxes(type="log")
    return fig


def rank_histogram_figure(labels: Sequence[str], counts: Sequence[int]) -> go.Figure:
    """Where the rejected drafts sat in q: counts per rank bin, q_n = 0 last."""
    if len(labels) != len(counts):
        raise ValueError("labels and counts differ in length")
    colours = [figures.FATE_COLOURS["rejected"]] * (len(labels) - 1) + ["#999999"]
    fig = go.Figure()
    fig.add_bar(x=list(labels), y=list(counts), marker_color=colours, name="rejected drafts")
    fig.update_layout(
        _LAYOUT,
        title="Where the rejected drafts sat in q (rank)",
        xaxis_title="rank of the draft in q",
        yaxis_title="rejected drafts",
        height=300,
        showlegend=False,
    )
    fig.update_xaxes(type="category")
    return fig
