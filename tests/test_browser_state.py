"""Settings and their changes, in a real browser (Chromium through Playwright, `streamlit run`
on a free port): a prompt typed and a δ set on Decode, a Generate, a look at the Playground
whose own δ slider moves (a fragment's rerun, which keeps the address bar current), and back
on Decode the prompt and δ are the ones the user left, beside the run they made; a seed change
on Step through says why the page starts again at round 1."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlparse

import pytest
from streamlit_server import streamlit_app
from test_browser import ARTIFACTS, Session
from test_browser_step import app_env

from cactus_core.app.shared.param_groups import headline_group
from cactus_core.maths.rules import DEFAULT_RULE, RULES

pytestmark = pytest.mark.browser

PROMPT = "Name three desert plants."
PARAM = RULES[DEFAULT_RULE].swept()
DELTA_KEY = f"dec_{DEFAULT_RULE}_{PARAM.name}"  # rule_picker's key on Decode


@pytest.fixture(scope="module")
def server(tiny_pair_dirs) -> Iterator[str]:
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        open(ARTIFACTS / "streamlit-state-server.log", "w") as log,
        streamlit_app(app_env(tiny_pair_dirs), log) as app,
    ):
        yield app.url


def decode_delta(s: Session) -> str:
    return s.page.locator(
        f".st-key-{DELTA_KEY} [data-testid='stSliderThumbValue']"
    ).first.inner_text()


def go_to(s: Session, title: str) -> None:
    """Navigate as a user does, by the sidebar's link (the session stays the same)."""
    s.page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    s.idle()


def test_prompt_and_delta_survive_a_playground_visit(server, browser):
    s = Session(browser, server)
    try:
        s.open("decode")
        box = s.page.get_by_role("textbox", name="Prompt")
        box.fill(PROMPT)
        box.press("Control+Enter")
        s.idle()
        thumb = s.page.locator(f".st-key-{DELTA_KEY}").get_by_role("slider")
        thumb.focus()
        for _ in range(3):
            thumb.press("ArrowRight")
        s.idle()
        delta = decode_delta(s)
        assert delta != PARAM.show_step(PARAM.default)
        s.shorten()
        s.generate(run_id=1)

        go_to(s, "Playground")
        pg = s.page.get_by_role("slider", name="δ (nats): cactus, cactus-exact")
        pg.focus()
        pg.press("ArrowRight")  # the Playground's analysis fragment reruns alone
        s.idle()
        pg.press("ArrowRight")
        s.idle()
        # the fragment's reruns keep the address bar current (page_links.linked_fragment)
        group = headline_group().key
        shown = s.page.locator(f".st-key-pg_{group} [data-testid='stSliderThumbValue']")
        query = parse_qs(urlparse(s.page.url).query)
        assert float(query[group][0]) == pytest.approx(float(shown.first.inner_text()))
        # ... and "Copy link", drawn by the last full run, catches up when it is opened
        s.page.get_by_role("button", name="Copy link").click()
        s.idle()
        code = s.page.locator('[data-testid="stPopoverBody"] [data-testid="stCode"] code')
        copied = parse_qs(urlparse(code.first.inner_text().strip()).query)
        assert float(copied[group][0]) == pytest.approx(float(shown.first.inner_text()))
        s.page.keyboard.press("Escape")

        go_to(s, "Decode")
        s.page.get_by_text("Run 1:").wait_for()
        assert s.page.get_by_role("textbox", name="Prompt").input_value() == PROMPT
        assert decode_delta(s) == delta
        s.check()
    finally:
        s.close()


def test_a_seed_change_on_step_through_says_it_starts_again(server, browser):
    s = Session(browser, server)
    try:
        s.open("step")
        s.page.get_by_role("button", name="Next round").click()
        s.idle()
        s.page.get_by_text("Round 2").first.wait_for()
        s.set_seed(7)
        note = "New text (seed 0 → 7 changed): Step through starts again at round 1."
        s.page.get_by_text(note).wait_for()
        assert s.page.get_by_text("Round 1").count() >= 1
        s.page.get_by_role("button", name="Next step").click()
        s.idle()
        assert s.page.get_by_text(note).count() == 0  # said once, on the run that restarted
        s.check()
    finally:
        s.close()
