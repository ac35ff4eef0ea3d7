"""The Frontier page in a real Chromium: run a small sweep on the tiny pair, see the charts,
click a point and read that setting's output next to verifier-only.

Runs `streamlit run app.py` on a free port with the tiny pair saved to folders (the sidebar's
custom-pair path picks them up from the environment) and drives Debian's chromium through
Playwright.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit_server import fill, slider_from_start, tiny_pair_app

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def server(tiny_pair_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-frontier")
    with tiny_pair_app(
        tiny_pair_dirs, root, CACTUS_LAB_TIMING_LOG=str(root / "timing.jsonl")
    ) as url:
        yield url, root / "timing.jsonl"


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
    slider_from_start(page, "Prompts to use", right=1)  # 2 prompts
    slider_from_start(page, "Max new tokens")  # 8 tokens
    # the form starts with the default rule and the lossless one (one setting)
    fill(page, "cactus: values of delta", "0, 1")
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


# Moves of delta; how long each redraw takes is a benchmark (benchmarks/bench_frontier_pages.py).
MOVES = 3


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


def test_decode_marker_follows_delta(server, browser):
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
        # The first run goes on to load the pair; a move is made once the page is idle.
        page.get_by_text("Press Generate to decode the prompt.").wait_for()
        thumb = page.get_by_role("slider", name="δ (nats)")
        before = timing.read_text().count("decode_marker") if timing.exists() else 0
        seen = start
        for moved in range(1, MOVES + 1):
            thumb.focus()
            thumb.press("ArrowRight")  # one step of delta
            page.wait_for_function(
                "old => { for (const el of document.querySelectorAll('.js-plotly-plot')) {"
                " const t = (el.data || []).find(d => d.name === 'current setting');"
                " if (t && t.x[0] !== old[0]) return true; } return false; }",
                arg=seen,
            )
            seen = _current_marker(page)
            # Let the rerun finish (it logs after sending the chart) before the next press,
            # which would otherwise interrupt it and leave no timing.
            for _ in range(50):
                if timing.read_text().count("decode_marker") >= before + moved:
                    break
                page.wait_for_timeout(100)
        assert seen[0] > start[0]  # more delta, more KL
        assert page.locator("[data-testid='stException']").count() == 0
        lines = [json.loads(x) for x in timing.read_text().splitlines()]
        assert len([x for x in lines if x["name"] == "decode_marker"][before:]) == MOVES
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "decode-marker-failure.png"), full_page=True)
        raise
    finally:
        page.close()


def test_frontier_opens_on_the_reference(server, browser):
    """A first visit (a fresh tab) shows the reference frontier, its chart and the tuner's
    answer, and the other tabs their content. How long the open takes, against a bare page,
    is a benchmark (benchmarks/bench_frontier_pages.py)."""
    from playwright.sync_api import expect

    url, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/frontier")
        page.get_by_text("Reference sweep shipped with the lab").wait_for(timeout=60_000)
        page.locator(".st-key-fr_ref_tpc .js-plotly-plot").wait_for(state="visible", timeout=60_000)
        page.get_by_text("estimated tokens per call").wait_for(timeout=60_000)
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
