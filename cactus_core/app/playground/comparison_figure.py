"""The every-rule frontier figure of docs/rules.md: tokens per call against emitted KL, one
panel per top-p, from `experiments.estimates.rule_comparison` points. Pure: no Streamlit, no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from cactus_core.app.shared.rule_style import style
from cactus_core.experiments.estimates.rule_comparison import RulePoint, by_rule


def rule_comparison_figure(
    panels: Mapping[str, Sequence[RulePoint]], *, log_kl_floor: float = 1e-4
) -> go.Figure:
    """One panel per entry (its title, e.g. 'top-p 1'), every rule's measured settings joined
    in order of KL. KL is drawn on a log axis; lossless settings (KL 0) sit at log_kl_floor."""
    titles = list(panels)
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, shared_yaxes=True)
    for col, title in enumerate(titles, start=1):
        for rule, pts in by_rule(panels[title]).items():
            look = style(rule)
            fig.add_trace(
                go.Scatter(
                    x=[max(p.kl, log_kl_floor) for p in pts],
                    y=[p.tokens_per_call for p in pts],
                    mode="lines+markers",
                    name=rule,
                    legendgroup=rule,
                    showlegend=col == 1,
                    line={"color": look.colour, "width": 1.5},
                    marker={"symbol": look.symbol, "size": 8},
                    text=[p.label for p in pts],
                    hovertemplate="%{text}<br>KL %{x:.4f}<br>tokens/call %{y:.3f}<extra></extra>",
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(type="log", title_text="emitted KL per token (nats)", row=1, col=col)
    fig.update_yaxes(title_text="tokens per verifier call", row=1, col=1)
    fig.update_layout(
        height=620,
        width=560 * len(titles) + 80,
        margin={"l": 60, "r": 20, "t": 60, "b": 150},
        # below the panels, in rows: fourteen rules do not fit a column beside them
        legend={"orientation": "h", "y": -0.18, "x": 0, "font": {"size": 12}},
        font={"size": 13},
    )
    return fig
