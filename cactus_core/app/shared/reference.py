"""What the pages show from the shipped reference sweep, without Streamlit: the Decode page's
compact frontier with its marker, a run's own estimated curve, and the Frontier page's answer
to "which setting keeps emitted KL ≤ X?" read off the reference's measured curve.

The marker sits on the rule's estimated curve
(`experiments.estimates.curves.from_own_runs`, from the
positions of the reference's own runs of that rule), which covers every parameter value; the
reference's measured points are drawn beside it, so the gap between the two is in view.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from cactus_core.app.shared.rule_style import LIMIT_COLOUR, rule_colour
from cactus_core.engine.loading.embedded_drafts import REFERENCE_EMBEDDED_DRAFT
from cactus_core.experiments.estimates.curves import (
    EstimatedCurve,
    estimable,
    estimate_frontier,
    rows_from_trace,
)
from cactus_core.experiments.sweeps.reference import Reference, ReferenceSweep, not_in_reference
from cactus_core.experiments.sweeps.reference import load_reference as load_reference
from cactus_core.maths.rules import LOSSLESS_RULE, RULES, rule_class
from cactus_core.maths.sampling import SamplingSettings

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import Trace

X_LABEL = "emitted KL per token (nats)"
RUN_COLOUR = "#111111"  # a run's own marks: black, a colour no rule has (rule_style)
Y_LABEL = "tokens per verifier call"


def pair_in_words(model: str) -> str:
    """A reference's pair identity ("verifier=NAME#hash|draft=NAME#hash|...|dtype=torch.X")
    as a sentence: the models by name, the weights' hashes left to the file."""
    fields = dict(part.partition("=")[::2] for part in model.split("|") if "=" in part)
    names = {key: value.split("#", 1)[0].split("@", 1)[0] for key, value in fields.items()}
    parts = []
    if "verifier" in names:
        parts.append(f"verifier {names['verifier']}")
    if "feature_draft" in names:
        parts.append(f"draft {names['feature_draft']}")
    elif "draft" in names:
        parts.append(f"draft {names['draft']}")
    dtype = fields.get("dtype", "").removeprefix("torch.")
    text = ", ".join(parts) or model
    return f"{text}, in {dtype}" if dtype else text


def reference_part(
    ref: Reference, sampling: SamplingSettings, same_pair: bool = True
) -> tuple[ReferenceSweep, str | None]:
    """The reference part for these settings (top-p 1 when theirs is not in it) and a note
    saying how the settings (and the pair, unless `same_pair`) differ from the reference's."""
    part = ref.for_top_p(sampling.top_p)
    notes = []
    if part is None:
        part = ref.for_top_p(1.0) or next(iter(ref.sweeps.values()))
    if not same_pair:
        notes.append(
            "The reference was measured on the embedded pair with the "
            f"{REFERENCE_EMBEDDED_DRAFT} on a CPU, not on the pair you picked, so read it as a "
            "guide."
        )
    if not ref.matches(sampling):
        p = ref.provenance
        notes.append(
            f"The reference was made at T = {p['temperature']:g}, k = {p['k']}, top-k "
            f"{p['top_k']}, top-p {part.top_p:g}; your sampling settings differ, so read it as "
            "a guide."
        )
    return part, " ".join(notes) or None


def swept_value(rule: str, params: Mapping[str, float | int]) -> float | None:
    spec = rule_class(rule).swept()
    return None if spec is None else float(params.get(spec.name, spec.default))


def marker(
    part: ReferenceSweep, rule: str, params: Mapping[str, float | int]
) -> tuple[float, float]:
    """(emitted KL per token, tokens per call) of this setting: on the rule's estimated curve,
    or, for a rule rows cannot estimate (`estimate.estimable`), between its measured points
    (their KL estimated from the decode), in the parameter's own scale."""
    value = swept_value(rule, params)
    if part.estimate is not None and rule in part.estimate.curves:
        curve = part.estimate.curves[rule]
        return curve.at(value, "kl_token"), curve.at(value, "tokens_per_call")
    rows = sorted(
        (r for r in part.rule_rows(rule) if _finite(r.get("value")) and _finite_point(r)),
        key=lambda r: float(r["value"]),
    )
    if value is None or not rows:
        return math.nan, math.nan
    spec = rule_class(rule).swept()
    axis = math.log if spec is not None and spec.log and value > 0 else (lambda v: v)
    xs = [float(r["value"]) for r in rows]
    j = bisect.bisect_right(xs, value)
    if j == 0 or j == len(rows) or (spec is not None and spec.log and xs[j - 1] <= 0):
        near = rows[0] if j == 0 else rows[-1] if j == len(rows) else rows[j - 1]
        return float(near["emitted_kl"]), float(near["tokens_per_call"])
    lo, hi = rows[j - 1], rows[j]
    w = (axis(value) - axis(xs[j - 1])) / (axis(xs[j]) - axis(xs[j - 1]))
    return tuple(  # type: ignore[return-value]
        (1 - w) * float(lo[f]) + w * float(hi[f]) for f in ("emitted_kl", "tokens_per_call")
    )


def run_curve(trace: Trace, rule: str, k: int, count: int = 50) -> EstimatedCurve:
    """The rule's curve estimated from a run's own recorded positions (top-M rows and tail);
    ValueError for a rule rows cannot estimate."""
    if not estimable(rule):
        raise ValueError(f"{rule}'s pi depends on more than one position's p and q")
    p, q = rows_from_trace(trace)
    return estimate_frontier(p, q, k, rules=[rule], count=count).curves[rule]


@dataclass(frozen=True)
class RunPoint:
    """A finished run's measured point."""

    kl: float
    tokens_per_call: float
    label: str


def compact_frontier(
    part: ReferenceSweep,
    rule: str,
    params: Mapping[str, float | int],
    run: RunPoint | None = None,
    own_curve: EstimatedCurve | None = None,
) -> go.Figure:
    """Tokens per call against emitted KL: the rule's reference points and estimated curve,
    sps, the limit, a marker at the current setting, and a run's point and own curve."""
    # The layout goes in with the figure: a later update_layout costs a deep copy of it.
    fig = go.Figure(
        layout={
            "height": 280,
            "margin": {"l": 55, "r": 10, "t": 30, "b": 40},
            # No legend: seven entries took more room than the plot. The page's caption names
            # each mark, and the hover names every point.
            "showlegend": False,
            "font": {"size": 11},
            "hoverlabel": {"font": {"size": 13}, "bgcolor": "#ffffff"},
            "xaxis": {"title": {"text": X_LABEL}},
            "yaxis": {"title": {"text": "tokens / verifier call"}},
            "title": {
                "text": f"where this setting sits (reference, top-p {part.top_p:g})",
                "font": {"size": 12},
            },
        }
    )
    est = part.estimate
    if est is not None:
        lim_x, lim_y = est.limit_points()
        fig.add_scatter(
            x=lim_x.tolist(),
            y=lim_y.tolist(),
            mode="lines",
            name="limit",
            line={"color": LIMIT_COLOUR, "dash": "dot", "width": 1.5},
            hovertemplate="limit: KL %{x:.3f}, %{y:.2f} tokens/call<extra></extra>",
        )
        if rule in est.curves:
            c = est.curves[rule]
            fig.add_scatter(
                x=c.kl_token.tolist(),
                y=c.tokens_per_call.tolist(),
                mode="lines",
                name=f"{rule} (estimated)",
                line={"color": rule_colour(rule)},
                hoverinfo="skip",
            )
    for name in dict.fromkeys([LOSSLESS_RULE, rule]):
        _add_points(fig, part.rule_rows(name), name)
    if own_curve is not None:
        fig.add_scatter(
            x=own_curve.kl_token.tolist(),
            y=own_curve.tokens_per_call.tolist(),
            mode="lines",
            name="this run's positions (estimated)",
            line={"color": RUN_COLOUR, "dash": "dash"},
            hoverinfo="skip",
        )
    if run is not None and math.isfinite(run.kl) and math.isfinite(run.tokens_per_call):
        fig.add_scatter(
            x=[run.kl],
            y=[run.tokens_per_call],
            mode="markers",
            name="this run",
            marker={"symbol": "x", "size": 12, "color": RUN_COLOUR},
            hovertemplate=f"{run.label}: KL %{{x:.3f}}, %{{y:.2f}}<extra></extra>",
        )
    x, y = marker(part, rule, params)
    if math.isfinite(x) and math.isfinite(y):
        fig.add_scatter(
            x=[x],
            y=[y],
            mode="markers",
            name="current setting",
            marker={"size": 15, "color": "rgba(0,0,0,0)", "line": {"color": "#111", "width": 2.5}},
            hovertemplate="current: KL %{x:.3f}, %{y:.2f} tokens/call<extra></extra>",
        )
    return fig


def missing_rules(part: ReferenceSweep) -> str | None:
    """The rules the reference has not measured yet, in one line; None when it has them all."""
    missing = [name for name in RULES if not part.has(name)]
    if not missing:
        return None
    return "; ".join(not_in_reference(name) for name in missing) + "."


def compact_caption(
    run_point: bool, own_curve: bool, rule: str | None = None, in_reference: bool = True
) -> str:
    """What each mark of `compact_frontier` is, said once under it (the chart has no legend)."""
    if rule is not None and not in_reference:
        return not_in_reference(rule) + ": its marks appear once it is in."
    parts = [
        "Circles: the reference sweep's measured settings (sps and this rule)",
        "line: the rule's curve estimated from their positions",
        "dotted: the limit, the most tokens per call any rule reaches at that KL",
        "ring: this setting",
    ]
    if rule is not None and not estimable(rule):
        parts[1:2] = [
            f"{rule} has no estimated curve: its pi depends on the whole round, so its circles "
            "are measured decodes with the KL estimated from them (docs/rules.md), and the ring "
            "sits between them",
            "such a rule can sit above the limit, which bounds rules that judge each position "
            "on its own p and q",
        ]
    if run_point:
        parts.append("×: your last run (shown while its rule is picked)")
    if own_curve:
        parts.append("dashed: this rule's curve on your last run's positions")
    return " · ".join(parts) + ". Hover a mark for its numbers."


def _add_points(fig: go.Figure, rows: Sequence[Mapping[str, Any]], rule: str) -> None:
    pts = sorted(
        (r for r in rows if _finite(r.get("emitted_kl")) and _finite(r.get("tokens_per_call"))),
        key=lambda r: r["emitted_kl"],
    )
    if not pts:
        return
    fig.add_scatter(
        x=[r["emitted_kl"] for r in pts],
        y=[r["tokens_per_call"] for r in pts],
        mode="markers",
        name=f"{rule} (measured)",
        marker={"color": rule_colour(rule), "size": 7, "symbol": "circle-open"},
        customdata=[[r["label"]] for r in pts],
        hovertemplate="%{customdata[0]}: KL %{x:.3f}, %{y:.2f} tokens/call<extra></extra>",
    )


def _finite(x: Any) -> bool:
    return x is not None and math.isfinite(float(x))


def _finite_point(r: Mapping[str, Any]) -> bool:
    return _finite(r.get("emitted_kl")) and _finite(r.get("tokens_per_call"))


def log_timing(name: str, ms: float) -> None:
    """Append a server-side timing to $CACTUS_LAB_TIMING_LOG (one JSON line), if it is set: how
    the browser tests and benchmarks read what a redraw cost on the server."""
    import json
    import os

    path = os.environ.get("CACTUS_LAB_TIMING_LOG")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"name": name, "ms": ms}) + "\n")
