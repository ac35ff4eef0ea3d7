"""Step through lets go of what it no longer shows: a run the page replaces is closed and freed
at once, a run whose session ends is closed by the session's hook, and a run waiting for its
reader holds no recording thread. Everything is checked with the cyclic collector off, so
"freed" means freed by reference counting the moment the last reference goes, not at some later
collection (12 tabs once kept 12 decoders, +1.5 GB, until a forced `gc.collect()`)."""

from __future__ import annotations

import gc
import threading
import weakref
from contextlib import contextmanager

from streamlit.runtime import caching
from test_step_page import open_page
from test_step_through import request

from cactus_core.app.step.run import StepRun
from cactus_core.engine.decoding.recording import RECORDER_THREAD
from cactus_core.maths.rules import DEFAULT_RULE

APPTEST_SESSION = "test session id"  # the session id AppTest's script runner uses


def recorder_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(RECORDER_THREAD)]


@contextmanager
def no_cyclic_gc():
    was = gc.isenabled()
    gc.collect()  # start from a clean slate: nothing of an earlier test is left to collect
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def test_replaced_and_abandoned_runs_are_freed_without_a_collection(tiny_pair):
    with no_cyclic_gc():
        refs = []
        shown = None
        for tab in range(12):
            run = StepRun.start(tiny_pair, request(DEFAULT_RULE, seed=tab, delta=1.0))
            run.ensure(2)
            refs.append(weakref.ref(run))
            if tab % 2 == 0 and shown is not None:
                shown.close()  # what the page does when it replaces a run
            # odd tabs: the old run is simply dropped, as a session's state is when it ends
            shown = run
        run = shown = None
        assert [r for r in refs if r() is not None] == []
        assert recorder_threads() == []


def test_a_run_waiting_for_its_reader_holds_no_recording_thread(tiny_pair):
    paused = StepRun.start(tiny_pair, request(DEFAULT_RULE, seed=3, delta=1.0))
    whole = StepRun.start(tiny_pair, request(DEFAULT_RULE, seed=3, delta=1.0))
    for r in range(4):
        paused.ensure(r)
        assert recorder_threads() == []
    paused.finish()
    whole.finish()
    # pausing changed nothing decoded or recorded
    assert [x.emitted_ids for x in paused.rounds] == [x.emitted_ids for x in whole.rounds]
    assert [[p.kl_pi_q for p in x.positions] for x in paused.rounds] == [
        [p.kl_pi_q for p in x.positions] for x in whole.rounds
    ]


def test_close_never_waits_for_a_round_being_decoded(tiny_pair):
    run = StepRun.start(tiny_pair, request(DEFAULT_RULE, seed=5, delta=1.0))
    run.ensure(1)
    with run._lock:  # another script thread is decoding a round of this run
        run.close()  # returns at once (a session's end must not wait for a round)
        assert run.closed
    assert run.ensure(1) and not run.ensure(5)  # the decoding thread stops after its round
    assert len(run.rounds) == 2 and recorder_threads() == []


def test_the_page_frees_the_run_it_replaces_and_closes_its_run_when_the_session_ends(
    tiny_pair_dirs,
):
    pair_dirs = str(tiny_pair_dirs[0]), str(tiny_pair_dirs[1])
    at = open_page(pair_dirs)
    with no_cyclic_gc():
        old = weakref.ref(at.session_state["step_state"].run)
        at.button(key="step_next").click().run()
        for n in range(3):
            at.text_area(key="step_prompt").set_value(f"Tell me about cactus {n}.").run()
            assert not at.exception
            at.button(key="step_next").click().run()
            assert old() is None, "the replaced run is still alive"
            old = weakref.ref(at.session_state["step_state"].run)
            assert recorder_threads() == []
        run: StepRun = at.session_state["step_state"].run
        shown = len(run.rounds)
        caching.clear_session_resource_cache(APPTEST_SESSION)  # what a disconnect does
        assert run.closed
        run = None
        # back again: the same seed decodes the same rounds, from where the reader was
        at.run()
        assert not at.exception
        again: StepRun = at.session_state["step_state"].run
        assert not again.closed and len(again.rounds) == shown
        assert old() is None


def test_the_janitor_closes_the_runs_of_sessions_that_are_gone(tiny_pair):
    """Streamlit shuts a closed tab's session down only when the next visitor connects; the
    janitor closes the runs of sessions that are gone without waiting for that, and frees
    them."""
    from cactus_core.app.step.run import SessionRun, SessionRuns
    from cactus_core.engine.runtime.memory import release_free_memory

    runs, held, refs = SessionRuns(), {}, {}
    for sid in ("a", "b", "c"):
        run = StepRun.start(tiny_pair, request(DEFAULT_RULE, seed=1, delta=1.0))
        run.ensure(1)
        held[sid] = SessionRun()
        held[sid].hold(run)
        runs.add(sid, held[sid])
        refs[sid] = run  # the session states that hold them
    assert runs.close_gone(lambda sid: True) == 0
    assert runs.close_gone(lambda sid: sid == "b") == 2
    assert refs["a"].closed and refs["c"].closed and not refs["b"].closed
    assert runs.close_gone(lambda sid: sid == "b") == 0  # gone sessions are forgotten
    refs["b"].close()
    assert recorder_threads() == []
    assert isinstance(release_free_memory(), bool)
