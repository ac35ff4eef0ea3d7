"""The app in a real browser: `streamlit run` on a free port, driven by Chromium through
Playwright. Every page opens without a Streamlit exception box or an uncaught page error; the
Playground slider moves the numbers; Generate streams tokens; two users decoding at once each
get exactly what they get alone. Screenshots go to test-artifacts/.

Needs Chromium at /usr/bin/chromium (Debian package `chromium`; .ci/run installs it). The app
runs on the tiny random pair saved to folders; CACTUS_BROWSER_PAIR=embedded uses the embedded
pair instead (realistic text, slower).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit_server import streamlit_app, wait_idle

from cactus_core.app.shared.param_groups import headline_group

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
EXCEPTION = '[data-testid="stException"]'
TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def server(tiny_pair_dirs) -> Iterator[str]:
    # One torch thread: the CI machine has two cores, and OpenMP spinning under load stalls.
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if os.environ.get("CACTUS_BROWSER_PAIR") != "embedded":
        env["CACTUS_LAB_VERIFIER"] = str(tiny_pair_dirs[0])
        env["CACTUS_LAB_DRAFT"] = str(tiny_pair_dirs[1])
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "streamlit-server.log", "w") as log, streamlit_app(env, log) as app:
        yield app.url


class Session:
    """One user: a browser context with its own page and a record of page errors."""

    def __init__(self, browser, url: str) -> None:
        self.context = browser.new_context(viewport={"width": 1440, "height": 1000})
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.url = url

    def open(self, path: str = "") -> None:
        self.page.goto(f"{self.url}/{path}")
        self.idle()

    def idle(self) -> None:
        """Wait until the script run that the last action started has finished."""
        wait_idle(self.page, TIMEOUT_MS)
        # elements still loading show a skeleton (hidden tabs keep theirs)
        self.page.wait_for_function(
            "() => ![...document.querySelectorAll('[data-testid=\"stSkeleton\"]')]"
            ".some(e => e.offsetParent !== null)",
            timeout=TIMEOUT_MS,
        )

    def check(self) -> None:
        assert self.page.locator(EXCEPTION).count() == 0, self.page.locator(
            EXCEPTION
        ).first.inner_text()
        assert not self.errors, self.errors

    def shot(self, name: str, height: int = 2400) -> None:
        # The app scrolls inside its own container, so a full-page shot needs a tall window.
        ARTIFACTS.mkdir(exist_ok=True)
        size = self.page.viewport_size
        self.page.set_viewport_size({"width": size["width"], "height": height})
        self.page.wait_for_timeout(800)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
        self.page.set_viewport_size(size)

    def metric(self, label_start: str) -> str:
        card = self.page.locator('[data-testid="stMetric"]').filter(has_text=label_start).first
        return card.locator('[data-testid="stMetricValue"]').inner_text()

    def set_seed(self, seed: int) -> None:
        box = self.page.get_by_label("Seed")
        box.fill(str(seed))
        box.press("Enter")
        self.idle()

    def shorten(self, presses: int = 14) -> None:
        """Max new tokens 128 -> 16 (8 per step), to keep the test short."""
        thumb = self.page.get_by_role("slider", name="Max new tokens")
        thumb.focus()
        for _ in range(presses):
            thumb.press("ArrowLeft")
        self.idle()

    def generate(self, run_id: int, wait: bool = True) -> None:
        self.page.locator("button", has_text="Generate").first.click()
        if wait:
            self.wait_run(run_id)

    def wait_run(self, run_id: int) -> str:
        self.page.get_by_text(f"Run {run_id}:").wait_for()
        self.idle()
        return self.transcript()

    def transcript(self) -> str:
        return self.page.locator(".cactus-transcript").first.inner_text()

    def close(self) -> None:
        self.context.close()


def test_every_page_in_a_real_browser(server, browser):
    s = Session(browser, server)
    try:
        s.open()
        s.page.get_by_role("heading", name="Cactus Lab").wait_for()
        s.check()
        s.shot("overview")

        s.open("playground")
        s.page.get_by_text("Taylor closed form against the exact root").wait_for()
        before = s.metric("cactus δ=0.21")
        # the worked example starts at its own delta, 0.21, not the rules' default
        thumb = s.page.get_by_role("slider", name="δ (nats): cactus, cactus-exact")
        thumb.focus()
        steps = headline_group().param.options(0.21)  # the log slider's values, 0.21 among them
        for _ in range(steps.index(0.5) - steps.index(0.21)):
            thumb.press("ArrowRight")  # delta 0.21 -> 0.50, one log step at a time
        s.page.locator('[data-testid="stMetric"]', has_text="cactus δ=0.5:").wait_for()
        s.idle()
        after = s.metric("cactus δ=0.5:")
        assert (before, after) == ("85.9%", "100.0%")
        s.check()
        s.shot("playground")

        s.open("decode")
        # the run that loaded the pair already says so in the sidebar, not only the next one
        sidebar = s.page.locator('[data-testid="stSidebar"]')
        assert sidebar.get_by_text("Loaded: ").count() == 1
        s.shorten()
        s.generate(run_id=1)
        assert s.page.locator(".cactus-transcript span").count() > 0
        s.page.get_by_text("Round 1 ·").first.click()
        details = s.page.locator('[data-testid="stExpanderDetails"]').filter(
            has=s.page.locator('[data-testid="stButtonGroup"]')
        )
        details.first.locator('[data-testid="stButtonGroup"] button').first.click()
        s.page.get_by_text("Round 1, slot").first.wait_for()
        s.idle()
        s.check()
        s.shot("decode")

        s.open("playground")
        s.page.get_by_text("From a decode run").click()
        s.idle()
        s.check()
        s.shot("playground-from-run")
    finally:
        s.close()


def test_two_users_at_once_get_what_they_get_alone(server, browser):
    users = [Session(browser, server), Session(browser, server)]
    try:
        alone = []
        for seed, u in zip((11, 12), users, strict=True):
            u.open("decode")
            u.set_seed(seed)
            u.shorten()
            u.generate(run_id=1)
            alone.append(u.transcript())
        assert alone[0] != alone[1]
        for u in users:  # both start before either finishes
            u.generate(run_id=2, wait=False)
        together = [u.wait_run(2) for u in users]
        assert together == alone
        for u in users:
            u.check()
    finally:
        for u in users:
            u.close()
