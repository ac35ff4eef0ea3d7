"""Answer quality in a real Chromium: the Frontier shows the shipped quality reference at once
(the tuner that keeps quality with its held-out confirmation, the paired task score and the
long answers against divergence), and on the user's own task-set sweep the same tuner answers
and, on a click, confirms its answer on the held-out split.

Runs `streamlit run app.py` with the tiny pair saved to folders, as test_browser_frontier does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit_server import fill, slider_from_start, tiny_pair_app, wait_idle

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def server(tiny_pair_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-quality")
    with tiny_pair_app(tiny_pair_dirs, root) as url:
        yield url


def _traces(page, key: str) -> list[dict]:
    return page.evaluate(
        """key => {
        const el = document.querySelector(`.st-key-${key} .js-plotly-plot`);
        return (el && el.data || []).map(t => ({name: t.name, x: t.x, y: t.y}));
    }""",
        key,
    )


def _title(page, key: str, axis: str) -> str:
    return page.evaluate(
        """([key, axis]) => {
        const t = document.querySelector(`.st-key-${key} .js-plotly-plot`).layout[axis].title;
        return typeof t === 'string' ? t : t.text;
    }""",
        [key, axis],
    )


def _answer(page, prefix: str) -> str:
    """The tuner's answer, as the page shows it."""
    alert = page.locator(f".st-key-{prefix}_q_answer [data-testid='stAlert']")
    alert.wait_for()
    return alert.inner_text()


def test_the_frontier_shows_quality_and_keeps_it(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    try:
        _reference(page, server)
        _own_sweep(page)
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "frontier-quality-failure.png"), full_page=True)
        raise
    finally:
        page.close()


def _reference(page, url: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{url}/frontier")
    page.get_by_role("heading", name="Do the answers get worse? (quality reference)").wait_for()
    expect(page.get_by_text("Where it starts, per rule: cactus:")).to_be_visible()
    wait_idle(page)
    first = _answer(page, "fr_qref")
    assert "Held out (106 prompts, never tuned on)" in first, first
    assert "tokens per call at emitted KL" in first
    # a tighter budget gives another (slower) answer, still confirmed on the held-out split
    fill(page, "Emitted KL ≤ (nats per token)", "0.001")
    wait_idle(page)
    tight = _answer(page, "fr_qref")
    assert tight != first and "emitted KL" in tight, tight

    tabs = page.locator(".stTabs").filter(has=page.get_by_role("tab", name="keep quality"))
    tabs.get_by_role("tab", name="task score").click()
    page.locator(".st-key-fr_qref_task .js-plotly-plot").wait_for(state="visible")
    assert _title(page, "fr_qref_task", "xaxis").startswith("task score − the lossless")
    sps = [t for t in _traces(page, "fr_qref_task") if t["name"] == "sps"]
    assert sps and sps[0]["x"] == [0]

    tabs.get_by_role("tab", name="long answers").click()
    page.locator(".st-key-fr_qref_long .js-plotly-plot").wait_for(state="visible")
    assert _title(page, "fr_qref_long", "yaxis").startswith("share of answers ending in a loop")
    page.locator(".st-key-fr_qref_long_view").get_by_text("distinct 4-grams").click()
    wait_idle(page)
    page.wait_for_function(
        """() => { const el = document.querySelector('.st-key-fr_qref_long .js-plotly-plot');
        const t = el && el.layout.yaxis.title;
        return t && (t.text || t).startsWith('distinct'); }"""
    )
    ys = [y for t in _traces(page, "fr_qref_long") for y in (t["y"] or [])]
    assert ys and all(0 < y <= 1 for y in ys)
    assert page.locator("[data-testid='stException']").count() == 0


def _own_sweep(page) -> None:
    page.get_by_text("Built-in task set", exact=True).click()
    # the task set's slider is a new widget (its key names the prompt count): wait for it
    page.get_by_text("of 324 prompts; the first:").wait_for()
    wait_idle(page)
    slider_from_start(page, "Prompts to use", right=2)  # 3 prompts of the tuning split
    slider_from_start(page, "Max new tokens", right=1)  # 16 tokens
    fill(page, "cactus: values of delta", "3")
    page.get_by_text("2 settings + verifier-only × 3 prompts").wait_for()
    page.get_by_role("button", name="Run sweep").click()
    page.locator(".st-key-fr_chart_tpc .js-plotly-plot").wait_for(state="visible", timeout=240_000)
    wait_idle(page)
    own_tabs = page.locator(".stTabs").filter(has=page.get_by_role("tab", name="tokens/s"))
    own_tabs.get_by_role("tab", name="task score").click()
    page.locator(".st-key-fr_own_q_budget input").wait_for(state="visible")
    page.locator(".st-key-fr_own_q_budget input").fill("10")  # the widest budget it takes
    page.locator(".st-key-fr_own_q_budget input").press("Enter")
    wait_idle(page)
    answer = _answer(page, "fr_own")
    assert answer.startswith("cactus δ=3: "), answer
    assert "may go unseen" in answer  # three prompts cannot see a 5-point drop
    page.get_by_role("button", name="Confirm on the held-out split (runs)").click()
    wait_idle(page, timeout_ms=240_000)
    confirmed = _answer(page, "fr_own")
    assert "Held out (106 prompts, never tuned on): task score − sps" in confirmed, confirmed
    assert page.locator("[data-testid='stException']").count() == 0
