"""The Decode page's replay, in divergence: the emitted KL of the run and of its replay, as
cards and per round (cactus_core/app/decode/replay.py computes them)."""

from __future__ import annotations

import streamlit as st

from cactus_core.app.decode.replay import ReplayKL, replay_kl, replay_kl_figure
from cactus_core.app.shared.request import DecodeRun
from cactus_core.maths.rules import make_rule

CACHE_KEY = "dec_replay_kl"  # (the Replay it was computed for, its ReplayKL)


def _kl(run: DecodeRun) -> ReplayKL | None:
    cached = st.session_state.get(CACHE_KEY)
    if cached is not None and cached[0] is run.replay:
        return cached[1]
    data = replay_kl(run.trace, run.replay)
    st.session_state[CACHE_KEY] = (run.replay, data)
    return data


def kl_section(run: DecodeRun) -> None:
    """Below the replay's cards: what it costs in KL, beside what the run cost."""
    data = _kl(run)
    if data is None or not data.rounds:
        return
    for col, (label, value, change) in zip(st.columns(2), data.cards(), strict=True):
        col.metric(label, value, change, delta_color="inverse")
    replay_label = make_rule(run.replay.rule, **run.replay.rule_params).label
    run_label = run.request.rule.label
    st.plotly_chart(replay_kl_figure(data, run_label, replay_label), key="dec_replay_kl_fig")
    if not data.exact:
        st.caption(
            "The replay's KL is computed from the rows the trace keeps (the top tokens of p "
            "and q, the rest spread evenly), so it is approximate; the run's is exact."
        )
