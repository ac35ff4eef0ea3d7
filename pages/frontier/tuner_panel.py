"""The Frontier page's tuner, one fragment fed by a source (`TunerSource`: the shipped reference
or your own sweep): the answer to "which setting keeps emitted KL ≤ X", a first guess from the
reference's estimated curve where there is one, refined by runs until a run's measured KL fits
the budget at the upper end of its 95% interval, and, for a sweep with tasks, the same rule and
budget answered per task. Each run shows as it finishes; any click (the Cancel button) stops
the refinement, and the runs done so far stay cached on disk, so asking again resumes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import streamlit as st

from cactus_core.app.frontier.tasks import (
    answer_rows,
    answers_by_task,
    task_frontier_chart,
    tasks_caption,
)
from cactus_core.app.frontier.tuner import (
    DEFAULT_MAX_RUNS,
    FirstGuess,
    OnStep,
    TuneResult,
    TunerSource,
    TunerView,
    TuneStep,
    range_note,
    refinement_chart,
    rule_param,
    step_line,
    step_rows,
)
from cactus_core.app.shared.k_panel import cached_costs
from cactus_core.app.shared.links import decode_setting_query
from cactus_core.app.shared.metrics import PREDICTED_HELP
from cactus_core.app.shared.settings import tunable_rules
from pages.shared.page_links import linked_fragment

if TYPE_CHECKING:
    from cactus_core.app.frontier.sweep_view import SweepResult
    from cactus_core.engine.loading.pair import ModelPair

TUNED_KEY = "fr_tuned"  # (the answer's key: the source's identity, rule, budget; TuneResult)
# Draws "Use this setting" for what the tuner shows now (None: nothing to export yet). It is
# drawn inside the tuner's fragment, so a run of "Find it" or a new budget redraws the export
# with it: the export never shows another setting than the tuner's answer.
Export = Callable[["TunerView | None"], None]
STATUS_BOX = {"met": "success", "edge": "info", "runs": "warning", "cancelled": "warning"}


def show_result(res: TuneResult, key: str, pair: ModelPair | None = None) -> None:
    """The answer, its status in words, the runs as a table and a chart, and the exports."""
    box = getattr(st, STATUS_BOX.get(res.status, "error"))
    box(res.message)
    note = range_note(res)
    if note and res.status != "cannot":
        st.caption(note)
    if res.value is not None:
        m1, m2, m3 = st.columns(3)
        m1.metric(res.param, f"{res.value:.4g}")
        kl = res.measured_kl
        m2.metric(
            "measured emitted KL",
            f"{kl.mean:.4f}",
            help=f"95% interval over prompts {kl.lo:.4f} – {kl.hi:.4f}",
        )
        m3.metric("tokens per call", f"{res.tokens_per_call.mean:.2f}")
    st.plotly_chart(refinement_chart(res), key=f"{key}_chart")
    costs = cached_costs(pair) if pair is not None else None
    st.dataframe(step_rows(res, costs), hide_index=True, key=f"{key}_steps")
    if costs is not None:
        st.caption("Predicted speedup: " + PREDICTED_HELP)
    if res.value is not None:
        setting = res.answer()  # the one value the link, the flags and the export name
        st.page_link(
            "pages/decode.py",
            label=f"Use {setting.label} on Decode",
            icon=":material/arrow_outward:",
            query_params=decode_setting_query(res.rule, setting.params),
        )
        st.markdown("CLI flags (`python -m cactus_core generate`):")
        st.code(res.cli_flags(), language="bash")
    st.download_button(
        "Tuned setting as JSON", res.to_json(), "tuned.json", "application/json", key=f"{key}_dl"
    )


def run_with_progress(
    call: Callable[[OnStep], TuneResult | None], budget: float, param: str
) -> TuneResult | None:
    """call(on_step) with a progress bar and one line per finished run."""
    bar = st.progress(0.0, text=f"Refining: run 1 of at most {DEFAULT_MAX_RUNS}…")
    lines = st.empty()
    done: list[str] = []

    def on_step(step: TuneStep, i: int, total: int) -> None:
        done.append(step_line(step, i, budget, param))
        bar.progress(min(i / total, 1.0), text=f"Refining: run {i + 1} of at most {total}…")
        lines.caption("  \n".join(done))

    res = call(on_step)
    bar.empty()
    lines.empty()
    return res


@linked_fragment
def tuner(source: TunerSource, export: Export | None = None) -> None:
    """The tuner on `source`: one rule picker and one budget for the guess, the runs, the
    export of its answer (`export`) and the per-task answers; tuning redraws this part alone."""
    st.subheader("Tuner: the parameter that meets a KL budget")
    export = export or (lambda view: None)
    if not source.rules:
        st.info(f"Sweep one of {', '.join(tunable_rules())} to tune its parameter.")
        export(None)
        return
    rule_key = f"{source.key}_tune_rule"
    if st.session_state.get(rule_key) not in source.rules:
        st.session_state.pop(rule_key, None)  # a rule only the other source had
    t1, t2, t3, t4 = st.columns([1, 1, 1, 1])
    rule = t1.selectbox("Rule", source.rules, key=rule_key, help=f"Tuned on {source.name}.")
    budget_key = f"{source.key}_budget"
    st.session_state.setdefault(budget_key, 0.05)  # a link may have set it first
    budget = t2.number_input(
        "Emitted KL budget (nats per token)",
        0.0,
        10.0,
        step=0.005,
        format="%.4f",
        key=budget_key,
    )
    go = False
    if source.refine is not None:
        go = t3.button("Find it (runs)", icon=":material/target:", key=f"{source.key}_tune")
        if go:  # any click stops the runs; the button says so while they run
            t4.button("Cancel", icon=":material/stop:", key=f"{source.key}_tune_cancel")
    guess = _guess(source, rule, budget)
    if source.guess is not None and guess is None:
        export(None)
        return
    st.caption(source.explain)
    if source.refine is None:
        if source.tasks is not None:
            task_answers(source.tasks, rule, budget, source.key)
        return
    refine = source.refine
    key = (*source.identity, rule, budget)
    if go:
        try:
            res = run_with_progress(
                lambda on_step: refine(rule, budget, on_step), budget, rule_param(rule)
            )
        except ValueError as err:
            st.error(str(err))
            res = None
        if res is not None:
            st.session_state[TUNED_KEY] = (key, res)
    done = st.session_state.get(TUNED_KEY)
    result = done[1] if done is not None and done[0] == key else None
    if result is not None:
        show_result(result, f"{source.key}_tune", source.pair())
    export(TunerView(source.name, rule, budget, guess, result))
    if source.tasks is not None:
        st.markdown("##### Per task")
        task_answers(source.tasks, rule, budget, source.key)


def _guess(source: TunerSource, rule: str, budget: float) -> FirstGuess | None:
    """The source's first guess, shown as three numbers; None (with the reason) without one."""
    if source.guess is None:
        return None
    try:
        guess = source.guess(rule, budget)
    except ValueError as err:
        st.error(str(err))
        return None
    m1, m2, m3 = st.columns(3)
    m1.metric(guess.param, f"{guess.value:.4g}", help="The first guess, before any run.")
    m2.metric(
        "estimated emitted KL", f"{guess.kl:.4f}", help=f"From the reference's {guess.source}."
    )
    m3.metric("estimated tokens per call", f"{guess.tokens_per_call:.2f}")
    if guess.at_top:
        st.caption(
            f"At the edge: by the estimate the whole range of {guess.param} fits this budget, "
            f"so the answer is the top of the range ({guess.value:g}); larger values were not "
            "measured."
        )
    return guess


def task_answers(result: SweepResult, rule: str, budget: float, key: str) -> None:
    """The same question on all prompts and on each task's, with intervals, read off the
    sweep's measured curve (no run)."""
    try:
        answers = answers_by_task(result, rule, budget)
    except ValueError as err:
        st.error(str(err))
        return
    st.dataframe(answer_rows(answers), hide_index=True, key=f"{key}_task_table")
    st.caption(tasks_caption(answers))
    if len(answers) > 1:
        st.plotly_chart(task_frontier_chart(result, rule), key=f"{key}_task_chart")
