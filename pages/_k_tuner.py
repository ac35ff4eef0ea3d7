"""Per-position acceptance and the k tuner on the pages: a finished run's acceptance by draft
position and the k it predicts best (Decode), and predicted speedup against k per rule and
setting (Frontier). The costs come from the pair's cache; measuring them takes one click."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import streamlit as st

from cactus_core.app.k_view import POSITION_HELP, counts_from_rounds, k_chart, position_chart
from cactus_core.app.speed_view import cost_parts, explanation, parts_chart, record_share
from cactus_core.engine.decoding.generation import PositionCounts
from cactus_core.experiments.k_tuner import (
    KPrediction,
    cached_costs,
    cached_costs_for,
    pair_costs,
    predict_k,
)

if TYPE_CHECKING:
    from cactus_core.app.decode_view import DecodeRun
    from cactus_core.engine.loading.pair import ModelPair


def measure_button(pair: ModelPair | None, key: str) -> None:
    if pair is None:
        st.caption("The pair's costs are not measured on this machine yet.")
        return
    if st.button("Measure the pair's costs (v(1..13), the draft; about a minute)", key=key):
        with st.spinner("Timing the verifier at 1..13 tokens and short runs, interleaved…"):
            pair_costs(pair, refresh=True)
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
        costs = cached_costs(pair) if pair is not None else None
        if costs is None:
            measure_button(pair, "dec_measure_costs")
            return
        pred = predict_k(counts.conditional(), costs, reached=counts.reached)
        k = run.settings.k
        st.plotly_chart(k_chart({run.output.trace.meta["rule_label"]: pred}), key="dec_k_chart")
        tpc, speed = pred.at(pred.best_k)
        st.markdown(
            f"**Best k: {pred.best_k}** (predicted {speed:.2f}×, {tpc:.2f} tokens per call); "
            f"this run used k = {k} (predicted {pred.at(k)[1]:.2f}×). {pred.how()}"
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


def speed_parts(run: DecodeRun, c: float) -> None:
    """Inside the speed section: the recording's own cost and the cost's parts."""
    cmp = run.comparison
    raced = cmp is not None and cmp.spec_stats is not None
    share = record_share(cmp.spec_stats if raced else run.output.stats)
    if share is not None:
        st.caption(share.caption("the race's speculative run" if raced else "the shown run"))
    parts = None if cmp is None else cost_parts(cmp, c)
    if parts is None:
        return
    st.plotly_chart(parts_chart(parts), key="dec_cost_parts")
    st.caption(explanation(parts, cmp.speedup))


def row_prediction(row: dict[str, Any], costs: Any) -> KPrediction | None:
    """A sweep or reference row's k prediction: from its per-position rates when it has
    them, else from its pooled acceptance (every k then extrapolated)."""
    rates = row.get("acceptance_by_position")
    if rates and rates[0] is not None:
        return predict_k(rates, costs, reached=row.get("position_reached"))
    acc = row.get("acceptance_rate")
    if acc is None:
        return None
    return predict_k([acc], costs, pooled=True)


def frontier_k(rows: Sequence[dict[str, Any]], identity: str, pair: ModelPair | None) -> None:
    """Predicted speedup against k for the settings picked, and a setting's positions."""
    st.subheader("Draft length k: predicted speedup per rule and setting")
    costs = cached_costs_for(identity, "cpu")
    if costs is None and pair is not None:
        costs = cached_costs(pair)
    rows = [r for r in rows if r.get("acceptance_rate") is not None]
    if not rows:
        return
    labels = [r["label"] for r in rows]
    default = list(
        dict.fromkeys(labels[i] for i in range(0, len(labels), max(1, len(labels) // 3)))
    )
    picked = st.multiselect("Settings", labels, default=default[:3], key="fr_k_settings")
    if costs is None:
        measure_button(pair, "fr_measure_costs")
        return
    preds = {}
    for r in rows:
        if r["label"] in picked:
            pred = row_prediction(r, costs)
            if pred is not None:
                preds[r["label"]] = pred
    if preds:
        st.plotly_chart(k_chart(preds), key="fr_k_chart")
        st.caption(" ".join(f"{label}: best k {p.best_k}; {p.how()}" for label, p in preds.items()))
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
