"""Plotly builders for the Frontier page: pure functions from a sweep's rows to `go.Figure`.

Rows are the dicts of `SweepResult.rows()` (one per setting: the metric means, their 95%
interval as `<metric>_lo` / `<metric>_hi`, the limit numbers). Every point carries its setting
id as customdata, so a click on the page maps back to the setting. Each rule keeps one
colour and marker on every chart (`rule_style`); a chart of many rules opens with a few
shown and the rest one legend click away.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from cactus_core.app.shared.rule_style import LIMIT_COLOUR, rule_colour, shown_first, style
from cactus_core.experiments.estimates.frontier import Estimate, pareto_front
from cactus_core.experiments.estimates.speedup import PREDICTED_LABEL, predicted_estimate
from cactus_core.experiments.sweeps.run import BASELINE, METRIC_LABELS, SweepResult
from cactus_core.experiments.tuning.k_tuner import PairCosts, row_speedup
from cactus_core.maths.limit import LimitCurve

Row = Mapping[str, Any]

_LAYOUT = {
    # The legend in a column beside the plot: fifteen entries above it ran into the title.
    "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    "legend": {"orientation": "v", "yanchor": "top", "y": 1, "x": 1.02, "font": {"size": 12}},
    "font": {"size": 13},
    "height": 440,
    "hovermode": "closest",
    "hoverlabel": {"font": {"size": 14, "color": "#1f2a1f"}, "bgcolor": "#ffffff"},
}
# More rules than this on one chart: open with SHOWN_FIRST and hide the rest in the legend.
MAX_SHOWN = 5
FRONT_COLOUR = "#444444"
# x-axes whose every point carries its own interval (drawn as horizontal bars)
X_INTERVALS = ("task_score", "task_score_diff", "eos_rate", "loop_rate")
FRONT_NAME = "Pareto frontier (every rule, shown or hidden)"
_LABELS = {**METRIC_LABELS, "speedup": PREDICTED_LABEL}


__all__ = ["rule_colour"]  # re-exported: older callers import it from here


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _finite_point(r: Row, x: str, metric: str) -> bool:
    return math.isfinite(_num(r.get(x))) and math.isfinite(_num(r.get(metric)))


# Why a setting has no point on an axis, by what its row holds there.
_NOT_DRAWN_WHY = {
    "none": "not recorded on this axis (swept before the lab measured it)",
    "inf": "infinite: pi gives probability 0 to a token q allows, so KL(q ‖ pi) has no bound",
    "nan": "not measured",
}


def not_drawn(rows: Sequence[Row], metric: str, x: str = "emitted_kl") -> str | None:
    """The settings a chart of `metric` against `x` leaves out, by rule, with the reason; None
    when every row has a point. A view never drops a rule without saying so."""
    missing: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        for field in (x, metric):
            value = r.get(field)
            why = "none" if value is None else None
            if value is not None and not math.isfinite(float(value)):
                why = "nan" if math.isnan(float(value)) else "inf"
            if why is not None:
                missing.setdefault((str(r["rule"]), why), []).append(str(r["label"]))
                break
    if not missing:
        return None
    parts = []
    for (rule, why), labels in missing.items():
        named = labels[0] if len(labels) == 1 else f"{len(labels)} settings of {rule}"
        parts.append(f"{named} ({_NOT_DRAWN_WHY[why]})")
    return "Not drawn on this axis: " + "; ".join(parts) + "."


def _by_rule(rows: Sequence[Row]) -> dict[str, list[Row]]:
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(str(r["rule"]), []).append(r)
    return groups


def _errors(rows: Sequence[Row], metric: str) -> dict[str, Any] | None:
    if not all(f"{metric}_lo" in r for r in rows):
        return None
    ys = [_num(r[metric]) for r in rows]
    up = [max(0.0, _num(r[f"{metric}_hi"]) - y) for r, y in zip(rows, ys, strict=True)]
    down = [max(0.0, y - _num(r[f"{metric}_lo"])) for r, y in zip(rows, ys, strict=True)]
    clean = (
        [0.0 if not math.isfinite(v) else v for v in up],
        [0.0 if not math.isfinite(v) else v for v in down],
    )
    return {"type": "data", "array": clean[0], "arrayminus": clean[1], "thickness": 1, "width": 3}


def frontier_chart(
    rows: Sequence[Row],
    metric: str,
    x: str = "emitted_kl",
    *,
    title: str | None = None,
    front: bool = True,
    limit_curve: LimitCurve | None = None,
    selected: str | None = None,
    reference: Sequence[Row] | None = None,
) -> go.Figure:
    """metric (e.g. tokens_per_call) against x (emitted KL per token), one series per rule.

    Error bars are the 95% intervals (over prompts, or chunks for timings). `front` draws the
    Pareto frontier over all settings (least KL, most metric). `limit_curve` (for the
    acceptance chart) draws the best any rule could reach. `selected` rings one setting.
    `reference` (the shipped reference sweep's rows) is drawn faintly underneath.
    """
    if not rows:
        raise ValueError("no rows to plot: run a sweep first")
    fig = go.Figure()
    if reference:
        _add_reference(fig, reference, metric, x)
    groups = _by_rule(rows)
    keep = {str(r["rule"]) for r in rows if r["setting"] == selected}
    for rule, group in groups.items():
        visible = True if len(groups) <= MAX_SHOWN or rule in keep else shown_first(rule)
        _add_rule(fig, rule, group, metric, x, visible)
    if front:
        _add_front(fig, rows, metric, x)
    if limit_curve is not None:
        fig.add_scatter(
            x=limit_curve.mean_kl.tolist(),
            y=limit_curve.mean_acceptance.tolist(),
            mode="lines",
            name="limit (best any rule could reach)",
            line={"color": LIMIT_COLOUR, "width": 2, "dash": "dot"},
            hovertemplate="limit<br>KL %{x:.4f}: acceptance %{y:.3f}<extra></extra>",
        )
    if selected is not None:
        _add_ring(fig, rows, selected, metric, x)
    name = _LABELS.get(metric, metric)
    fig.update_layout(
        _LAYOUT,
        title=title if title is not None else f"{name} vs {_LABELS.get(x, x)}",
        xaxis_title=_LABELS.get(x, x),
        yaxis_title=name,
        clickmode="event+select",
    )
    return fig


def _add_rule(
    fig: go.Figure, rule: str, group: Sequence[Row], metric: str, x: str, visible: bool | str = True
) -> None:
    """One rule's settings as a line of points, each carrying its setting id for clicks."""
    pts = sorted(
        (r for r in group if _finite_point(r, x, metric)),
        key=lambda r: (_num(r[x]), _num(r.get("value"))),
    )
    if not pts:
        return
    look = style(rule)
    colour = look.colour
    baseline = rule == BASELINE
    # a rule whose pi is estimated from the decode (FLy) says so in its name, its hover and an
    # open marker, and its x carries that estimate's interval
    estimated = any(r.get("estimated") for r in pts)
    symbol = _open(look.symbol) if estimated else look.symbol
    fig.add_scatter(
        x=[_num(r[x]) for r in pts],
        y=[_num(r[metric]) for r in pts],
        mode="markers" if baseline else "lines+markers",
        name=f"{rule} (estimated π)" if estimated else rule,
        meta=rule,  # the rule, whatever the legend's name says of it
        visible=visible,
        marker={"color": colour, "size": 10 if baseline else 8, "symbol": symbol},
        line={"color": colour, "width": 1.5, "dash": "dot" if estimated else "solid"},
        error_y=_errors(pts, metric),
        error_x=_errors(pts, x) if estimated or x in X_INTERVALS else None,
        customdata=[[r["setting"], r["label"]] for r in pts],
        hovertemplate=(
            "<b>%{customdata[1]}</b><br>"
            + f"{_LABELS.get(x, x)}: %{{x:.4f}}"
            + (" (estimated, 95% interval)" if estimated else "")
            + f"<br>{_LABELS.get(metric, metric)}: %{{y:.3f}}<extra></extra>"
        ),
    )


def _add_reference(fig: go.Figure, rows: Sequence[Row], metric: str, x: str) -> None:
    """The reference sweep's points, faint and without clicks, one legend entry for all."""
    pts = [r for r in rows if _finite_point(r, x, metric) and r["rule"] != BASELINE]
    if not pts:
        return
    fig.add_scatter(
        x=[_num(r[x]) for r in pts],
        y=[_num(r[metric]) for r in pts],
        mode="markers",
        name="reference sweep",
        marker={"color": [rule_colour(str(r["rule"])) for r in pts], "size": 6, "opacity": 0.35},
        customdata=[[r["label"]] for r in pts],
        hovertemplate="reference: %{customdata[0]}<extra></extra>",
    )


def _add_ring(fig: go.Figure, rows: Sequence[Row], selected: str, metric: str, x: str) -> None:
    hit = [r for r in rows if r["setting"] == selected]
    if not hit or not math.isfinite(_num(hit[0].get(metric))):
        return
    fig.add_scatter(
        x=[_num(hit[0][x])],
        y=[_num(hit[0][metric])],
        mode="markers",
        name="selected",
        marker={"size": 18, "color": "rgba(0,0,0,0)", "line": {"color": "#d62728", "width": 2}},
        hoverinfo="skip",
    )


def _add_front(fig: go.Figure, rows: Sequence[Row], metric: str, x: str) -> None:
    """The step Pareto frontier over every setting, its corners marked in their rule's colour
    and symbol: a corner of a rule hidden in the legend still shows whose setting it is."""
    xs = [_num(r.get(x)) for r in rows]
    ys = [_num(r.get(metric)) for r in rows]
    idx = pareto_front(xs, ys)
    if len(idx) < 1:
        return
    # A step line: between two frontier points the best reachable value is the left one's.
    fx: list[float] = []
    fy: list[float] = []
    for j, i in enumerate(idx):
        if j > 0:
            fx.append(xs[i])
            fy.append(ys[idx[j - 1]])
        fx.append(xs[i])
        fy.append(ys[i])
    name = FRONT_NAME
    fig.add_scatter(
        x=fx,
        y=fy,
        mode="lines",
        name=name,
        legendgroup="front",
        line={"color": FRONT_COLOUR, "width": 2, "dash": "dash", "shape": "linear"},
        hoverinfo="skip",
    )
    corners = [rows[i] for i in idx]
    fig.add_scatter(
        x=[xs[i] for i in idx],
        y=[ys[i] for i in idx],
        mode="markers",
        name=name,
        legendgroup="front",
        showlegend=False,
        # an open symbol is drawn in the marker's colour: the rule's own
        marker={
            "size": 12,
            "color": [rule_colour(str(r["rule"])) for r in corners],
            "symbol": [_open(style(str(r["rule"])).symbol) for r in corners],
            "line": {"width": 2},
        },
        customdata=[[r["setting"], r["label"]] for r in corners],
        hovertemplate="frontier corner: <b>%{customdata[1]}</b><extra></extra>",
    )


def _open(symbol: str) -> str:
    return symbol if symbol.endswith("-open") else f"{symbol}-open"


def acceptance_limit_chart(
    rows: Sequence[Row], limit_curve: LimitCurve | None, selected: str | None = None
) -> go.Figure:
    """Each setting's exact expected acceptance against its KL per decided position, with the
    limit curve over the sweep's positions and, per setting, the limit on its own positions."""
    spec = [r for r in rows if r["rule"] != BASELINE]
    fig = frontier_chart(
        spec,
        "expected_acceptance",
        "scored_kl",
        title="acceptance vs the limit (same positions, same KL)",
        front=False,
        limit_curve=limit_curve,
        selected=selected,
    )
    own = [r for r in spec if math.isfinite(_num(r.get("limit_acceptance")))]
    if own:
        fig.add_scatter(
            x=[_num(r["scored_kl"]) for r in own],
            y=[_num(r["limit_acceptance"]) for r in own],
            mode="markers",
            name="limit at each setting's KL",
            marker={"symbol": "line-ew", "size": 14, "line": {"width": 2, "color": LIMIT_COLOUR}},
            customdata=[[r["setting"], r["label"], _num(r["efficiency"])] for r in own],
            hovertemplate=(
                "limit for <b>%{customdata[1]}</b>: %{y:.3f}<br>"
                "efficiency %{customdata[2]:.1%}<extra></extra>"
            ),
        )
    return fig


def predicted_speedup_rows(rows: Sequence[Row], costs: PairCosts, k: int) -> list[dict[str, Any]]:
    """Rows with the predicted speedup at k (`k_tuner.row_speedup`, what the k tuner and the
    tuner's table show too) as `speedup`, its interval from tokens per call's
    (`speedup.predicted_estimate`); rows without per-position rates are left out."""
    out = []
    for r in rows:
        value = row_speedup(r, costs, k)
        if value is None:
            continue
        tokens = Estimate(
            _num(r.get("tokens_per_call")),
            _num(r.get("tokens_per_call_lo")),
            _num(r.get("tokens_per_call_hi")),
            int(r.get("prompts") or 0),
        )
        e = predicted_estimate(value, tokens) if r["rule"] != BASELINE else Estimate(1, 1, 1, 0)
        out.append({**r, "speedup": e.mean, "speedup_lo": e.lo, "speedup_hi": e.hi})
    return out


def predicted_speedup_chart(
    rows: Sequence[Row], costs: PairCosts, k: int, selected: str | None = None
) -> go.Figure:
    """The predicted speedup of each setting against emitted KL."""
    return frontier_chart(
        predicted_speedup_rows(rows, costs, k),
        "speedup",
        title=f"{PREDICTED_LABEL} at k = {k}, from the pair's measured costs",
        selected=selected,
    )


def report_figures(result: SweepResult) -> list[go.Figure]:
    """The charts a report shows: tokens per call and acceptance against the limit (a report
    holds no speedup: that is measured by the race, or predicted from the pair's costs)."""
    rows = result.rows()
    figs = [frontier_chart(rows, "tokens_per_call")]
    curve = result.pooled_limit()
    if curve is not None:
        figs.append(acceptance_limit_chart(rows, curve))
    for f in figs:
        f.update_layout(width=1000, height=460)
    return figs


def figure_html(figs: Sequence[go.Figure], title: str = "Cactus Lab frontier") -> str:
    """One self-contained HTML page (plotly.js inlined, no network) holding the figures."""
    if not figs:
        raise ValueError("no figures")
    parts = [
        f.to_html(
            full_html=False,
            include_plotlyjs="inline" if i == 0 else False,
            config={"displayModeBar": False},
        )
        for i, f in enumerate(figs)
    ]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        "<body style='margin:0;background:white'>" + "".join(parts) + "</body></html>"
    )
