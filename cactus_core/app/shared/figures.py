"""Plotly figure builders for the app: pure functions from numbers to `go.Figure`.

Nothing here imports streamlit or torch, so every figure can be built and checked in a unit
test. Inputs are plain sequences (lists, numpy arrays or CPU tensors all work). Colours are
fixed per quantity (p, q, h, residual, pi) and per token fate, so a reader learns them once
and they mean the same thing on every page. The palette is Okabe-Ito (colour-blind safe).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

# Every chart in the lab is on plotly_white. A template named in a layout is validated and
# deep-copied for each figure (about 40 ms on a 2 GHz core, most of a Decode-page marker
# redraw), while plotly applies its default template without that check: so it is the default.
pio.templates.default = "plotly_white"

# One colour per quantity, reused on every page and in the legends.
SERIES_COLOURS: dict[str, str] = {
    "p": "#E69F00",  # draft
    "q": "#0072B2",  # verifier
    "h": "#009E73",  # what the rule verifies against
    "residual": "#D55E00",
    "pi": "#CC79A7",  # emitted
}
SERIES_NAMES: dict[str, str] = {
    "p": "p (draft)",
    "q": "q (verifier)",
    "h": "h (rule's target)",
    "residual": "residual r_n",
    "pi": "pi (emitted)",
}
FATE_COLOURS: dict[str, str] = {
    "accepted": "#009E73",
    "rejected": "#D55E00",
    "recovered": "#E69F00",
    "bonus": "#0072B2",
}
# Rules beyond the first few fall back to this cycle.
RULE_PALETTE: tuple[str, ...] = (
    "#0072B2",
    "#009E73",
    "#56B4E9",
    "#E69F00",
    "#D55E00",
    "#CC79A7",
    "#999999",
    "#F0E442",
)

_LAYOUT = {
    "margin": {"l": 50, "r": 20, "t": 50, "b": 40},
    # title on the left, legend on the right of the same band above the plot
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "right", "x": 1},
    "font": {"size": 13},
    "height": 360,
}


def _as_list(values: Sequence[float] | np.ndarray, name: str) -> list[float]:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr.tolist()


def _check_lengths(labels: Sequence[str], series: Mapping[str, Sequence[float]]) -> None:
    if not series:
        raise ValueError("at least one series is needed")
    for key, values in series.items():
        if len(values) != len(labels):
            raise ValueError(f"series {key!r} has {len(values)} values for {len(labels)} labels")


def display_token(text: str) -> str:
    """Make whitespace visible in an axis label or chip (spaces and newlines are common tokens)."""
    if text == "":
        return "∅"
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")


def _unique_labels(labels: Sequence[str]) -> list[str]:
    # Plotly merges bars with equal category names; different ids can decode to the same text.
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        shown = display_token(str(label))
        count = seen.get(shown, 0)
        seen[shown] = count + 1
        out.append(shown if count == 0 else f"{shown} ({count + 1})")
    return out


def distribution_bars(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    highlight: int | None = None,
    yaxis_title: str = "probability",
    mark: str = "drafted n",
) -> go.Figure:
    """Grouped bars of several distributions over the same tokens.

    `series` maps a key to one value per label; the keys p, q, h, residual and pi get their
    fixed colours and names. `highlight` is the index of the token marked above its group,
    with the text `mark` (the drafted token, or a bonus token drawn from q).
    """
    _check_lengths(labels, series)
    x = _unique_labels(labels)
    fig = go.Figure()
    for i, (key, values) in enumerate(series.items()):
        fig.add_bar(
            x=x,
            y=_as_list(values, key),
            name=SERIES_NAMES.get(key, key),
            marker_color=SERIES_COLOURS.get(key, RULE_PALETTE[i % len(RULE_PALETTE)]),
            hovertemplate="%{x}: %{y:.4f}<extra>" + SERIES_NAMES.get(key, key) + "</extra>",
        )
    if highlight is not None:
        if not 0 <= highlight < len(x):
            raise ValueError(f"highlight index {highlight} is outside 0..{len(x) - 1}")
        top = max(max(_as_list(v, k)) for k, v in series.items())
        fig.add_annotation(
            x=x[highlight],
            y=top * 1.08 if top > 0 else 0.05,
            text=mark,
            showarrow=False,
            font={"color": "#333"},
        )
    fig.update_layout(_LAYOUT, title=title, barmode="group", yaxis_title=yaxis_title)
    fig.update_xaxes(type="category")
    return fig


def acceptance_by_token(
    labels: Sequence[str],
    accept_by_rule: Mapping[str, Sequence[float]],
    *,
    drafted: int | None = None,
    title: str = "a(n) if n were drafted",
) -> go.Figure:
    """a(n) for every possible drafted token n, one bar group per token, one bar per rule."""
    _check_lengths(labels, accept_by_rule)
    x = _unique_labels(labels)
    fig = go.Figure()
    for i, (rule_label, values) in enumerate(accept_by_rule.items()):
        fig.add_bar(
            x=x,
            y=_as_list(values, rule_label),
            name=rule_label,
            marker_color=RULE_PALETTE[i % len(RULE_PALETTE)],
            hovertemplate="a(%{x}) = %{y:.3f}<extra>" + rule_label + "</extra>",
        )
    if drafted is not None:
        if not 0 <= drafted < len(x):
            raise ValueError(f"drafted index {drafted} is outside 0..{len(x) - 1}")
        fig.add_vrect(
            x0=drafted - 0.5, x1=drafted + 0.5, fillcolor="#999", opacity=0.12, line_width=0
        )
    fig.update_layout(_LAYOUT, title=title, barmode="group", yaxis_title="a(n)")
    fig.update_yaxes(range=[0, 1.05])
    fig.update_xaxes(type="category")
    return fig


def rule_summary(
    rule_labels: Sequence[str],
    expected_acceptance: Sequence[float],
    emitted_kl: Sequence[float],
    *,
    title: str = "Every rule at this position",
) -> go.Figure:
    """Expected acceptance (bars, left axis) and KL(pi ‖ q) (diamonds, right axis) per rule."""
    if not (len(rule_labels) == len(expected_acceptance) == len(emitted_kl)):
        raise ValueError("rule_labels, expected_acceptance and emitted_kl differ in length")
    acc = _as_list(expected_acceptance, "expected_acceptance")
    # KL can be +inf (pi puts mass where q has none); plot it at the top and say so in hover.
    kl = np.asarray(emitted_kl, dtype=np.float64)
    finite = kl[np.isfinite(kl)]
    cap = float(finite.max()) * 1.2 if finite.size and finite.max() > 0 else 1.0
    kl_plot = np.where(np.isfinite(kl), kl, cap).tolist()
    kl_text = [f"{v:.4f}" if np.isfinite(v) else "inf" for v in kl]
    fig = go.Figure()
    # Each rule's bar and diamond side by side (bar left, diamond right), so a bar's label
    # never sits under the diamond of the same rule.
    at = np.arange(len(acc), dtype=np.float64)
    labels = list(rule_labels)
    fig.add_bar(
        x=(at - 0.17).tolist(),
        y=acc,
        width=0.34,
        name="expected acceptance Σ p(n)·a(n)",
        marker_color=SERIES_COLOURS["h"],
        text=[f"{v:.1%}" for v in acc],
        textposition="outside",
        customdata=labels,
        hovertemplate="%{customdata}: %{y:.4f}<extra>expected acceptance</extra>",
    )
    fig.add_scatter(
        x=(at + 0.17).tolist(),
        y=kl_plot,
        name="KL(pi ‖ q), nats",
        mode="markers",
        marker={"symbol": "diamond", "size": 13, "color": SERIES_COLOURS["pi"]},
        yaxis="y2",
        customdata=[[name, text] for name, text in zip(labels, kl_text, strict=True)],
        hovertemplate="%{customdata[0]}: KL(pi ‖ q) = %{customdata[1]}<extra></extra>",
    )
    fig.update_layout(
        _LAYOUT,
        title=title,
        xaxis={"tickmode": "array", "tickvals": at.tolist(), "ticktext": labels},
        yaxis={"title": "expected acceptance", "range": [0, 1.15]},
        yaxis2={
            "title": "KL(pi ‖ q) (nats)",
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
        },
    )
    return fig


def coin_figure(accept_prob: float, coin: float, *, title: str = "") -> go.Figure:
    """One accept/reject decision: the bar is a(n), the line is the coin u; u < a(n) accepts."""
    for name, value in (("accept_prob", accept_prob), ("coin", coin)):
        if not (np.isfinite(value) and 0.0 <= value <= 1.0):
            raise ValueError(f"{name} must lie in [0, 1], got {value}")
    accepted = coin < accept_prob
    colour = FATE_COLOURS["accepted"] if accepted else FATE_COLOURS["rejected"]
    fig = go.Figure()
    fig.add_bar(
        x=[accept_prob],
        y=["a(n)"],
        orientation="h",
        marker_color=colour,
        name="a(n)",
        hovertemplate="a(n) = %{x:.4f}<extra></extra>",
    )
    fig.add_scatter(
        x=[coin],
        y=["a(n)"],
        mode="markers",
        marker={"symbol": "line-ns", "size": 40, "line": {"width": 3, "color": "#222"}},
        name="coin u",
        hovertemplate="u = %{x:.4f}<extra></extra>",
    )
    verdict = "accepted: u < a(n)" if accepted else "rejected: u ≥ a(n)"
    fig.update_layout(
        _LAYOUT,
        title=title or f"{verdict}   (a(n) = {accept_prob:.3f}, u = {coin:.3f})",
        height=150,
        showlegend=False,
        margin={"l": 50, "r": 20, "t": 40, "b": 30},
    )
    fig.update_xaxes(range=[0, 1.0001])
    return fig


def taylor_gap(
    deltas: Sequence[float],
    kl_taylor: Sequence[float],
    kl_exact: Sequence[float],
    *,
    current_delta: float | None = None,
    names: tuple[str, str] = ("Taylor closed form", "exact binary-KL root"),
    title: str = "KL(h ‖ q) against the budget delta",
) -> go.Figure:
    """KL(h ‖ q) of Cactus's closed form and of its exact root against delta (`names` are the
    two curves' legend entries).

    The dashed diagonal is KL = delta: the closed form crosses above it, the exact root never.
    """
    if not (len(deltas) == len(kl_taylor) == len(kl_exact)):
        raise ValueError("deltas, kl_taylor and kl_exact differ in length")
    d = _as_list(deltas, "deltas")
    fig = go.Figure()
    fig.add_scatter(
        x=d, y=d, name="KL = delta", mode="lines", line={"dash": "dash", "color": "#888"}
    )
    fig.add_scatter(
        x=d,
        y=_as_list(kl_taylor, "kl_taylor"),
        name=names[0],
        mode="lines",
        line={"color": RULE_PALETTE[1], "width": 3},
    )
    fig.add_scatter(
        x=d,
        y=_as_list(kl_exact, "kl_exact"),
        name=names[1],
        mode="lines",
        line={"color": RULE_PALETTE[0], "width": 3},
    )
    if current_delta is not None:
        fig.add_vline(x=current_delta, line_color="#222", line_width=1)
    fig.update_layout(_LAYOUT, title=title, xaxis_title="delta", yaxis_title="KL(h ‖ q) (nats)")
    return fig


def round_timeline(
    accepted: Sequence[int],
    drafted: Sequence[int],
    bonus: Sequence[bool],
    *,
    title: str = "Tokens per round",
) -> go.Figure:
    """Per round: the emitted tokens stacked above zero (accepted drafts, then the recovered or
    bonus token every round ends with) and the rejected draft, if any, below zero. Drafts
    dropped after a rejection are not shown."""
    if not (len(accepted) == len(drafted) == len(bonus)):
        raise ValueError("accepted, drafted and bonus differ in length")
    rounds = list(range(1, len(accepted) + 1))
    acc = [int(a) for a in accepted]
    for a, k in zip(acc, drafted, strict=True):
        if not 0 <= a <= k:
            raise ValueError(f"accepted count {a} outside 0..{k}")
    bars = (
        ("accepted draft", acc, "accepted"),
        ("recovered", [0 if b else 1 for b in bonus], "recovered"),
        ("bonus", [1 if b else 0 for b in bonus], "bonus"),
        ("rejected draft", [0 if b else -1 for b in bonus], "rejected"),
    )
    fig = go.Figure()
    for name, values, fate in bars:
        fig.add_bar(x=rounds, y=values, name=name, marker_color=FATE_COLOURS[fate])
    fig.update_layout(
        _LAYOUT,
        title=title,
        barmode="relative",
        xaxis_title="round",
        yaxis_title="tokens",
        height=260,
    )
    return fig
