"""The Frontier page in a real Chromium: run a small sweep on the tiny pair, see the charts,
click a point and read that setting's output next to verifier-only.

Runs `streamlit run app.py` on a free port with the tiny pair saved to folders (the sidebar's
custom-pair path picks them up from the environment) and drives Debian's chromium through
Playwright.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pytest
from streamlit_server import streamlit_app

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def server(tiny_pair_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-frontier")
    env = {
        **os.environ,
        "CACTUS_LAB_VERIFIER": str(tiny_pair_dirs[0]),
        "CACTUS_LAB_DRAFT": str(tiny_pair_dirs[1]),
        "CACTUS_CACHE_DIR": str(root / "cache"),
        "OMP_NUM_THREADS": "1",
        "CACTUS_LAB_TIMING_LOG": str(root / "timing.jsonl"),
    }
    with open(root / "streamlit.log", "w") as log, streamlit_app(env, log, poll_s=0.5) as app:
        yield app.url, root / "timing.jsonl"


def _fill(page, label: str, value: str) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    page.wait_for_timeout(400)


def _slider_to_start(page, label: str, right: int = 0) -> None:
    thumb = page.get_by_role("slider", name=label)
    thumb.focus()
    thumb.press("Home")
    for _ in range(right):
        thumb.press("ArrowRight")
    page.wait_for_timeout(400)


def test_frontier_sweep_click_a_point_and_read_outputs(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    try:
        _sweep_click_and_read(page, server[0])
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "frontier-failure.png"), full_page=True)
        raise
    finally:
        page.close()


def _sweep_click_and_read(page, url: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{url}/frontier")
    page.get_by_role("heading", name="Frontier", exact=True).wait_for()
    _slider_to_start(page, "Prompts to use", right=1)  # 2 prompts
    _slider_to_start(page, "Max new tokens")  # 8 tokens
    # the form starts with the default rule and the lossless one (one setting)
    _fill(page, "cactus: values of delta", "0, 1")
    page.get_by_text("3 settings + verifier-only × 2 prompts").wait_for()
    page.get_by_role("button", name="Run sweep").click()

    plot = page.locator(".st-key-fr_chart_tpc .js-plotly-plot").first
    plot.wait_for(state="visible", timeout=240_000)
    assert page.locator("[data-testid='stException']").count() == 0
    # the cactus series is the third trace (after the reference sweep's faint points and
    # verifier-only); click its δ=1 point
    points = plot.locator(".scatterlayer .trace").nth(2).locator(".points path")
    assert points.count() == 2
    picker = page.get_by_role("combobox", name="Setting (or click a point)")
    # a click that lands while Streamlit is still rerunning after the sweep can be dropped;
    # click again (up to three times) rather than fail on the race
    for attempt in range(3):
        points.nth(1).click(force=True)
        try:
            expect(picker).to_have_value("cactus δ=1", timeout=20_000)
            break
        except AssertionError:
            if attempt == 2:
                raise
    # while Streamlit reruns after the click, the old outputs panel can still be on screen
    expect(page.get_by_text("verifier-only (same prompt, same seed)")).to_have_count(
        1, timeout=60_000
    )
    assert page.locator("[data-testid='stException']").count() == 0


# What a marker redraw may cost on the server (the fragment's own run: the widgets, the
# marker's position on the curve and the figure sent to the browser).
MARKER_BUDGET_MS = 150
MOVES = 8


def _current_marker(page) -> list[float]:
    """The compact frontier's 'current setting' point, read from Plotly's own data."""
    return page.evaluate(
        """() => {
        for (const el of document.querySelectorAll('.js-plotly-plot')) {
            const t = (el.data || []).find(d => d.name === 'current setting');
            if (t) return [t.x[0], t.y[0]];
        }
        return null;
    }"""
    )


def test_decode_marker_follows_delta_within_budget(server, browser):
    from playwright.sync_api import expect

    url, timing = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    try:
        page.goto(f"{url}/decode")
        page.get_by_role("heading", name="Decode").wait_for()
        # The chart's title is drawn by Plotly in the browser, which loads its bundle first.
        expect(page.get_by_text("where this setting sits")).to_be_visible(timeout=60_000)
        start = _current_marker(page)
        assert start is not None
        # The first run goes on to load the pair; a move is measured once the page is idle.
        page.get_by_text("Press Generate to decode the prompt.").wait_for()
        thumb = page.get_by_role("slider", name="δ (nats)")
        before = timing.read_text().count("decode_marker") if timing.exists() else 0
        seen = start
        client_ms = []
        for _ in range(MOVES):
            thumb.focus()
            t0 = time.perf_counter()
            thumb.press("ArrowRight")  # one step of delta
            page.wait_for_function(
                "old => { for (const el of document.querySelectorAll('.js-plotly-plot')) {"
                " const t = (el.data || []).find(d => d.name === 'current setting');"
                " if (t && t.x[0] !== old[0]) return true; } return false; }",
                arg=seen,
            )
            client_ms.append((time.perf_counter() - t0) * 1000)
            seen = _current_marker(page)
            # Let the rerun finish (it logs after sending the chart) before the next press,
            # which would otherwise interrupt it and leave no timing.
            done = before + len(client_ms)
            for _ in range(50):
                if timing.read_text().count("decode_marker") >= done:
                    break
                page.wait_for_timeout(100)
        assert seen[0] > start[0]  # more delta, more KL
        assert page.locator("[data-testid='stException']").count() == 0
        lines = [json.loads(x) for x in timing.read_text().splitlines()]
        server_ms = [x["ms"] for x in lines if x["name"] == "decode_marker"][before:]
        assert len(server_ms) == MOVES
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "decode-marker-ms.json").write_text(
            json.dumps({"server_ms": server_ms, "client_ms": client_ms})
        )
        assert statistics.median(server_ms) <= MARKER_BUDGET_MS, server_ms
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "decode-marker-failure.png"), full_page=True)
        raise
    finally:
        page.close()


# The Frontier page's open, against a bare Streamlit page with one Plotly chart opened in the
# same run. Most of an open is Chromium loading Streamlit's and Plotly's scripts (the bare page
# alone takes about 5 s on a 2 GHz 2-core machine), which no page can avoid, so the page is held
# to a ratio of that floor; the absolute times, for the docs' 10 s target, go to test-artifacts/.
OPEN_RATIO_BUDGET = 2.5
OPENS = 3
BARE_PAGE = """
import plotly.graph_objects as go
import streamlit as st

st.title("Bare")
st.plotly_chart(go.Figure(go.Scatter(x=[0, 1, 2], y=[1, 3, 2])), key="bare")
"""


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-bare")
    (root / "bare.py").write_text(BARE_PAGE)
    with streamlit_app(dict(os.environ), poll_s=0.5, script=root / "bare.py") as app:
        yield app.url


def _open_bare(page, url: str) -> float:
    t0 = time.perf_counter()
    page.goto(url)
    page.locator(".st-key-bare .js-plotly-plot").wait_for(state="visible", timeout=60_000)
    return time.perf_counter() - t0


def _open_frontier(page, url: str) -> float:
    """Seconds from page.goto to the reference frontier, its chart and the tuner's answer."""
    t0 = time.perf_counter()
    page.goto(f"{url}/frontier")
    page.get_by_text("Reference sweep shipped with the lab").wait_for(timeout=60_000)
    page.locator(".st-key-fr_ref_tpc .js-plotly-plot").wait_for(state="visible", timeout=60_000)
    page.get_by_text("estimated tokens per call").wait_for(timeout=60_000)
    return time.perf_counter() - t0


def test_frontier_opens_on_the_reference(server, bare_server, browser):
    from playwright.sync_api import expect

    url, _ = server
    # Fresh pages (no cached scripts), as a first visit, the two kinds interleaved so that
    # anything else on the machine slows both alike; medians of three.
    bare_s, opened_s = [], []
    for i in range(OPENS):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            bare_s.append(_open_bare(page, bare_server))
        finally:
            page.close()
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            opened_s.append(_open_frontier(page, url))
            if i == 0:
                # The other tabs show their content: the limit chart, then the efficiency table.
                page.get_by_role("tab", name="acceptance vs the limit").click()
                limit = page.locator(".st-key-fr_ref_limit .js-plotly-plot")
                limit.wait_for(state="visible", timeout=60_000)
                expect(limit.get_by_text("limit (best any rule could reach)")).to_be_visible()
                page.get_by_role("tab", name="efficiency table").click()
                panel = page.get_by_role("tabpanel", name="efficiency table")
                panel.locator("[data-testid='stDataFrame']").wait_for(timeout=60_000)
                assert page.locator("[data-testid='stException']").count() == 0
        finally:
            page.close()
    ratio = statistics.median(opened_s) / statistics.median(bare_s)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "frontier-open-s.json").write_text(
        json.dumps({"open_s": opened_s, "bare_page_s": bare_s, "ratio": ratio})
    )
    assert ratio <= OPEN_RATIO_BUDGET, (opened_s, bare_s)
