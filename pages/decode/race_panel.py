"""The Decode page's race: speculative and verifier-only decoding of the run's prompt streamed
together on one time axis, then the measured speedup with its spread. Widgets and layout only;
the lanes and the figure come from cactus_core.app.decode.race, the definition from
cactus_core.experiments.estimates.speedup."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from cactus_core.app.decode.race import Lane, Race, race_figure
from cactus_core.app.shared.metrics import METRIC_HELP
from cactus_core.app.shared.speed import cost_parts, explanation, parts_chart
from pages.shared import k_panel

if TYPE_CHECKING:
    from cactus_core.app.shared.request import DecodeRun
    from cactus_core.engine.loading.pair import ModelPair

REDRAW_S = 0.25  # how often the live race redraws: often enough to watch, rarely enough to race
HOW_TIMED = (
    "Both decoders run the same prompt, settings and seed on this server. First each runs once "
    "on the prompt, untimed, so one-time work (kernels for these shapes, caches made on first "
    "use) stays outside the clocks. Then they take turns one round at a time in one thread, "
    "whichever has written fewer tokens going next, so both are at the same point of their "
    "texts at the same moment and a change in the machine's load lands on both. Each clock "
    "counts only its own decoder's work, never the other's or the page's drawing; neither "
    "records the lab's trace. Each point is a round, placed when its tokens were written, "
    "both lanes from the end of their first round (which holds the prompt's prefill). The "
    "speedup compares the same tokens, the dotted line: the verifier-only lane's time for them "
    "÷ the speculative lane's. Tokens a lane wrote after the other had stopped ran alone on "
    "the clock and are left out."
)


def run_race(pair: ModelPair, run: DecodeRun, slot: DeltaGenerator) -> str | None:
    """Race the run's request live in `slot`; the error to show instead, if any."""
    with slot.container():
        st.subheader("Race: speculative against verifier-only")
        st.caption(HOW_TIMED)
        try:
            with st.spinner("Warming up both decoders on the prompt (untimed)…"):
                race = Race.start(pair, run.request, run.trace.meta["rule_label"])
        except ValueError as err:
            return f"Could not decode: {err}"
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
    work = race.equal_work() if race.done else None
    chart.plotly_chart(race_figure(race.lanes, work), key=key)
    for slot, lane in zip(texts, race.lanes, strict=True):
        with slot.container(border=True):
            _lane_text(lane)


def _lane_text(lane: Lane) -> None:
    state = "done" if lane.done else "running"
    st.markdown(f"**{lane.label}** · {lane.tokens} tokens in {lane.clock:.2f} s ({state})")
    st.caption(f"{len(lane.rounds)} verifier calls · its own clock, the prefill included")
    st.text(lane.text or "…")


def race_section(run: DecodeRun, pair: ModelPair | None) -> None:
    """The finished race (if any) and its measured speedup."""
    race: Race | None = run.race
    if race is None:
        st.subheader("Speed")
        st.caption(
            "Press “Race against verifier-only” to decode the prompt both ways on this server, "
            "watch them side by side, and measure the speedup."
        )
        k_panel.record_caption(run)
        return
    st.subheader("Race: speculative against verifier-only")
    chart = st.empty()
    verdict = st.container()  # under the chart, above the lanes' texts: in view with it
    texts = [col.empty() for col in st.columns(2)]
    _draw(race, chart, texts, key="dec_race_chart")
    with verdict:
        speed(run, race, pair)


def speed(run: DecodeRun, race: Race, pair: ModelPair | None) -> None:
    """The measured speedup, its verdict and spread, the k tuner's prediction beside it, and
    how the race was run."""
    cmp = run.comparison
    if cmp is None:
        return
    m1, m2 = st.columns([1, 3])
    m1.metric("measured speedup", f"{cmp.speedup:.2f}×", help=METRIC_HELP["speedup"])
    spread = cmp.spread
    box = st.success if cmp.speedup >= 1 else st.warning
    if spread is not None and spread.covers(1.0):
        box = st.info
    with m2:
        box(cmp.verdict())
        predicted = k_panel.run_prediction(run, pair)
        if predicted:
            st.caption(predicted)
    with st.expander("How the race was run, and where a round's time goes"):
        st.caption(HOW_TIMED)
        st.markdown("  \n".join(f"{i + 1}. {e.text()}" for i, e in enumerate(race.events)))
        parts = cost_parts(cmp)
        if parts is not None:
            st.plotly_chart(parts_chart(parts), key="dec_cost_parts")
            st.caption(explanation(parts))
    k_panel.record_caption(run)
