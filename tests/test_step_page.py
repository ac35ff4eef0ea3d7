"""AppTest of the Step through page on the tiny pair: a whole round with a rejection and a whole
round where every draft passes, clicked through step by step, each step's words and numbers the
trace's own; Back draws nothing new; Finish; a link's state (from the tour) opens the page where
it says; the Decode page shows why its drafts were rejected."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from test_step_through import check_round
from transformers.models.llama.modeling_llama import LlamaModel

from cactus_core.app.shared.links import STEP_INDEX_KEY, STEP_JUMP_KEY, STEP_ROUND_KEY, restore
from cactus_core.app.shared.tour import tour
from cactus_core.app.step.run import StepRun
from cactus_core.app.step.view import round_steps
from cactus_core.maths.rules import RULES

APP = Path(__file__).resolve().parent.parent / "app.py"
STEP_PAGE = "pages/step.py"


@pytest.fixture(scope="module")
def pair_dirs(tiny_pair_dirs) -> tuple[str, str]:
    return str(tiny_pair_dirs[0]), str(tiny_pair_dirs[1])


def open_page(pair_dirs, page: str = STEP_PAGE, **state) -> AppTest:
    """A fresh session whose sidebar names the tiny pair, on `page`, with `state` set first
    (what a link sets)."""
    at = AppTest.from_file(APP, default_timeout=180)
    base = dict(
        sb_source="Hub id or local folder",
        sb_verifier=pair_dirs[0],
        sb_draft=pair_dirs[1],
        sb_device="cpu",
    )
    for key, value in {**base, **state}.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


def shown(at: AppTest) -> tuple[str, list[str]]:
    """The step on screen: its title, and the page's text (the narration among it)."""
    return at.subheader[0].value, [m.value for m in at.markdown]


def step_through_round(at: AppTest) -> StepRun:
    """From step 0 of the current round to its summary, one Next step click at a time,
    checking every step on screen against the run's own."""
    run: StepRun = at.session_state["step_state"].run
    r = at.session_state[STEP_ROUND_KEY]
    steps = round_steps(run, r)
    assert at.session_state[STEP_INDEX_KEY] == 0
    for i, step in enumerate(steps):
        assert (at.session_state[STEP_ROUND_KEY], at.session_state[STEP_INDEX_KEY]) == (r, i)
        title, text = shown(at)
        assert title == step.title and step.narration in text
        if step.coin is not None:
            assert len(at.get("plotly_chart")) >= 3  # the bars, the rule's coin, lossless's
        if i + 1 < len(steps):
            at.button(key="step_next").click().run()
            assert not at.exception
    check_round(run, r)  # ... and every number in those words is the trace's
    return run


@pytest.mark.parametrize("jump, ending", [("rejection", "residual"), ("bonus", "bonus")])
def test_a_whole_round(pair_dirs, jump, ending):
    at = open_page(pair_dirs, **{STEP_JUMP_KEY: jump})
    r = at.session_state[STEP_ROUND_KEY]
    run: StepRun = at.session_state["step_state"].run
    assert round_steps(run, r)[-2].kind == ending
    at.session_state[STEP_INDEX_KEY] = 0
    at.run()
    run = step_through_round(at)
    assert shown(at)[0] == f"Round {r + 1}: The round in numbers"
    # the next click opens the next round at its first step
    at.button(key="step_next").click().run()
    assert (at.session_state[STEP_ROUND_KEY], at.session_state[STEP_INDEX_KEY]) == (r + 1, 0)


def test_back_draws_nothing_new_and_finish_ends_the_run(pair_dirs):
    at = open_page(pair_dirs)
    for _ in range(3):
        at.button(key="step_next_round").click().run()
    run: StepRun = at.session_state["step_state"].run
    before = [(r.draft_ids, r.accept_coins, r.next_id) for r in run.rounds]
    on_screen = shown(at)
    at.button(key="step_next").click().run()
    assert shown(at) != on_screen
    at.button(key="step_back").click().run()
    assert shown(at) == on_screen
    at.button(key="step_back").click().run()  # from a round's first step to the last before
    assert at.session_state[STEP_ROUND_KEY] == 2
    assert shown(at)[0] == "Round 3: The round in numbers"
    assert [(r.draft_ids, r.accept_coins, r.next_id) for r in run.rounds] == before
    at.button(key="step_finish").click().run()
    assert not at.exception and run.done
    last = len(run.rounds) - 1
    assert at.session_state[STEP_ROUND_KEY] == last
    assert shown(at)[0] == f"Round {last + 1}: The round in numbers"
    assert any(e.label.startswith("Why drafts get rejected") for e in at.expander)


def test_next_step_runs_no_model_once_the_round_is_decoded(pair_dirs, monkeypatch):
    """Next step within a decoded round only draws what the round recorded: no forward pass.
    (Its time is a benchmark: benchmarks/bench_step_through.py, docs/benchmarks.md.)"""
    at = open_page(pair_dirs)
    at.button(key="step_next_round").click().run()  # decode two rounds, warm the figures
    at.button(key="step_back").click().run()
    forwards = []
    forward = LlamaModel.forward

    def counted(self, *args, **kwargs):
        forwards.append(type(self).__name__)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(LlamaModel, "forward", counted)
    for _ in range(6):
        before = shown(at)
        at.button(key="step_next").click().run()
        assert not at.exception and shown(at) != before
    assert not forwards
    for _ in range(2):  # a round not decoded yet does run the models (the spy sees them)
        at.button(key="step_next_round").click().run()
    assert forwards


def test_tour_stops_on_the_step_page_open_where_they_say(pair_dirs):
    for stop in [s for s in tour() if s.page == "step"]:
        at = open_page(pair_dirs, **restore("step", stop.query, {}, public=False))
        run: StepRun = at.session_state["step_state"].run
        assert at.session_state["step_rule"] == stop.query["rule"]
        assert run.request.rule_name == stop.query["rule"]
        step = round_steps(run, at.session_state[STEP_ROUND_KEY])[at.session_state[STEP_INDEX_KEY]]
        jump = stop.query.get("jump")
        if jump is None:
            assert (at.session_state[STEP_ROUND_KEY], step.kind) == (0, "draft")
        elif jump == "rescue":
            assert "where lossless would have rejected" in step.narration
        else:
            assert step.kind == "decide" and "rejected" in step.narration
        assert STEP_JUMP_KEY not in at.session_state  # one-shot: the link now names the step


def test_decode_page_shows_why_drafts_get_rejected(pair_dirs):
    at = open_page(pair_dirs, page="pages/decode.py", dec_max_new=16)
    at.button(key="dec_go").click().run()
    assert not at.exception
    assert any(e.label.startswith("Why drafts get rejected") for e in at.expander)
    assert len([c for c in at.get("plotly_chart")]) >= 2


@pytest.mark.parametrize("page", ["playground", "decode", "frontier"])
def test_the_other_tour_stops_open_their_pages_set_up(pair_dirs, page):
    for stop in [s for s in tour() if s.page == page]:
        state = restore(page, stop.query, {}, public=False)
        at = open_page(pair_dirs, page=f"pages/{page}.py", **state)
        kinds = (
            at.slider,
            at.select_slider,
            at.number_input,
            at.selectbox,
            at.text_area,
            at.checkbox,
        )
        widgets = {w.key: w.value for kind in kinds for w in kind}
        # every setting the stop names is what its widget on the page shows
        own = [key for key in state if key.startswith(("pg_", "dec_", "fr_"))]
        assert own, stop.title
        for key in own:
            # the Frontier's tuner is drawn once a sweep is on screen (the embedded pair ships
            # one; the tiny pair has none), and then starts from the stop's budget
            shown = widgets[key] if page != "frontier" else at.session_state[key]
            assert shown == state[key], (stop.title, key)


def test_greedy_and_round_level_rules_say_how_they_decide(pair_dirs):
    at = open_page(pair_dirs, sb_temperature=0.0)
    assert any("At T = 0" in i.value for i in at.info)  # exact match, whatever the rule
    step_through_round(at)
    whole = [name for name, cls in RULES.items() if cls.caps.round_level]
    if whole:
        at = open_page(pair_dirs, step_rule=whole[0])
        assert any("decides on the whole draft" in i.value for i in at.info)
        step_through_round(at)


def test_the_end_of_a_run_disables_going_on_and_rejections_count_as_shown(pair_dirs):
    """At the run's last step Next step, Next round and Finish are off; "Why drafts get
    rejected (n)" counts the rejections the steps have shown, this round's among them."""
    at = open_page(pair_dirs, step_max_new=16)
    run: StepRun = at.session_state["step_state"].run
    for _ in range(200):  # to the first step that shows a rejection
        r, i = at.session_state[STEP_ROUND_KEY], at.session_state[STEP_INDEX_KEY]
        step = round_steps(run, r)[i]
        if step.kind == "decide" and step.coin is not None and step.coin[1] >= step.coin[0]:
            break
        at.button(key="step_next").click().run()
        assert not at.exception
    else:
        pytest.fail("no rejection in the run's first 200 steps")
    before = sum(v == "rejected" for rnd in run.rounds[:r] for v in rnd.verdict.fates)
    label = next(e.label for e in at.expander if e.label.startswith("Why drafts get rejected"))
    assert label == f"Why drafts get rejected ({before + 1})"
    at.button(key="step_finish").click().run()
    assert run.done
    for key in ("step_next", "step_next_round", "step_finish"):
        assert at.button(key=key).disabled, key
    assert not at.button(key="step_back").disabled
