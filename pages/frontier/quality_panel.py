"""The Frontier's quality views: the task score (paired against lossless, or as a share), the
long answers' loops, end tokens, distinct 4-grams and length against divergence, and the tuner
that keeps quality, on the shipped quality reference and on the user's own sweep. Layout only:
the texts come from cactus_core.app.frontier.quality, the charts from its figures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
import streamlit as st

from cactus_core.app.frontier import figures as ff
from cactus_core.app.frontier.quality import (
    DEFAULT_MAX_DROP,
    LONG_CAPTION,
    LONG_VIEWS,
    TASK_VIEWS,
    QualityAnswer,
    SweepResult,
    candidate_rows,
    confirm,
    load_quality_reference,
    onset_sentence,
    quality_answer,
    task_caption,
)

if TYPE_CHECKING:
    from cactus_core.app.frontier.sweep_view import SweepCache
    from cactus_core.engine.loading.pair import ModelPair

Chart = Callable[[go.Figure, str], None]  # the page's clickable chart


def _plain(fig: go.Figure, key: str) -> None:
    st.plotly_chart(fig, key=key)


def task_scores(
    rows: list[dict[str, Any]], selected: str | None, chart: Chart, key: str, prefix: str = "fr"
) -> None:
    view = st.radio(
        "Task score", list(TASK_VIEWS), format_func=TASK_VIEWS.get, horizontal=True,
        key=f"{prefix}_task_view",
    )  # fmt: skip
    chart(ff.frontier_chart(rows, "tokens_per_call", view, front=False, selected=selected), key)
    st.caption(task_caption(rows, view))


def long_answers(
    rows: list[dict[str, Any]], selected: str | None, chart: Chart, key: str, prefix: str = "fr"
) -> None:
    """How answers end: at the end token, or in a loop that runs to the budget."""
    view = st.radio(
        "Answers", list(LONG_VIEWS), format_func=LONG_VIEWS.get, horizontal=True,
        key=f"{prefix}_long_view",
    )  # fmt: skip
    chart(ff.frontier_chart(rows, view, front=False, selected=selected), key)
    st.caption(LONG_CAPTION)


def keep_quality(prefix: str, answer_for: Callable[[float, float], QualityAnswer]) -> None:
    """The tuner that keeps quality: answer_for(budget, drop) answers "which setting keeps
    emitted KL ≤ budget, with answers not detectably worse and no more loops?" (on the
    reference, or on the user's sweep with its held-out confirmation)."""
    c1, c2 = st.columns(2)
    budget = c1.number_input(
        "Emitted KL ≤ (nats per token)", 0.0, 10.0, 0.5, 0.05, format="%.3f",
        key=f"{prefix}_q_budget",
    )  # fmt: skip
    drop = c2.number_input(
        "Drop in task score worth catching", 0.01, 0.5, DEFAULT_MAX_DROP, 0.01,
        key=f"{prefix}_q_drop",
        help="The answer says when the prompts cannot detect a drop this small.",
    )  # fmt: skip
    answer = answer_for(float(budget), float(drop))
    with st.container(key=f"{prefix}_q_answer"):
        (st.success if answer.confirmed is not False else st.warning)(answer.message())
    st.dataframe(candidate_rows(answer), hide_index=True, key=f"{prefix}_q_table")


def reference() -> None:
    """The shipped quality reference: there at once, no model needed."""
    try:
        ref = load_quality_reference()
    except ValueError as err:
        st.info(f"No quality reference is shipped here: {err}")
        return
    st.subheader("Do the answers get worse? (quality reference)")
    st.caption(ref.caption())
    st.caption("Where it starts, per rule: " + onset_sentence(ref))
    tabs = st.tabs(["keep quality", "task score", "long answers"])
    with tabs[0]:
        keep_quality("fr_qref", ref.answer)  # confirmed by the shipped held-out sweep
    with tabs[1]:
        task_scores(ref.rows("tune"), None, _plain, "fr_qref_task", prefix="fr_qref")
    with tabs[2]:
        long_answers(ref.rows("long"), None, _plain, "fr_qref_long", prefix="fr_qref")


def own_answer(
    pair: ModelPair, result: SweepResult, cache: SweepCache, heldout: tuple[list[str], ...] | None
) -> Callable[[float, float], QualityAnswer]:
    """The user's sweep's answer, and its confirmation: a run of the answer and sps on the task
    set's held-out split, on a click (it decodes), remembered per sweep and setting; heldout
    None (the sweep's prompts are not the task set's tuning split) says how to confirm
    instead."""
    key = "fr_own_q_confirmed"

    def run(budget: float, drop: float) -> QualityAnswer:
        answer = quality_answer(result, budget, drop)
        if answer.chosen is None or answer.chosen.setting.rule == "sps":
            return answer
        if heldout is None:
            st.caption(
                "Held-out confirmation: sweep the built-in task set to confirm here, or run "
                "`python -m cactus_core sweep ... --tune-kl X --keep-quality --confirm-on FILE`."
            )
            return answer
        memo = (result.config, answer.chosen.setting.id)
        done = st.session_state.get(key)
        if done is not None and done[0] == memo:
            return replace(answer, **done[1])
        if not st.button("Confirm on the held-out split (runs)", key="fr_own_q_run"):
            return answer
        bar = st.progress(0.0, text="decoding the held-out split")
        try:
            out = confirm(pair, answer, result.config, heldout, cache,
                          on_progress=lambda p: bar.progress(p.fraction))  # fmt: skip
        finally:
            bar.empty()
        fields = {f: getattr(out, f) for f in ("confirmation", "heldout_prompts", "heldout_kl")}
        st.session_state[key] = (memo, fields)
        return out

    return run
