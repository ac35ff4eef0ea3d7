"""Fast clicks on Step through: script runs that overlap decode one round at a time (never
"generator already executing", never a run ended early), and Back from a round the page has
not decoded yet lands on the last step decoded instead of an IndexError."""

from __future__ import annotations

import threading
from pathlib import Path

from streamlit.testing.v1 import AppTest
from test_step_through import request

from cactus_core.app.shared.links import STEP_INDEX_KEY, STEP_ROUND_KEY
from cactus_core.app.step.run import StepRun
from cactus_core.app.step.view import round_steps, step_after, step_before
from cactus_core.maths.rules import DEFAULT_RULE
from tests.overlap import CountedLock

APP = Path(__file__).resolve().parent.parent / "app.py"


def _held(events, lock: CountedLock, clicks: int):
    for rnd in events:
        # A round comes out only once every click is queued behind the one decoding it, as
        # when clicks reach a loaded server faster than it decodes.
        lock.wait_for(clicks)
        yield rnd


def test_overlapping_script_runs_decode_one_round_at_a_time(tiny_pair):
    expected = StepRun.start(tiny_pair, request(DEFAULT_RULE, delta=1.0))
    expected.ensure(3)
    run = StepRun.start(tiny_pair, request(DEFAULT_RULE, delta=1.0))
    run._lock = lock = CountedLock()
    run._events = _held(iter(run.stream), lock, clicks=3)
    errors: list[BaseException] = []

    def click(index: int) -> None:
        try:
            run.ensure(index)
        except BaseException as err:  # what the script run would have shown
            errors.append(err)

    threads = [threading.Thread(target=click, args=(i,)) for i in (3, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and lock.arrived == 3  # all three overlapped
    assert run.done == expected.done
    assert [r.next_id for r in run.rounds] == [r.next_id for r in expected.rounds]
    assert run.ensure(len(expected.rounds))  # and it goes on decoding


def test_back_and_next_stay_within_the_rounds_decoded(tiny_pair):
    run = StepRun.start(tiny_pair, request(DEFAULT_RULE, delta=1.0))
    run.ensure(1)
    last = len(round_steps(run, 1)) - 1
    assert step_before(run, 5, 0) == (1, last)  # Next round clicked ahead of the decoding
    assert step_before(run, 1, 99) == (1, last)
    assert step_before(run, 1, 0) == (0, len(round_steps(run, 0)) - 1)
    assert step_before(run, 0, 0) == (0, 0)
    assert step_after(run, 1, last) == (2, 0)
    assert step_after(run, 0, 0) == (0, 1)


def test_back_from_a_round_not_decoded_yet_on_the_page(tiny_pair_dirs):
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["sb_source"] = "Hub id or local folder"
    at.session_state["sb_verifier"] = str(tiny_pair_dirs[0])
    at.session_state["sb_draft"] = str(tiny_pair_dirs[1])
    at.run()
    at.switch_page("pages/step.py").run()
    at.button(key="step_next").click().run()
    assert not at.exception
    run: StepRun = at.session_state["step_state"].run
    decoded = len(run.rounds)
    # Three Next round clicks reached the server before any of their runs decoded.
    at.session_state[STEP_ROUND_KEY] = decoded + 2
    at.session_state[STEP_INDEX_KEY] = 0
    at.button(key="step_back").click().run()
    assert not at.exception, at.exception
    last = len(run.rounds) - 1
    assert at.session_state[STEP_ROUND_KEY] <= last
    assert not run.done or len(run.rounds) > decoded
