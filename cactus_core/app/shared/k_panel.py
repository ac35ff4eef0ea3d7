"""Per-position acceptance and the k tuner as the pages show them, without Streamlit: a chart
of the conditional acceptance at each draft position with its counts and 95% intervals, and
predicted speedup against k with the best k marked and the extrapolated k drawn dotted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.colors
import plotly.graph_objects as go

from cactus_core.app.shared.rule_style import rule_colour, rule_of_label
from cactus_core.engine.decoding.generation import PositionCounts
from cactus_core.engine.decoding.trace import RoundTrace
from cactus_core.experiments.tuning.k_tuner import KPrediction, PairCosts, cost_runs

# What the pages read of the k tuner: through this view, never from experiments directly.
from cactus_core.experiments.tuning.k_tuner import cached_costs as cached_costs
from cactus_core.experiments.tuning.k_tuner import cached_costs_for as cached_costs_for
from cactus_core.experiments.tuning.k_tuner import measuring_now as measuring_now
from cactus_core.experiments.tuning.k_tuner import predict_k as predict_k
from cactus_core.experiments.tuning.k_tuner import predict_row as predict_row
from cactus_core.experiments.tuning.k_tuner import shared_costs as shared_costs

MEASURE_LABEL = "Measure the pair's costs"
COSTS_NEEDED = (
    "Predicted speedups need this pair's costs on this machine: the verifier over 1–13 tokens, "
    f"the draft's step and the loop's overhead, from {cost_runs()} short runs (about two "
    "minutes on two CPU cores; a bar shows the time left). Measured once, then kept on disk "
    "for this pair, device and thread count."
)
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


_PALETTE = plotly.colors.qualitative.Dark2


def k_chart(preds: Mapping[str, KPrediction], rule: str | None = None) -> go.Figure:
    """Predicted speedup against k per label; the measured positions solid, the extrapolated
    ones dotted; the best k of each marked with a star."""
    fig = go.Figure(
        layout={
            "height": 320,
            # the title sits above the plot's top, clear of the y axis title beneath it
            "margin": {"l": 60, "r": 10, "t": 56, "b": 40},
            "title": {
                "text": "predicted speedup against k (from the pair's measured costs)",
                "font": {"size": 12},
                "y": 0.97,
                "yanchor": "top",
            },
            "xaxis": {"title": {"text": "k (draft tokens per round)"}, "dtick": 1},
            "yaxis": {"title": {"text": "predicted speedup"}},
            "legend": {"orientation": "h", "y": -0.3},
        }
    )
    # One colour per series, its star included: the rule's own colour when every series is
    # another rule, else a palette (two settings of one rule must not share a colour).
    rules = [rule or rule_of_label(label) for label in preds]
    distinct = len(set(rules)) == len(rules)
    for i, (label, pred) in enumerate(preds.items()):
        colour = rule_colour(rules[i]) if distinct else _PALETTE[i % len(_PALETTE)]
        measured = [k for k in pred.ks if not pred.extrapolated(k)]
        cut = max(measured) if measured else min(pred.ks)
        solid = [k for k in pred.ks if k <= cut]
        dotted = [k for k in pred.ks if k >= cut]
        style = {"color": colour}
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
            name=f"{label}: best k = {best}",
            legendgroup=group,
            showlegend=False,  # the hover names it; the legend keeps one entry per series
            marker={"symbol": "star", "size": 14, "color": colour},
            hovertemplate=f"best k {best}: %{{y:.2f}}×<extra>{label}</extra>",
        )
    return fig


def counts_from_rounds(rounds: Sequence[RoundTrace]) -> PositionCounts:
    """Per-position counts of the speculative rounds so far, from their verdicts (what Step
    through has decoded before the run is finished and its stats exist), in the decoder's
    definitions: depth j + 1 was reached when the walk stood on a row with candidates at depth
    j, and accepted when it went on."""
    k = max((max(r.verdict.depths, default=0) for r in rounds), default=0)
    reached, accepted, n = [0] * k, [0] * k, 0
    for r in rounds:
        if r.sampled:
            continue
        n += 1
        for j in range(len(r.verdict.decided_rows)):
            reached[j] += 1
        for j in range(r.num_accepted):
            accepted[j] += 1
    return PositionCounts(tuple(reached), tuple(accepted), n)


def k_summary(preds: Mapping[str, KPrediction]) -> str:
    """One caption for a k chart: each setting's best k, and how the curves were made, said
    once for the settings that share it."""
    best = "; ".join(f"{label} {p.best_k}" for label, p in preds.items())
    pooled = [label for label, p in preds.items() if p.pooled]
    parts = [f"Best k: {best}."]
    if pooled:
        rates = ", ".join(f"{label} {preds[label].rates[0]:.3f}" for label in pooled)
        parts.append(
            "No per-position counts for "
            + ("these settings" if len(pooled) == len(preds) else ", ".join(pooled))
            + f" in this sweep: every position takes the pooled acceptance rate ({rates}), "
            "so every k is modelled (the geometric model)."
        )
    parts += [f"{label}: {p.how()}" for label, p in preds.items() if not p.pooled]
    return " ".join(parts)


def default_k_settings(
    rows: Sequence[Mapping[str, Any]], default_label: str, limit: int = 3
) -> list[str]:
    """The settings (sweep rows: label, rule, value) a k chart opens with: sps, the app's
    default setting, and the default rule's largest setting; others, evenly spaced, fill any
    gap."""
    labels = list(dict.fromkeys(str(r["label"]) for r in rows))
    rule = rule_of_label(default_label)
    same_rule = [r for r in rows if r.get("rule") == rule and r.get("value") is not None]
    picks = [x for x in ("sps", default_label) if x in labels]
    if same_rule:
        top = str(max(same_rule, key=lambda r: float(r["value"]))["label"])
        if top not in picks:
            picks.append(top)
    for x in labels[:: max(1, len(labels) // limit)]:
        if len(picks) >= limit:
            break
        if x not in picks:
            picks.append(x)
    return picks[:limit]


def costs_caption(costs: PairCosts) -> str:
    """Which costs a prediction uses, in a line."""
    return (
        f"Costs measured on this machine ({costs.device}, {costs.threads} torch threads, "
        f"medians of {costs.samples} interleaved samples): a verifier-only step "
        f"{costs.plain_ms:.1f} ms, a draft step {costs.draft_ms:.1f} ms."
    )


def measure_progress_text(done: int, total: int, elapsed_s: float) -> str:
    """The measurement's progress bar text: runs done and the time left at the pace so far."""
    left = elapsed_s / done * (total - done) if done else float("nan")
    eta = f", about {left:.0f} s left" if done else ""
    return f"Timing run {done} of {total}: {elapsed_s:.0f} s so far{eta}"
