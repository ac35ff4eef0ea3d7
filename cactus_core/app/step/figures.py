"""Plotly figures of the Step through page and of "Why drafts get rejected", built without
Streamlit so tests can check them."""

from __future__ import annotations

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
    if step.frame is not None:
        out["tree"] = tree_figure(step.frame)
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
