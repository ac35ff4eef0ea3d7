"""Step through: one real speculative round taken apart, one narrated step at a time.
Widgets and layout only; the steps come from cactus_core.app.step.view."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from cactus_core.app.shared.links import STEP_INDEX_KEY, STEP_JUMP_KEY, STEP_ROUND_KEY
from cactus_core.app.shared.request import DecodeRequest
from cactus_core.app.shared.settings import AppSettings
from cactus_core.app.shared.transcript import legend_html, transcript_html, transcript_tokens
from cactus_core.app.step.figures import step_figures
from cactus_core.app.step.narration import round_level_sentence
from cactus_core.app.step.run import SessionRun, SessionRuns, StepRun, restart_reason
from cactus_core.app.step.view import (
    Step,
    find_step,
    first_example,
    round_level,
    round_steps,
    step_after,
    step_before,
)
from cactus_core.engine.runtime.memory import release_free_memory
from pages.shared import k_panel
from pages.shared.pair import get_pair
from pages.shared.prompt_form import prompt_form
from pages.shared.rescue_panel import why_rejected
from pages.shared.rule_picker import rule_picker
from pages.shared.session import settings

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

STATE_KEY = "step_state"
JUMP_ROUNDS = 32  # how far a link's `jump` searches for the step it names
DEFAULT_MAX_NEW = 32


@dataclass
class StepState:
    """Everything the page keeps between reruns besides its widgets' values (the round and
    step on screen are widget-like keys a link sets: `links.STEP_ROUND_KEY`, `STEP_INDEX_KEY`).
    """

    run: StepRun | None = None  # this session's run: every round decoded so far
    shown: tuple[int, int] | None = None  # (round, step) on screen at the end of the last run

    @staticmethod
    def get() -> StepState:
        return st.session_state.setdefault(STATE_KEY, StepState())


def form(s: AppSettings) -> DecodeRequest | None:
    """The prompt and the rule; None (with the reason shown) while they are not valid."""
    left, right = st.columns([3, 2])
    with left:
        asked = prompt_form("step", DEFAULT_MAX_NEW, height=90)
    with right:
        rule = rule_picker("step")
    try:
        return DecodeRequest(asked.prompt, s, rule, asked.max_new_tokens, asked.chat_template)
    except ValueError as err:
        st.error(str(err))
        return None


def current_run(pair: ModelPair, request: DecodeRequest) -> StepRun | None:
    """This session's run of the request, started afresh when anything in it changed. After a
    change of rule (or its parameters) the round and step stay where they were, so the same
    step can be compared across rules; any other change (seed, prompt, sampling, pair) is
    another text, which starts again at round 1."""
    state = StepState.get()
    run = state.run
    if run is not None and run.request == request and run.decoder.pair is pair and not run.closed:
        return run
    # ... unless a link (a tour stop) has just named the round to open.
    if run is not None and not _same_text(run, request, pair) and _where() == _shown():
        _set(0, 0)
        st.info(restart_reason(run.request, request), icon=":material/restart_alt:")
    if run is not None:
        state.run = None
        run.close()  # its KV caches and recording thread go now, not when the session ends
    try:
        run = StepRun.start(pair, request)
    except ValueError as err:
        st.error(f"Could not decode: {err}")
        return None
    state.run = run
    session_run().hold(run)
    return run


@st.cache_resource(scope="session", on_release=SessionRun.close, show_spinner=False)
def session_run() -> SessionRun:
    """Closes this session's run when the session ends (a closed run starts afresh, where it
    was, if the session comes back); the janitor closes it once the session is gone."""
    held = SessionRun()
    ctx = get_script_run_ctx()
    if ctx is not None:
        janitor().add(ctx.session_id, held)
    return held


JANITOR_S = 15  # how often the janitor looks for the runs of sessions that are gone


@st.cache_resource(show_spinner=False)
def janitor() -> SessionRuns:
    """The process's sessions' runs, and a thread that closes those of sessions gone (closed
    tabs), then hands the freed memory back to the system."""
    runs = SessionRuns()

    def sweep() -> None:
        while True:
            time.sleep(JANITOR_S)
            if Runtime.exists() and runs.close_gone(Runtime.instance().is_active_session):
                release_free_memory()

    threading.Thread(target=sweep, name="cactus-step-janitor", daemon=True).start()
    return runs


def _same_text(run: StepRun, request: DecodeRequest, pair: ModelPair) -> bool:
    """Whether the request differs from the run's only in its rule."""
    old = run.request
    return run.decoder.pair is pair and (
        old.prompt,
        old.settings,
        old.max_new_tokens,
        old.chat_template,
    ) == (request.prompt, request.settings, request.max_new_tokens, request.chat_template)


def _set(round_index: int, step_index: int) -> None:
    st.session_state[STEP_ROUND_KEY] = round_index
    st.session_state[STEP_INDEX_KEY] = step_index


def _shown() -> tuple[int, int] | None:
    return StepState.get().shown


def _where() -> tuple[int, int]:
    return st.session_state.get(STEP_ROUND_KEY, 0), st.session_state.get(STEP_INDEX_KEY, 0)


# The buttons' callbacks read the run from the session state rather than taking it as an
# argument: Streamlit keeps a widget's callback arguments, which would keep a replaced run (its
# decoder and KV caches) alive after the page let go of it. A click that arrives when there is
# no run (its decoding failed since the button was drawn) does nothing.
def next_step() -> None:
    if (run := StepState.get().run) is not None:
        _set(*step_after(run, *_where()))


def back() -> None:
    if (run := StepState.get().run) is not None:
        _set(*step_before(run, *_where()))


def next_round() -> None:
    _set(_where()[0] + 1, 0)


def finish() -> None:
    if (run := StepState.get().run) is not None:
        run.finish()
        last = len(run.rounds) - 1
        _set(last, len(round_steps(run, last)) - 1)


def locate(run: StepRun) -> tuple[int, list[Step], int]:
    """The round and step on screen, after a link's jump, clamped to what the run holds."""
    jump = st.session_state.pop(STEP_JUMP_KEY, None)
    if jump is not None:
        found = find_step(run, jump, JUMP_ROUNDS)
        if found is None:
            st.info(f"No {jump} step in the first {JUMP_ROUNDS} rounds; showing the start.")
        _set(*(found or (0, 0)))
    elif STEP_ROUND_KEY not in st.session_state:  # a first visit, not a link to a round
        start = first_example(run, JUMP_ROUNDS) or 0
        _set(start, 0)
        if start:
            st.caption(
                f"Opened at round {start + 1}: in the rounds before it the verifier gave the "
                "first draft probability 0 (outside its top-p), so no rule had anything to "
                "decide there. Back shows them."
            )
    r, i = _where()
    if not run.ensure(r):
        r = len(run.rounds) - 1
        i = len(round_steps(run, r)) - 1
        st.info("The run has ended: this is its last step. Change the seed or prompt for more.")
    steps = round_steps(run, r)
    i = min(i, len(steps) - 1)
    _set(r, i)
    StepState.get().shown = (r, i)
    return r, steps, i


def controls(run: StepRun, r: int, steps: list[Step], i: int) -> None:
    b = st.columns([1, 1, 1, 1, 3])
    first = r == 0 and i == 0
    last_round = run.done and r == len(run.rounds) - 1
    last = last_round and i == len(steps) - 1
    b[0].button(
        "Back",
        icon=":material/arrow_back:",
        key="step_back",
        on_click=back,
        disabled=first,
    )
    b[1].button(
        "Next step",
        type="primary",
        icon=":material/arrow_forward:",
        key="step_next",
        on_click=next_step,
        disabled=last,
    )
    b[2].button(
        "Next round",
        icon=":material/skip_next:",
        key="step_next_round",
        on_click=next_round,
        disabled=last_round,
    )
    b[3].button(
        "Finish",
        icon=":material/fast_forward:",
        key="step_finish",
        on_click=finish,
        help="Decode the rest of the run and show its last round.",
        disabled=last,
    )
    # The run decodes a round only when asked for it, so its length is known once it ends.
    of = f" of {len(run.rounds)}" if run.done else ""
    b[4].markdown(
        f"**Round {r + 1}**{of} · **step {i + 1}** of {len(steps)} · "
        + " · ".join(f"**{s.kind}**" if j == i else s.kind for j, s in enumerate(steps))
    )


def show_step(step: Step, rule_label: str) -> None:
    with st.container(border=True, key="step_card"):
        st.subheader(step.title)
        st.markdown(step.narration)
        figs = step_figures(step)
        if "tree" in figs:
            st.plotly_chart(figs["tree"], key="step_fig_tree")
        if "bars" in figs:
            st.plotly_chart(figs["bars"], key="step_fig_bars")
        if "coin" in figs:
            left, right = st.columns(2)
            left.caption(f"{rule_label}: accepted iff u < a(n)")
            left.plotly_chart(figs["coin"], key="step_fig_coin")
            if "sps_coin" in figs:  # a traversal step has no per-node lossless a(n)
                right.caption("Lossless speculative sampling, on the same coin")
                right.plotly_chart(figs["sps_coin"], key="step_fig_sps_coin")


def main() -> None:
    s = settings()
    st.title("Step through")
    st.caption(
        "One real round of speculative sampling, slowed down: the draft proposes, the verifier "
        "scores every position in one pass, the rule decides each draft against its coin. "
        "Every number is the decoder's own. Back never draws new randomness: the same seed "
        "always shows the same steps. Pair, sampling, k and seed are in the sidebar."
    )
    request = form(s)
    if request is None:
        return
    pair = get_pair(s)
    if pair is None:
        return
    run = current_run(pair, request)
    if run is None:
        return
    try:
        r, steps, i = locate(run)
    except ValueError as err:  # the decoder's own refusal (a broken model); a rerun retries
        StepState.get().run = None
        st.error(f"Could not decode: {err}")
        return
    controls(run, r, steps, i)
    if run.judge.name != request.rule_name:
        st.info(
            f"At T = 0, p and q are one-hot and every rule verifies by exact match: "
            f"{run.judge.label} decides here, whatever rule is picked."
        )
    elif round_level(run.judge):
        st.info(round_level_sentence(run.judge.label, run.judge.card.round_in_words))
    show_step(steps[i], run.judge.label)
    # The round's own tokens join the text at its summary, so earlier steps do not give away
    # how it ends.
    shown = run.rounds[: r + 1] if steps[i].kind == "summary" else run.rounds[:r]
    st.markdown("**The text so far**")
    st.html(legend_html())
    st.html(transcript_html("", transcript_tokens(shown)))
    # Rejections are counted as the steps show them: this round's decisions so far count too.
    decided = {x.slot for x in steps[: i + 1] if x.kind == "decide" and x.slot is not None}
    summary = steps[i].kind == "summary"
    why_rejected(run.rounds[: r + 1], "step", run.text, None if summary else decided)
    if steps[i].kind == "summary":
        k_panel.rounds_positions(shown)


main()
