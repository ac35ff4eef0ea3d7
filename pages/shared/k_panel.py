"""Per-position acceptance, the k tuner and the pair's costs on the pages: a finished run's
acceptance by draft position and the k it predicts best (Decode), predicted speedup against k
per rule and setting (Frontier), and the one control that measures the pair's costs, wherever a
prediction needs them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import streamlit as st

from cactus_core.app.shared.k_panel import (
    COSTS_NEEDED,
    MEASURE_LABEL,
    POSITION_HELP,
    PairCosts,
    cached_costs,
    costs_caption,
    counts_from_rounds,
    default_k_settings,
    k_chart,
    k_summary,
    measure_progress_text,
    measuring_now,
    position_chart,
    predict_k,
    predict_row,
    shared_costs,
)
from cactus_core.app.shared.speed import record_share
from cactus_core.engine.decoding.generation import PositionCounts
from cactus_core.engine.loading.deployment import deployment_policy
from cactus_core.maths.rules import DEFAULT_RULE, make_rule

if TYPE_CHECKING:
    from cactus_core.app.shared.request import DecodeRun
    from cactus_core.engine.loading.pair import ModelPair


def cost_panel(pair: ModelPair | None, key: str, again: bool = False) -> PairCosts | None:
    """The pair's measured costs on this machine, or, where none are cached yet, the button
    that measures them (with a progress bar) and None. again: also offer to measure again,
    except on a public server, whose visitors share one measurement and cannot replace it."""
    costs = cached_costs(pair) if pair is not None else None
    if costs is not None:
        st.caption(costs_caption(costs))
        offer = again and not deployment_policy().public
        label, icon = "Measure again", ":material/timer:"
        if pair is not None and offer and st.button(label, key=f"{key}_again", icon=icon):
            _measure(pair, refresh=True)
        return costs
    if pair is None:
        st.caption("Predicted speedups need the model pair's costs: load the pair first.")
        return None
    st.caption(COSTS_NEEDED)
    if st.button(MEASURE_LABEL, key=key, type="primary", icon=":material/timer:"):
        _measure(pair, refresh=False)
    return None


def _measure(pair: ModelPair, refresh: bool) -> None:
    busy = measuring_now()
    bar = st.progress(
        0.0,
        text="Waiting for the measurement another visitor started…" if busy else "Starting…",
    )
    start = time.perf_counter()

    def on_progress(done: int, total: int) -> None:
        text = measure_progress_text(done, total, time.perf_counter() - start)
        bar.progress(done / total, text=text)

    shared_costs(pair, refresh=refresh, on_progress=on_progress)
    bar.empty()
    st.rerun()


def run_positions(run: DecodeRun, pair: ModelPair | None) -> None:
    """A finished run's acceptance by position, and the best k its counts predict."""
    counts = run.output.stats.positions
    if not counts.rounds:
        return
    with st.expander("Acceptance by draft position, and the best k", expanded=False):
        st.plotly_chart(position_chart(counts), key="dec_positions")
        mal = counts.mean_acceptance_length
        st.caption(POSITION_HELP + f" Mean acceptance length here: {mal:.2f}.")
        costs = cost_panel(pair, "dec_measure_costs", again=True)
        if costs is None:
            return
        pred = predict_k(counts.conditional(), costs, reached=counts.reached)
        k = run.settings.k
        st.plotly_chart(k_chart({run.output.trace.meta["rule_label"]: pred}), key="dec_k_chart")
        tpc, speed = pred.at(pred.best_k)
        st.markdown(
            f"**Best k: {pred.best_k}** (predicted {speed:.2f}×, {tpc:.2f} tokens per call); "
            f"this run used k = {k} (predicted {pred.at(k)[1]:.2f}×). {pred.how()}"
        )


def run_prediction(run: DecodeRun, pair: ModelPair | None) -> str | None:
    """The k tuner's prediction for the run's setting, to read beside the race's measurement
    (None until the pair's costs are measured)."""
    costs = cached_costs(pair) if pair is not None else None
    counts = run.output.stats.positions
    if costs is None or not counts.rounds:
        return None
    speed = predict_k(counts.conditional(), costs, reached=counts.reached).at(run.settings.k)[1]
    return (
        f"Predicted for this run's acceptance at k = {run.settings.k} from the pair's measured "
        f"costs (the k tuner, the Frontier): {speed:.2f}×."
    )


def best_k_caption(run: DecodeRun | None, pair: ModelPair | None) -> None:
    """One line beside the sampling settings: the best k the last run's counts predict."""
    if run is None or pair is None or not run.output.stats.positions.rounds:
        return
    costs = cached_costs(pair)
    if costs is None:
        return
    counts = run.output.stats.positions
    pred = predict_k(counts.conditional(), costs, reached=counts.reached)
    st.caption(
        f"k tuner: best k = {pred.best_k} for the last run's rule and setting "
        f"(you have k = {run.settings.k}); see “Acceptance by draft position”."
    )


def record_caption(run: DecodeRun) -> None:
    """What the shown run's recording (trace rows, exact KL) cost it."""
    share = record_share(run.output.stats)
    if share is not None:
        st.caption(share.caption("the shown run"))


def frontier_k(rows: Sequence[dict[str, Any]], pair: ModelPair | None) -> None:
    """Predicted speedup against k for the settings picked, and a setting's positions."""
    st.subheader("Draft length k: predicted speedup per rule and setting")
    rows = [r for r in rows if r.get("acceptance_rate") is not None]
    if not rows:
        return
    labels = list(dict.fromkeys(r["label"] for r in rows))
    default = default_k_settings(rows, make_rule(DEFAULT_RULE).label)
    picked = st.multiselect("Settings", labels, default=default, key="fr_k_settings")
    costs = cost_panel(pair, "fr_measure_costs", again=True)
    if costs is not None:
        preds = {}
        for r in rows:
            if r["label"] in picked:
                pred = predict_row(r, costs)
                if pred is not None:
                    preds[r["label"]] = pred
        if preds:
            st.plotly_chart(k_chart(preds), key="fr_k_chart")
            st.caption(k_summary(preds))
    with_pos = [r for r in rows if r.get("position_reached")]
    if with_pos:
        pick = st.selectbox("Per-position acceptance of", [r["label"] for r in with_pos],
                            key="fr_pos_setting")  # fmt: skip
        r = next(x for x in with_pos if x["label"] == pick)
        counts = PositionCounts(tuple(r["position_reached"]), tuple(r["position_accepted"]),
                                int(r["position_reached"][0]))  # fmt: skip
        st.plotly_chart(position_chart(counts, f"{pick}: acceptance by position"),
                        key="fr_positions")  # fmt: skip
        st.caption(POSITION_HELP)


def rounds_positions(rounds: Sequence[Any]) -> None:
    """Step through's summary: acceptance by position over the rounds decoded so far."""
    counts = counts_from_rounds(rounds)
    if not counts.rounds:
        return
    with st.expander(f"Acceptance by draft position over {counts.rounds} rounds", expanded=False):
        st.plotly_chart(position_chart(counts), key="step_positions")
        st.caption(POSITION_HELP)
