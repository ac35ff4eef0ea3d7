"""Draft trees tell one story in a real browser (Chromium through Playwright, `streamlit run`
on a free port, the embedded pair, whose feature draft can draft trees): on Decode the run's
caption names the tree (not "k = 4"), and the count of rejected drafts with q_n = 0 under the
run is the one "Why drafts get rejected" gives, every rejected candidate of every tree
counted; on Step through, the same decode's rejected candidates are there too, not "No draft
was rejected"."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from streamlit_server import streamlit_app
from test_browser import ARTIFACTS, Session

pytestmark = pytest.mark.browser

QUERY = {"drafting": "tree", "seed": "0", "max_new": "32", "prompt": "Tell me about cacti."}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", CACTUS_LAB_PRELOAD="0")
    env.pop("CACTUS_LAB_VERIFIER", None)
    env.pop("CACTUS_LAB_DRAFT", None)
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        open(ARTIFACTS / "streamlit-trees-server.log", "w") as log,
        streamlit_app(env, log, timeout_s=180) as app,
    ):
        yield app.url


def why_rejected(s: Session) -> tuple[int, str]:
    """The section's count and its summary line."""
    section = s.page.locator('[data-testid="stExpander"]', has_text="Why drafts get rejected")
    title = section.locator("summary").inner_text()
    count = int(re.search(r"Why drafts get rejected \((\d+)\)", title).group(1))
    section.locator("summary").click()
    s.idle()
    summary = section.get_by_text(re.compile("rejected; |No draft was rejected")).first
    return count, summary.inner_text()


def test_a_tree_run_counts_its_rejected_candidates_everywhere(server, browser):
    s = Session(browser, server)
    try:
        s.open(f"decode?{urlencode(QUERY)}")
        s.generate(run_id=1)
        caption = s.page.get_by_text("Run 1:").first.inner_text()
        assert "draft tree of 8 nodes" in caption and "k = 4" not in caption
        line = s.page.get_by_text(re.compile(r"rejected drafts sat outside q's support")).first
        zero, rejected = (int(x) for x in re.search(r"(\d+) of (\d+)", line.inner_text()).groups())
        count, summary = why_rejected(s)
        assert count == rejected > 0
        assert summary.startswith(f"{rejected} draft(s) rejected; {zero} had q_n = 0")
        s.check()

        s.open(f"step?{urlencode(QUERY)}")
        s.page.get_by_role("button", name="Finish").click()
        s.idle()
        step_count, step_summary = why_rejected(s)
        assert step_count == rejected and "No draft was rejected" not in step_summary
        s.check()
    finally:
        s.close()
