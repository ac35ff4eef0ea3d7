"""The Decode page's race: speculative and verifier-only decoding of the run's prompt streamed
together on one time axis, then the measured and modelled speedups. Widgets and layout only;
the lanes and the figure come from cactus_core.app.race."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from cactus_core.app.metrics import METRIC_HELP, modelled_speedup
from cactus_core.app.race import Lane, Race, race_figure
from pages import _k_tuner

if TYPE_CHECKING:
    from cactus_core.app.decode_view import DecodeRun
    from cactus_core.engine.loading.pair import ModelPair

REDRAW_S = 0.25  # how often the live race redraws: often enough to watch, rarely enough to race
HOW_TIMED = (
    "Both decoders run the same prompt, settings and seed on this server, taking turns one "
    "round at a time in one thread: whichever is behind on its own clock goes next. Each "
    "clock counts only its own decoder's work (its prefill, then its rounds), never the other's "
    "or the page's drawing, so both see the same machine load. Each point is a round, placed "
    "when its tokens were written."
)


def run_race(pair: ModelPair, run: DecodeRun, slot: DeltaGenerator) -> str | None:
    """Race the run's request live in `slot`; the error to show instead, if any."""
    try:
        race = Race.start(pair, run.request, run.trace.meta["rule_label"])
    except ValueError as err:
        return f"Could not decode: {err}"
    with slot.container():
        st.subheader("Race: speculative against verifier-only")
        st.caption(HOW_TIMED)
        chart = st.empty()
        cols = st.columns(2)
        texts = [col.empty() for col in cols]
    shown, draws = 0.0, 0
    while race.step():
        if time.perf_counter() - shown >= REDRAW_S:
            draws += 1
            _draw(race, chart, texts, key=f"dec_race_live_{draws}")
            shown = time.perf_counter()
    run.race = race
    run.comparison = race.comparison()
    return None


def _draw(race: Race, chart: DeltaGenerator, texts: list[DeltaGenerator], key: str) -> None:
    chart.plotly_chart(race_figure(race.lanes), key=key)
    for slot, lane in zip(texts, race.lanes, strict=True):
        with slot.container(border=True):
            _lane_text(lane)


def _lane_text(lane: Lane) -> None:
    state = "done" if lane.done else "running"
    rate = lane.tokens / lane.clock if lane.clock > 0 else 0.0
    st.markdown(f"**{lane.label}** · {lane.tokens} tokens in {lane.clock:.2f} s ({state})")
    st.caption(f"{rate:.1f} tokens/s · {len(lane.rounds)} verifier calls")
    st.text(lane.text or "…")


def race_section(run: DecodeRun) -> None:
    """The finished race (if any) and the speedups, measured and modelled."""
    race: Race | None = run.race
    if race is None:
        st.subheader("Speed")
        st.caption(
            "Press “Race against verifier-only” to decode the prompt both ways on this server "
            "and watch them side by side."
        )
    else:
        st.subheader("Race: speculative against verifier-only")
        st.caption(HOW_TIMED)
        chart = st.empty()
        texts = [col.empty() for col in st.columns(2)]
        _draw(race, chart, texts, key="dec_race_chart")
    speed(run)


@st.fragment
def speed(run: DecodeRun) -> None:
    """Measured and modelled speedup; c redraws this part alone."""
    c_value = st.number_input(
        "c: the cost of one draft step relative to one verifier step (for the model)",
        min_value=0.0,
        max_value=2.0,
        value=0.05,
        step=0.01,
        format="%.3f",
        key="dec_c",
        help="0.02–0.1 is typical for a draft 10–50× smaller than the verifier on a GPU.",
    )
    modelled = modelled_speedup(run.output.stats.tokens_per_call, run.settings.k, c_value)
    m1, m2 = st.columns(2)
    m1.metric(
        "modelled speedup (not measured)", f"{modelled:.2f}×", help=METRIC_HELP["modelled speedup"]
    )
    cmp = run.comparison
    if cmp is None:
        m2.metric("measured speedup", "–", help=METRIC_HELP["speedup"])
        _k_tuner.speed_parts(run, c_value)
        return
    m2.metric("measured speedup", f"{cmp.speedup:.2f}×", help=METRIC_HELP["speedup"])
    (st.warning if cmp.speedup < 1 else st.success)(cmp.verdict())
    st.caption(
        f"Measured c on this machine: {cmp.c_measured:.3f} (draft forward ÷ verifier forward). "
        f"The model with it: {cmp.modelled_with_measured_c:.2f}×. The model counts forward "
        "passes only; the race also pays for everything else a round does."
    )
    _k_tuner.speed_parts(run, c_value)
    with st.popover("Metric definitions"):
        for name, text in METRIC_HELP.items():
            st.markdown(f"**{name}**: {text}")
