"""Step through in a real browser (Chromium through Playwright, `streamlit run` on a free port):
set a prompt and delta, click through a round, copy the link from the "Copy link" control,
open it in a new browser context (a new user, no session), and find the same step, rule,
delta and prompt. Screenshots go to test-artifacts/."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from streamlit_server import streamlit_app
from test_browser import ARTIFACTS, Session

from cactus_core.maths.rules import DEFAULT_RULE, RULES

pytestmark = pytest.mark.browser

PROMPT = "Tell me about cactus flowers."
DELTA_LABEL = RULES[DEFAULT_RULE].swept().label
DELTA_KEY = f"step_{DEFAULT_RULE}_{RULES[DEFAULT_RULE].swept().name}"  # rule_picker's key


def app_env(tiny_pair_dirs) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", CACTUS_LAB_PRELOAD="0")
    env["CACTUS_LAB_VERIFIER"] = str(tiny_pair_dirs[0])
    env["CACTUS_LAB_DRAFT"] = str(tiny_pair_dirs[1])
    return env


@pytest.fixture(scope="module")
def server(tiny_pair_dirs) -> Iterator[str]:
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        open(ARTIFACTS / "streamlit-step-server.log", "w") as log,
        streamlit_app(app_env(tiny_pair_dirs), log) as app,
    ):
        yield app.url


def step_title(s: Session) -> str:
    return s.page.locator(".st-key-step_card h3").first.inner_text()


def view(s: Session) -> dict[str, str]:
    """What identifies the view: the step on screen, the rule, delta and the prompt."""
    return {
        "step": step_title(s),
        "rule": s.page.locator(".st-key-step_rule").inner_text(),
        "delta": s.page.locator(
            f".st-key-{DELTA_KEY} [data-testid='stSliderThumbValue']"
        ).first.inner_text(),
        "prompt": s.page.get_by_role("textbox", name="Prompt").input_value(),
    }


def copied_link(s: Session) -> str:
    s.page.get_by_role("button", name="Copy link").click()
    code = s.page.locator('[data-testid="stPopoverBody"] [data-testid="stCode"] code').first
    code.wait_for()
    return code.inner_text().strip()


def load_linked_pair(session) -> None:
    """A link naming a pair other than the embedded one, on a server that has not loaded that
    pair yet, loads it only after a click."""
    button = session.page.get_by_role("button", name="Load this pair")
    button.wait_for(timeout=60_000)
    button.click()
    session.idle()


def test_a_copied_link_reopens_the_same_step(server, browser, tiny_pair_dirs):
    teacher = Session(browser, server)
    student = Session(browser, server)
    try:
        teacher.open("step")
        teacher.page.get_by_role("button", name="Next step").wait_for()
        box = teacher.page.get_by_role("textbox", name="Prompt")
        box.fill(PROMPT)
        box.press("Control+Enter")
        teacher.idle()
        thumb = teacher.page.get_by_role("slider", name=DELTA_LABEL)
        thumb.focus()
        start = float(view(teacher)["delta"])
        for _ in range(3):  # delta up from its default (0.1) one log step at a time: 0.13
            thumb.press("ArrowRight")
            teacher.idle()
        teacher.page.wait_for_timeout(1500)  # a debounced last move may still be on its way
        teacher.idle()
        delta = view(teacher)["delta"]
        assert float(delta) > start
        titles = [step_title(teacher)]
        while "The round in numbers" not in titles[-1]:  # a whole round, step by step
            teacher.page.get_by_role("button", name="Next step").click()
            teacher.idle()
            titles.append(step_title(teacher))
            assert len(titles) < 30
        assert titles[0].startswith("Round 1, token 1") and titles[-1].startswith("Round 1:")
        teacher.page.get_by_role("button", name="Back").click()  # land on a decision step
        teacher.idle()
        teacher.check()
        before = view(teacher)
        assert before["delta"] == delta and before["prompt"] == PROMPT
        teacher.shot("step-teacher")
        url = copied_link(teacher)
        assert url.startswith(server) and "/step?" in url and f"delta={delta}" in url

        student.page.goto(url)  # a new context: nothing of the teacher's session
        student.idle()
        student.page.get_by_role("button", name="Next step").wait_for()
        student.idle()
        student.check()
        assert view(student) == before
        student.shot("step-student")
        # ... and on a server that has just started, which first serves a deep link without
        # the app's navigation (pages/shared/session.require_entry_point): the query string survives
        with streamlit_app(app_env(tiny_pair_dirs)) as fresh:
            later = Session(browser, fresh.url)
            try:
                later.page.goto(url.replace(server, fresh.url))
                later.idle()
                load_linked_pair(later)
                later.page.get_by_role("button", name="Next step").wait_for()
                later.idle()
                later.check()
                assert view(later) == before
            finally:
                later.close()
    finally:
        teacher.close()
        student.close()
