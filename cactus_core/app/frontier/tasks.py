"""The Frontier page's per-task views, without Streamlit: one rule's frontier split by the
prompts' task tags, and the tuner's per-task answers as table rows."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from cactus_core.experiments.sweeps.run import METRIC_LABELS, SweepResult
from cactus_core.experiments.tuning.tasks import (
    ALL_TASKS,
    MIN_TASK_PROMPTS,
    BudgetAnswer,
    split_by_task,
    spread,
)
from cactus_core.experiments.tuning.tasks import answers_by_task as answers_by_task

# Distinct from the rules' palette: here a colour is a task, and every line is one rule.
TASK_PALETTE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d")


def task_frontier_chart(
    result: SweepResult, rule: str, metric: str = "tokens_per_call"
) -> go.Figure:
    """metric against emitted KL for one rule's settings, one line per task (and all prompts,
    dashed), with the 95% intervals over each task's prompts."""
    parts = {ALL_TASKS: result, **split_by_task(result)}
    fig = go.Figure(
        layout={
            "title": {"text": f"{rule}: {METRIC_LABELS[metric]} per task"},
            "xaxis": {"title": {"text": METRIC_LABELS["emitted_kl"]}},
            "yaxis": {"title": {"text": METRIC_LABELS[metric]}},
            "legend": {"orientation": "h", "y": -0.25},
        }
    )
    for n, (task, part) in enumerate(parts.items()):
        own = sorted((s for s in part.settings if s.setting.rule == rule),
                     key=lambda s: s.setting.value or 0.0)  # fmt: skip
        if not own:
            continue
        kl = [s.estimate("emitted_kl") for s in own]
        y = [s.estimate(metric) for s in own]
        dashed = task == ALL_TASKS
        fig.add_scatter(
            x=[e.mean for e in kl],
            y=[e.mean for e in y],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [e.hi - e.mean for e in y],
                "arrayminus": [e.mean - e.lo for e in y],
            },
            mode="lines+markers",
            name=f"{task} ({len(own[0].prompts)} prompts)",
            line={
                "dash": "dash" if dashed else "solid",
                "color": "#444444" if dashed else TASK_PALETTE[(n - 1) % len(TASK_PALETTE)],
            },
            text=[s.setting.label for s in own],
            hovertemplate="%{text}<br>KL %{x:.4f}<br>%{y:.3f}<extra>" + task + "</extra>",
        )
    return fig


def answer_rows(answers: list[BudgetAnswer]) -> list[dict[str, Any]]:
    """The tuner's answers as rows of a table, every cell filled: a task with too few prompts
    or that no setting fits says so, and each task's answer says whether it differs from the
    all-prompts answer."""
    rows = []
    for a in answers:
        if not a.enough:
            value = interval = "–"
            note = f"too few prompts for its own answer (needs {MIN_TASK_PROMPTS})"
        elif not a.fits:
            value, interval, note = "–", "none fits", "every swept value is over the budget"
        else:
            value, interval = f"{a.value:.4g}", f"{a.low:.4g} – {a.high:.4g}"
            note = {"": "", "higher": "higher than all prompts'", "lower": "lower than all "
                    "prompts'", "not distinguishable": "not distinguishable from all prompts'"
                    }[a.versus_all]  # fmt: skip
        rows.append(
            {
                "task": a.task,
                "prompts": a.prompts,
                a.param: value,
                "95% interval": interval,
                "tokens/call": f"{a.tokens_per_call:.2f}" if a.enough else "–",
                "against all prompts": note or "–",
            }
        )
    return rows


def tasks_caption(answers: list[BudgetAnswer]) -> str:
    """Under the per-task table: how the answers were read, and how far apart the tasks with
    an answer of their own are (or why none has one)."""
    out = (
        "Interpolated between the sweep's settings; the interval comes from each setting's 95% "
        "interval of emitted KL over the task's prompts (tokens per call kept ≥ 1). "
    )
    tasks = answers[1:]
    if not tasks:
        return out + "Tag prompts with a task to see the answer per task."
    answered = [a for a in tasks if a.answered]
    if len(answered) >= 2:
        gap = spread(answers)
        out += f"The {len(answered)} tasks' answers span {gap:.3g} in {answers[0].param}."
    elif not any(a.enough for a in tasks):
        out += (
            f"No task has the {MIN_TASK_PROMPTS} prompts an answer of its own needs: sweep "
            "more prompts of each task."
        )
    same = [a.task for a in answered if a.versus_all == "not distinguishable"]
    if same:
        out += (
            f" {', '.join(same)}: not distinguishable from the all-prompts answer at these "
            "prompt counts; use that one."
        )
    return out
