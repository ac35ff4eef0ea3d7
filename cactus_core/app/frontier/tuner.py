"""The Frontier's tuner without Streamlit: what it tunes on (`TunerSource`: the shipped
reference, your sweep, an opened sweep file), what it shows now (`TunerView`, which the export
reads), the refinement's runs as a table and as a chart of measured emitted KL (with its 95%
interval) against the parameter, the budget, and where the answer sits in the parameter's
range."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from cactus_core.app.frontier.figures import rule_colour
from cactus_core.app.shared.settings import AppSettings, tunable_rules
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import SweepConfig
from cactus_core.experiments.sweeps.run import METRIC_LABELS, SweepResult
from cactus_core.experiments.tuning.k_tuner import PairCosts, row_speedup
from cactus_core.experiments.tuning.tune import DEFAULT_MAX_RUNS as DEFAULT_MAX_RUNS
from cactus_core.experiments.tuning.tune import (
    FirstGuess,
    TuneResult,
    TuneStep,
    first_guess,
    reference_tune,
    tune,
)
from cactus_core.maths.rules import rule_class

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair
    from cactus_core.experiments.sweeps.reference import Reference, ReferenceSweep

# on_step(step, runs done, at most): a refinement's progress, one call per finished run
OnStep = Callable[[TuneStep, int, int], None]

SOURCE_LABELS = {"run": "run now", "sweep": "your sweep", "reference": "reference"}


def step_rows(res: TuneResult, costs: PairCosts | None = None) -> list[dict[str, Any]]:
    """One row per measured point, runs numbered in order, the chosen one marked; with the
    pair's costs, each point's predicted speedup (`k_tuner.row_speedup`, what the Frontier and
    the k tuner show for the same setting). No cell is left empty: a point from before the
    runs reads "–" in the run column."""
    k = int(res.sampling.get("k", 0))
    rows, n = [], 0
    for s in res.steps:
        n += s.source == "run"
        row = {
            "run": str(n) if s.source == "run" else "–",
            "source": SOURCE_LABELS.get(s.source, s.source),
            res.param: s.value,
            "emitted KL": _cell(s.kl.mean, ".4f"),
            "95% interval": f"{s.kl.lo:.4f}–{s.kl.hi:.4f}",
            "fits": s.fits(res.kl_budget),
            "tokens/call": _cell(s.tokens_per_call.mean, ".2f"),
        }
        if costs is not None and k:
            speed = row_speedup(s.row(), costs, k)
            row["predicted speedup"] = "–" if speed is None else f"{speed:.2f}×"
        row["chosen"] = res.value is not None and s.value == res.value and s.source == "run"
        rows.append(row)
    return rows


def step_line(step: TuneStep, i: int, budget: float, param: str) -> str:
    """One run as a line of text for a progress caption."""
    verdict = "fits" if step.fits(budget) else "over the budget"
    return (
        f"Run {i}: {param} = {step.value:.4g} → emitted KL {step.kl.mean:.4f} "
        f"(95% interval {step.kl.lo:.4f}–{step.kl.hi:.4f}), {verdict}"
    )


def range_note(res: TuneResult) -> str | None:
    """Where the answer sits in the parameter's range, when that matters: at its top (the
    budget does not bind), or none at all."""
    spec = rule_class(res.rule).swept()
    if spec is None:
        return None
    if res.value is None:
        return f"No value of {spec.symbol} fitted: {res.message}"
    if res.value >= spec.ui[1]:
        return (
            f"At the edge: {spec.show(res.value)} is the top of the range the lab sweeps "
            f"({spec.ui[0]:g}–{spec.ui[1]:g}); larger values were not tried."
        )
    return None


def refinement_chart(res: TuneResult) -> go.Figure:
    """Measured emitted KL with its 95% interval against the parameter (log axis for a
    log-scale parameter), each point coloured by where it came from, and the budget."""
    spec = rule_class(res.rule).swept()
    log = bool(spec is not None and spec.log)
    fig = go.Figure()
    styles = {
        "reference": ("circle-open", "#888888"),
        "sweep": ("circle-open", "#888888"),
        "run": ("x", rule_colour(res.rule)),
    }
    for source, (symbol, colour) in styles.items():
        pts = [s for s in res.steps if s.source == source and (s.value > 0 or not log)]
        if not pts:
            continue
        fig.add_scatter(
            x=[s.value for s in pts],
            y=[_num(s.kl.mean) for s in pts],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [_num(s.kl.hi - s.kl.mean) for s in pts],
                "arrayminus": [_num(s.kl.mean - s.kl.lo) for s in pts],
            },
            mode="markers+text" if source == "run" else "markers",
            text=[str(i + 1) for i in range(len(pts))] if source == "run" else None,
            textposition="top right",
            name=SOURCE_LABELS[source],
            marker={"symbol": symbol, "size": 11, "color": colour},
            hovertemplate=f"{res.param} %{{x:.4g}}: KL %{{y:.4f}}<extra>{source}</extra>",
        )
    xs = [s.value for s in res.steps if s.value > 0 or not log]
    if xs:
        fig.add_scatter(
            x=[min(xs), max(xs)],
            y=[res.kl_budget] * 2,
            mode="lines",
            name="budget",
            line={"color": "#d62728", "dash": "dash"},
            hoverinfo="skip",
        )
    if res.value is not None and (res.value > 0 or not log):
        fig.add_vline(x=res.value, line={"color": "#2e7d32", "width": 2})
        # Its label by hand: a vline's own is placed at the value itself, which on a log axis
        # (whose positions are log10 of the value) lands far from the line.
        fig.add_annotation(
            x=math.log10(res.value) if log else res.value,
            y=1,
            yref="paper",
            yanchor="bottom",
            text=f"answer: {res.param} = {res.value:.4g}",
            showarrow=False,
            font={"color": "#2e7d32"},
        )
    fig.update_layout(
        height=340,
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        title=f"{res.rule}: emitted KL against {res.param}, with 95% intervals",
        xaxis={"title": {"text": res.param}, "type": "log" if log else "linear"},
        yaxis_title=METRIC_LABELS["emitted_kl"],
    )
    return fig


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _cell(x: float, fmt: str) -> str:
    return format(x, fmt) if math.isfinite(x) else "–"


@dataclass(frozen=True)
class TunerSource:
    """What the tuner tunes on. `identity` tells its answers apart (with the rule and budget);
    `refine` runs the refinement (None back: no pair to run it on now; no `refine`: a source
    that is only read, such as an opened sweep file); `guess` is the estimate before any run,
    where the source has a curve to read it from; `tasks` a sweep whose prompts get an answer
    on all of them and on each task's, read off its measured curve."""

    key: str  # the widgets' key prefix
    name: str  # in words, for the captions: "the reference" or "your sweep"
    rules: tuple[str, ...]  # the tunable rules with points in the source
    identity: tuple[Any, ...]
    refine: Callable[[str, float, OnStep], TuneResult | None] | None
    explain: str  # how the answer is found, under the controls
    guess: Callable[[str, float], FirstGuess] | None = None
    tasks: SweepResult | None = None
    pair: Callable[[], ModelPair | None] = lambda: None  # for the predicted speedups


@dataclass(frozen=True)
class TunerView:
    """What the tuner shows now: its rule, budget, first guess and refined answer."""

    source: str
    rule: str
    budget: float
    guess: FirstGuess | None
    result: TuneResult | None


def reference_source(
    s: AppSettings,
    ref: Reference,
    part: ReferenceSweep,
    get_pair: Callable[[AppSettings], ModelPair | None],
) -> TunerSource:
    """The shipped reference: a first guess at once from its curve; runs on its prompts, on the
    pair `get_pair` loads for the settings (None: none can be loaded now)."""

    def refine(rule: str, budget: float, on_step: OnStep) -> TuneResult | None:
        pair = get_pair(s)
        if pair is None:
            return None
        return reference_tune(pair, ref, part, rule, budget, SweepCache(), on_step=on_step)

    return TunerSource(
        "fr_ref",  # its own keys: on the run a sweep finishes, both tuners are drawn
        "the reference",
        tuple(r for r in tunable_rules() if part.rule_rows(r)),
        ("reference", part.top_p),
        refine,
        "An estimate, not yet a measurement: the reference's curve gives this first guess. "
        "Then each run measures one value on the "
        f"reference's {ref.provenance['prompts']} prompts, seeds and sampling, until a run's "
        "emitted KL fits the budget at the upper end of its 95% interval (at most "
        f"{DEFAULT_MAX_RUNS} runs, each cached on disk; a click stops it).",
        guess=lambda rule, budget: first_guess(part, rule, budget),
        pair=lambda: get_pair(s),
    )


def sweep_source(
    pair: ModelPair, config: SweepConfig, result: SweepResult, cache: SweepCache
) -> TunerSource:
    """Your own sweep: runs on its prompts, from its points; its tasks answered each."""

    def refine(rule: str, budget: float, on_step: OnStep) -> TuneResult | None:
        return tune(pair, config, budget, rule, result, cache, on_step=on_step)

    swept = {x.setting.rule for x in result.settings}
    return TunerSource(
        "fr",
        "your sweep",
        tuple(r for r in tunable_rules() if r in swept),
        ("sweep", pair.identity, config),
        refine,
        f"Runs on your sweep's {len(config.prompts)} prompts, starting from its points, until "
        "a run's emitted KL fits the budget at the upper end of its 95% interval (at most "
        f"{DEFAULT_MAX_RUNS} runs, each cached on disk; a click stops it).",
        tasks=result if config.task_names else None,
        pair=lambda: pair,
    )


def file_source(result: SweepResult) -> TunerSource:
    """An opened sweep file: read, never run (its prompts and pair may be elsewhere)."""
    swept = {x.setting.rule for x in result.settings}
    return TunerSource(
        "fr_file",
        "the sweep file",
        tuple(r for r in tunable_rules() if r in swept),
        ("file", result.model_identity, result.config),
        None,
        "Read off the file's measured curve, on all its prompts and on each task's (no run).",
        tasks=result,
    )


def rule_param(rule: str) -> str:
    spec = rule_class(rule).swept()
    return spec.name if spec is not None else ""
