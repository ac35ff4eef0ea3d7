"""Decode: generate with any rule and watch every round. Widgets and layout only."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from cactus_core.app.decode.replay import replay_caption, replay_headlines, tree_replay_note
from cactus_core.app.shared import figures
from cactus_core.app.shared.inspector import inspect_token
from cactus_core.app.shared.links import DECODE_MAX_NEW
from cactus_core.app.shared.metrics import METRIC_HELP, prob_text
from cactus_core.app.shared.reference import (
    EstimatedCurve,
    RunPoint,
    compact_caption,
    compact_frontier,
    load_reference,
    log_timing,
    reference_part,
    run_curve,
)
from cactus_core.app.shared.request import DecodeRequest, DecodeRun
from cactus_core.app.shared.round_view import (
    LiveStats,
    final_stats,
    live_stats,
    round_label,
    round_table,
    timeline,
)
from cactus_core.app.shared.settings import AppSettings, replayable_rules
from cactus_core.app.shared.transcript import (
    chip_label,
    flipped_nodes,
    legend_html,
    round_tokens,
    transcript_html,
    transcript_tokens,
)
from cactus_core.app.shared.tree_figure import tree_figure
from pages.decode import export_panel, replay_panel
from pages.decode.race_panel import race_section, run_race
from pages.shared import k_panel
from pages.shared.page_links import linked_fragment
from pages.shared.pair import get_pair
from pages.shared.prompt_form import prompt_form
from pages.shared.rescue_panel import why_rejected
from pages.shared.rule_picker import rule_picker
from pages.shared.session import LAST_RUN_KEY, settings

if TYPE_CHECKING:
    from cactus_core.engine.decoding.generation import DecodeStream
    from cactus_core.engine.loading.pair import ModelPair
    from cactus_core.maths.rules import Rule


@dataclass
class DecodeState:
    """Everything the page keeps between reruns besides its widgets' values, as one object in
    the session. The last run is the session's (`session.LAST_RUN_KEY`): the Playground and
    the export read it too."""

    runs: int = 0  # Generate clicks so far: the next run is number runs + 1
    # the token in the inspector: (run id, round, row, node), node None for the token emitted
    # at the row
    inspected: tuple[int, int, int, int | None] | None = None
    # the rule's curve from the run's own positions, for (run id, rule, k)
    own_curve: tuple[tuple[int, str, int], EstimatedCurve | None] | None = None
    rule_stale: bool = False  # the rule picked differs from the last run's

    @staticmethod
    def get() -> DecodeState:
        return st.session_state.setdefault(STATE_KEY, DecodeState())


STATE_KEY = "dec_state"


@dataclass
class Form:
    """What the user asked for on this rerun."""

    request: DecodeRequest | None  # None: see `problem`
    generate: bool
    compare: bool
    # under the buttons, in view while the run streams: the counters, then the text
    counters: DeltaGenerator
    transcript: DeltaGenerator
    annotated: bool  # the transcript with every draft, or the clean text
    problem: str = "Enter a prompt first."


@dataclass
class Slots:
    """Placeholders sent before any decoding starts, so a new run replaces the old one in
    place: the browser does not keep redrawing the stale rounds while the new run streams."""

    counters: DeltaGenerator
    transcript: DeltaGenerator
    body: DeltaGenerator
    annotated: bool = False  # the transcript with every draft, or the clean text


@linked_fragment
def setting_on_the_frontier(s: AppSettings) -> Rule:
    """The rule, its parameters and, beside them, where that setting sits on the reference
    frontier: moving a parameter reruns this fragment alone and moves the marker, no decoding."""
    start = time.perf_counter()
    rule = rule_picker("dec")
    # The counters and text are drawn outside this fragment: when the rule picked stops (or
    # starts again) being the last run's, the whole page runs once, so their stale mark follows.
    run: DecodeRun | None = st.session_state.get(LAST_RUN_KEY)
    stale = run is not None and rule != run.request.rule
    state = DecodeState.get()
    if stale != state.rule_stale:
        state.rule_stale = stale
        st.rerun(scope="app")
    try:
        ref = load_reference()
    except ValueError as err:
        st.caption(f"No reference frontier: {err}")
        return rule
    part, note = reference_part(ref, s.sampling, s.on_reference_pair)
    point = own = None
    if run is not None:
        stats = run.output.stats
        # the run's point belongs to its own rule only, and only where a decode measures KL
        if run.rule_name == rule.name and stats.mean_emitted_kl is not None:
            point = RunPoint(stats.mean_emitted_kl, stats.tokens_per_call, f"run {run.run_id}")
        own = own_curve(run, rule.name)
    fig = compact_frontier(part, rule.name, rule.params, point, own)
    st.plotly_chart(fig, key="dec_frontier", config={"displayModeBar": False})
    st.caption(compact_caption(point is not None, own is not None, rule.name, part.has(rule.name)))
    if note:
        st.caption(note)
    log_timing("decode_marker", (time.perf_counter() - start) * 1000)
    return rule


def own_curve(run: DecodeRun, rule: str) -> EstimatedCurve | None:
    """The rule's curve from the run's own positions, computed once per run and rule."""
    key = (run.run_id, rule, run.settings.k)
    state = DecodeState.get()
    if state.own_curve is not None and state.own_curve[0] == key:
        return state.own_curve[1]
    try:
        curve = run_curve(run.trace, rule, run.settings.k)
    except ValueError:  # a run with no decided positions (verifier-only steps only)
        curve = None
    state.own_curve = (key, curve)
    return curve


def form(s: AppSettings) -> Form:
    left, right = st.columns([3, 2])
    with left:
        # The prompt, its options and the buttons in one column: Generate stays above the
        # fold however tall the rule's frontier beside it is.
        asked = prompt_form("dec", DECODE_MAX_NEW)
        b1, b2 = st.columns(2)
        generate = b1.button(
            "Generate", type="primary", icon=":material/play_arrow:", key="dec_go", width="stretch"
        )
        compare = b2.button(
            "Race against verifier-only",
            icon=":material/speed:",
            key="dec_compare",
            width="stretch",
            help=METRIC_HELP["speedup"] + " Runs the prompt again both ways and shows the race.",
        )
        counters = st.empty()
        annotated, transcript = transcript_slot()
    with right:
        rule = setting_on_the_frontier(s)
    slots = (counters, transcript, annotated)
    try:
        request = DecodeRequest(asked.prompt, s, rule, asked.max_new_tokens, asked.chat_template)
    except ValueError as err:  # empty, or over the app's length cap
        return Form(None, generate, compare, *slots, str(err))
    return Form(request, generate, compare, *slots)


def transcript_slot() -> tuple[bool, DeltaGenerator]:
    """The text's toggle and legend, and the place the text goes: the clean text first, every
    draft (rejected ones struck through) one click away."""
    annotated = st.toggle(
        "Show every draft",
        key="dec_annotated",
        help="The text as written, or every round as drafted: rejected drafts struck through.",
    )
    st.html(legend_html(annotated))
    return annotated, st.empty()


def stale_note(run: DecodeRun, request: DecodeRequest | None) -> str | None:
    """Why the counters and text on screen are not the form's setting, if they are not."""
    changes = request.changes_since(run.request) if request is not None else ["the prompt"]
    if not changes:
        return None
    return (
        f"Run {run.run_id}'s results, from before you changed {', '.join(changes)}. "
        "Press Generate to decode the new setting."
    )


def show_counters(slot: DeltaGenerator, live: LiveStats, stale: str | None = None) -> None:
    # Three and two, in the form's column under the buttons: in view without scrolling.
    with slot.container():
        if stale:
            st.warning(stale, icon=":material/history:")
        c = [*st.columns(3), *st.columns(3)[:2]]
        c[0].metric(
            "tokens per call", f"{live.tokens_per_call:.2f}", help=METRIC_HELP["tokens per call"]
        )
        acceptance = live.acceptance_rate
        c[1].metric(
            "acceptance rate",
            "–" if acceptance is None else f"{acceptance:.1%}",
            help=METRIC_HELP["acceptance rate"],
        )
        c[2].metric("tokens/s", f"{live.tokens_per_s:.1f}", help=METRIC_HELP["tokens/s"])
        kl = live.emitted_kl
        c[3].metric(
            "emitted KL (nats/token)",
            "–" if kl is None else f"{kl:.4f}",
            help=METRIC_HELP["emitted KL" if kl is not None else "emitted KL, not measured"],
        )
        c[4].metric("verifier calls", f"{live.verifier_calls}")


def generate(stream: DecodeStream, request: DecodeRequest, slots: Slots) -> DecodeRun:
    """Decode, drawing the counters and the transcript as each round finishes."""
    rounds = []
    start = time.perf_counter()
    for rnd in stream:
        rounds.append(rnd)
        live = live_stats(rounds, time.perf_counter() - start, not request.rule.caps.overrides_sps)
        show_counters(slots.counters, live)
        slots.transcript.html(transcript_html("", transcript_tokens(rounds), slots.annotated))
    state = DecodeState.get()
    state.runs += 1
    return DecodeRun(run_id=state.runs, request=request, output=stream.output)


def act(pair: ModelPair, f: Form, slots: Slots) -> str | None:
    """Generate and/or compare as clicked; the error to show instead, if any."""
    if f.generate:
        if f.request is None:
            return f.problem
        try:
            stream = f.request.stream(pair)
            st.session_state[LAST_RUN_KEY] = generate(stream, f.request, slots)
        except ValueError as err:
            return f"Could not decode: {err}"
        DecodeState.get().inspected = None
        # The compact frontier above was drawn before this run existed: draw the page again
        # from the stored run, so it shows the run's point and its own curve.
        st.rerun()
    run: DecodeRun | None = st.session_state.get(LAST_RUN_KEY)
    if run is not None:
        show_counters(slots.counters, final_stats(run.output), stale_note(run, f.request))
        tokens = transcript_tokens(run.trace.rounds, run.replay)
        slots.transcript.html(transcript_html("", tokens, slots.annotated))
    if f.compare:
        if run is None:
            return "Generate first: the race decodes the run's prompt both ways."
        # The transcript above stays in view; the race streams in below it.
        return run_race(pair, run, slots.body)
    return None


def chips_key(run: DecodeRun, round_index: int) -> str:
    return f"dec_chips_{run.run_id}_{round_index}"


def pick_token(run: DecodeRun, round_index: int) -> None:
    """A chip was clicked: inspect its token, and clear the other rounds' chips."""
    choice = st.session_state.get(chips_key(run, round_index))
    if choice is None:
        return
    flips = flipped_nodes(run.replay).get(round_index)
    view = round_tokens(run.trace.rounds[round_index], flips)[choice]
    DecodeState.get().inspected = (run.run_id, round_index, view.row, view.node)
    for other in range(len(run.trace.rounds)):
        if other != round_index:
            st.session_state[chips_key(run, other)] = None


def rounds(run: DecodeRun) -> None:
    st.subheader("Rounds")
    st.caption("Expand a round and click a token to inspect it.")
    flips = flipped_nodes(run.replay)
    with st.container(height=620):
        for rnd in run.trace.rounds:
            # Lazy: a round's chips and table are built only while it is open, so a finished
            # run costs the browser dozens of labels, not dozens of tables.
            exp = st.expander(
                round_label(rnd, rnd.index in flips),
                key=f"dec_round_{run.run_id}_{rnd.index}",
                on_change="rerun",
            )
            if not exp.open:
                continue
            views = round_tokens(rnd, flips.get(rnd.index))
            with exp:
                st.pills(
                    "Tokens",
                    range(len(views)),
                    format_func=lambda i, views=views: chip_label(views[i]),
                    key=chips_key(run, rnd.index),
                    on_change=pick_token,
                    args=(run, rnd.index),
                    label_visibility="collapsed",
                )
                if rnd.k:
                    st.dataframe(round_table(rnd), hide_index=True)


def inspector(run: DecodeRun) -> None:
    st.subheader("Inspector")
    pick = DecodeState.get().inspected
    if pick is None or pick[0] != run.run_id:
        st.info("Click a token in a round to see p, q, h and the residual there.")
        return
    view = inspect_token(run.trace, *pick[1:])
    st.markdown(f"**{view.title}**")
    for note in view.notes:
        st.caption(note)
    if view.accept_prob is not None and view.coin is not None:
        st.plotly_chart(figures.coin_figure(view.accept_prob, view.coin), key="dec_coin")
        k1, k2 = st.columns(2)
        k1.metric("p_n (draft) / q_n (verifier)", f"{prob_text(view.p_n)} / {prob_text(view.q_n)}")
        k2.metric(
            "h_n (rule's target)", prob_text(view.h_n), help="what a(n) = min(1, h_n/p_n) uses"
        )
        k3, k4 = st.columns(2)
        k3.metric("KL(h ‖ q), nats", kl_text(view.kl_h_q), help="this position's h")
        k4.metric(
            "KL(pi ‖ q), nats",
            kl_text(view.kl_pi_q),
            help="the emitted distribution at this position, exact (– where nothing was judged)",
        )
    if view.frame is not None:
        st.plotly_chart(tree_figure(view.frame), key="dec_tree")
    if view.series:
        st.plotly_chart(
            figures.distribution_bars(
                view.labels,
                view.series,
                highlight=view.highlight,
                title="Top tokens",
                mark=view.mark,
            ),
            key="dec_bars",
        )


def kl_text(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"


def replay(run: DecodeRun) -> None:
    st.subheader("Replay")
    st.caption(
        "Judge the same drafts with the same coins under another rule or delta. Tokens whose fate "
        "flips are outlined in the transcript. Each round is judged on its own: later rounds keep "
        "the drafts that were actually made."
    )
    if (note := tree_replay_note(run.trace)) is not None:
        st.caption(note)
    left, right = st.columns([2, 3])
    with left:
        rule = rule_picker(
            "replay", label="Replay under", default=run.rule_name, names=replayable_rules()
        )
        if st.button("Replay", icon=":material/replay:", key="dec_replay"):
            from cactus_core.engine.decoding.replay import reverify

            run.replay = reverify(run.trace, rule)
            st.rerun()
    if run.replay is None:
        return
    with right:
        st.markdown(replay_caption(run.replay))
        for col, card in zip(st.columns(2), replay_headlines(run.replay), strict=True):
            col.metric(card.label, card.value, card.delta)
        replay_panel.kl_section(run)
        if not run.replay.decisions_exact:
            st.caption(
                "Some decisions are approximate: this rule needs whole rows and the trace "
                "keeps the top rows only."
            )
        if st.button("Clear replay", key="dec_replay_clear"):
            run.replay = None
            st.rerun()


def show_run(run: DecodeRun, pair: ModelPair | None = None) -> None:
    """The finished run below the transcript: summary, speed, rounds, inspector, replay and
    export."""
    st.caption(run.caption())
    note = run.truncation_caption()
    if note:
        st.caption(note)
    race_section(run, pair)
    k_panel.run_positions(run, pair)
    st.plotly_chart(figures.round_timeline(*timeline(run.trace.rounds)), key="dec_timeline")
    col_rounds, col_inspect = st.columns([6, 5], gap="large")
    with col_rounds:
        rounds(run)
    with col_inspect:
        inspector(run)
    replay(run)
    why_rejected(run.trace.rounds, "dec", run.trace.text)
    st.subheader("Export")
    st.download_button(
        "Download the trace (JSON)",
        data=run.trace.to_json,
        file_name=f"cactus-trace-{run.run_id}.json",
        mime="application/json",
        on_click="ignore",
        icon=":material/download:",
        key="dec_export",
    )


def main() -> None:
    s = settings()
    st.title("Decode")
    st.caption(
        "Speculative decoding, round by round: the draft proposes k tokens, the verifier checks "
        "them in one forward pass, and the rule decides which to keep. Model pair, sampling, k "
        "and seed are in the sidebar."
    )
    f = form(s)
    pair = get_pair(s)
    k_panel.best_k_caption(st.session_state.get(LAST_RUN_KEY), pair)
    if pair is None:
        return
    slots = Slots(f.counters, f.transcript, st.empty(), f.annotated)
    error = act(pair, f, slots)
    run: DecodeRun | None = st.session_state.get(LAST_RUN_KEY)
    if error:
        st.error(error)
    elif run is None:
        slots.transcript.info("Press Generate to decode the prompt.")
    else:
        with slots.body.container():
            show_run(run, pair)
    export_panel.decode_panel(s, f.request, run, pair)


main()
