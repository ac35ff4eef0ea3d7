"""The Frontier's k tuner is no dead end, in a real browser (Chromium through Playwright,
`streamlit run` on a free port, the tiny pair, a fresh cost cache): where the prediction
needs the pair's costs, the page offers to measure them, says how long that takes, shows a
progress bar with the time left while it runs, and then draws the predicted speedup against k."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from streamlit_server import streamlit_app
from test_browser import ARTIFACTS, Session
from test_browser_step import app_env

from cactus_core.app.shared.k_panel import MEASURE_LABEL

pytestmark = pytest.mark.browser

# Every text a progress bar showed while the page ran, recorded in the browser.
WATCH = """() => {
  window.__progress = [];
  new MutationObserver(() => {
    document.querySelectorAll('[data-testid="stProgress"]').forEach(
      e => window.__progress.push(e.innerText));
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def server(tiny_pair_dirs, tmp_path_factory) -> Iterator[str]:
    env = {**app_env(tiny_pair_dirs), "CACTUS_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        open(ARTIFACTS / "streamlit-k-tuner-server.log", "w") as log,
        streamlit_app(env, log) as app,
    ):
        yield app.url


def test_the_frontier_measures_the_costs_its_k_tuner_needs(server, browser):
    s = Session(browser, server)
    try:
        s.open("frontier")
        section = s.page.get_by_role("heading", name="Draft length k: predicted speedup")
        section.wait_for()
        section.scroll_into_view_if_needed()
        s.page.get_by_text("short runs (about two minutes on two CPU cores").first.wait_for()
        s.page.evaluate(WATCH)
        s.page.get_by_role("button", name=MEASURE_LABEL).first.click()
        s.page.locator(".st-key-fr_k_chart, [data-testid='stPlotlyChart']").last.wait_for()
        s.page.get_by_text("Costs measured on this machine").first.wait_for()
        s.idle()
        seen = s.page.evaluate("() => window.__progress")
        assert any("Timing run" in t and "s left" in t for t in seen), seen
        assert s.page.get_by_role("button", name=MEASURE_LABEL).count() == 0
        assert s.page.locator(".st-key-fr_k_chart").count() == 1
        s.check()
    finally:
        s.close()
