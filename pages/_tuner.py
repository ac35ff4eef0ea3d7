"""The Frontier page's tuner: the answer to "which setting keeps emitted KL ≤ X", refined by
runs until a run's measured KL fits the budget at the upper end of its 95% interval. Each run
shows as it finishes; any click (the Cancel button) stops the refinement, and the runs done so
far stay cached on disk, so asking again resumes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import streamlit as st

from cactus_core.app.links import decode_setting_query
from cactus_core.app.settings import AppSettings, build_rule, tunable_rules
from cactus_core.app.tuner_view import range_note, refinement_chart, step_line, step_rows
from cactus_core.experiments.k_tuner import cached_costs
from cactus_core.experiments.speedup import PREDICTED_HELP
from cactus_core.experiments.sweep_cache import SweepCache
from cactus_core.experiments.tune import (
    DEFAULT_MAX_RUNS,
    TuneResult,
    TuneStep,
    first_guess,
    reference_tune,
)
from cactus_core.maths.rules import rule_class
from pages._common import get_pair

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair
    from cactus_core.experiments.reference import Reference, ReferenceSweep

REF_TUNED_KEY = "fr_ref_tuned"  # (rule, budget, top-p, TuneResult)
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
        setting = build_rule(res.rule, {res.param: res.value})
        st.page_link(
            "pages/decode.py",
            label=f"Use {setting.label} on Decode",
            icon=":material/arrow_outward:",
            query_params=decode_setting_query(res.rule, {res.param: res.value}),
        )
        st.markdown("CLI flags (`python -m cactus_core generate`):")
        st.code(res.cli_flags(), language="bash")
    st.download_button(
        "Tuned setting as JSON", res.to_json(), "tuned.json", "application/json", key=f"{key}_dl"
    )


def run_with_progress(
    call: Callable[[Callable[[TuneStep, int, int], None]], TuneResult], budget: float, param: str
) -> TuneResult:
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


@st.fragment
def reference_tuner(s: AppSettings, ref: Reference, part: ReferenceSweep) -> None:
    """The tuner on the reference's prompts: the estimate's first guess, then runs."""
    st.subheader("Tuner: the parameter that meets a KL budget")
    names = [r for r in tunable_rules() if part.rule_rows(r)]
    t1, t2, t3, t4 = st.columns([1, 1, 1, 1])
    rule = t1.selectbox("Rule", names, key="fr_ref_rule")
    budget = t2.number_input(
        "Emitted KL budget (nats per token)", 0.0, 10.0, 0.05, 0.005, format="%.4f",
        key="fr_ref_budget",
    )  # fmt: skip
    go = t3.button("Find it (runs)", icon=":material/target:", key="fr_ref_confirm")
    t4.button("Cancel", icon=":material/stop:", key="fr_ref_cancel")
    try:
        guess = first_guess(part, rule, budget)
    except ValueError as err:
        st.error(str(err))
        return
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
    st.caption(
        "An estimate, not yet a measurement: the reference's curve gives this first guess. "
        "Then each run measures one value on the "
        f"reference's {ref.provenance['prompts']} prompts, seeds and sampling, until a run's "
        "emitted KL fits the budget at the upper end of its 95% interval (at most "
        f"{DEFAULT_MAX_RUNS} runs, each cached on disk; a click stops it)."
    )
    key = (rule, budget, part.top_p)
    if go:
        pair = get_pair(s)
        if pair is None:
            return

        def call(on_step: Callable[[TuneStep, int, int], None]) -> TuneResult:
            return reference_tune(pair, ref, part, rule, budget, SweepCache(), on_step=on_step)

        try:
            st.session_state[REF_TUNED_KEY] = (
                *key,
                run_with_progress(call, budget, rule_param(rule)),
            )
        except ValueError as err:
            st.error(str(err))
            return
    done = st.session_state.get(REF_TUNED_KEY)
    if done is not None and tuple(done[:3]) == key:
        show_result(done[3], "fr_ref_tune", get_pair(s))


def rule_param(rule: str) -> str:
    spec = rule_class(rule).swept()
    return spec.name if spec is not None else ""
