"""The 2026 rules in a real Chromium: a Frontier sweep of FLy, the KL judge and the learned
judge on the task set (FLy's and the learned judge's points marked estimated, the divergence
axis switched to total variation, the task score tab), and each in focus on the Playground.

Runs `streamlit run app.py` with the tiny pair saved to folders, as test_browser_frontier does,
and a learned judge for the tiny verifier's hidden states named by CACTUS_LEARNED_JUDGE.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from streamlit_server import fill, pick_rule, slider_from_start, tiny_pair_app, wait_idle

from cactus_core.maths.rules.learned_judge import JUDGE_ENV, Judge

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def server(tiny_pair, tiny_pair_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-2026")
    size = tiny_pair.verifier.config.hidden_size  # a judge for the tiny verifier's hidden states
    weights = torch.randn(2 * size, generator=torch.Generator().manual_seed(0))
    Judge(weights, 0.0, "the tiny test verifier").save(root / "judge.json")
    with tiny_pair_app(tiny_pair_dirs, root, **{JUDGE_ENV: str(root / "judge.json")}) as url:
        yield url


def _traces(page, key: str) -> list[dict]:
    """The chart's traces as Plotly holds them: name, x and the x error bars."""
    return page.evaluate(
        """key => {
        const el = document.querySelector(`.st-key-${key} .js-plotly-plot`);
        return (el && el.data || []).map(t => ({name: t.name, x: t.x,
            error_x: t.error_x ? (t.error_x.array || null) : null}));
    }""",
        key,
    )


def _x_title(page, key: str) -> str:
    return page.evaluate(
        """key => {
        const el = document.querySelector(`.st-key-${key} .js-plotly-plot`);
        const t = el.layout.xaxis.title;
        return typeof t === 'string' ? t : t.text;
    }""",
        key,
    )


def test_frontier_sweeps_the_2026_rules_on_the_task_set(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    try:
        _frontier(page, server)
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "frontier-2026-failure.png"), full_page=True)
        raise
    finally:
        page.close()


def _frontier(page, url: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{url}/frontier")
    page.get_by_role("heading", name="Frontier", exact=True).wait_for()
    page.get_by_text("Built-in task set", exact=True).click()
    # the task set's slider is a new widget (its key names the prompt count): wait for it
    page.get_by_text("of 324 prompts; the first:").wait_for()
    wait_idle(page)
    slider_from_start(page, "Prompts to use", right=2)  # 3 prompts, each with an answer
    slider_from_start(page, "Max new tokens", right=1)  # 16 tokens
    pick_rule(page, "fly")
    pick_rule(page, "kl-judge")
    pick_rule(page, "learned-judge")
    fill(page, "cactus: values of delta", "1")
    fill(page, "fly: values of theta", "0")
    fill(page, "kl-judge: values of tau", "30")
    fill(page, "learned-judge: values of threshold", "0.5")
    page.get_by_text("5 settings + verifier-only × 3 prompts").wait_for()
    page.get_by_role("button", name="Run sweep").click()

    key = "fr_chart_tpc"
    page.locator(f".st-key-{key} .js-plotly-plot").wait_for(state="visible", timeout=240_000)
    assert page.locator("[data-testid='stException']").count() == 0
    names = [t["name"] for t in _traces(page, key)]
    assert "fly (estimated π)" in names and "kl-judge" in names, names
    assert "learned-judge (estimated π)" in names, names
    (fly,) = [t for t in _traces(page, key) if t["name"] == "fly (estimated π)"]
    assert fly["error_x"] is not None  # its divergence carries the estimate's interval
    # said under the reference (FLy is in it) and under this sweep's chart
    expect(page.get_by_text("Open markers on a dotted line").last).to_be_visible()
    assert page.get_by_text("Open markers on a dotted line").count() == 2
    kl_x = fly["x"]

    page.get_by_text("emitted TV(pi, q) per token", exact=True).click()
    page.wait_for_function(
        """key => { const el = document.querySelector(`.st-key-${key} .js-plotly-plot`);
        const t = el && el.layout.xaxis.title;
        return t && (t.text || t).startsWith('emitted TV'); }""",
        arg=key,
    )
    (fly,) = [t for t in _traces(page, key) if t["name"] == "fly (estimated π)"]
    assert fly["x"] != kl_x and all(0 <= x <= 1 for x in fly["x"])
    assert _x_title(page, key).startswith("emitted TV")

    wait_idle(page)  # a rerun in flight shows the old tabs beside the new ones
    page.get_by_role("tab", name="task score").last.click()  # the sweep's, below the reference's
    task = page.locator(".st-key-fr_chart_task .js-plotly-plot")
    task.wait_for(state="visible", timeout=60_000)
    # it opens on the paired difference from sps: a setting's score minus sps's, sps at 0
    assert _x_title(page, "fr_chart_task").startswith("task score − the lossless")
    xs = [x for t in _traces(page, "fr_chart_task") for x in (t["x"] or [])]
    assert xs and all(-1 <= x <= 1 for x in xs)
    (sps,) = [t for t in _traces(page, "fr_chart_task") if t["name"] == "sps"]
    assert sps["x"] == [0]
    # the sweep's task tab sits below the quality reference's, which says the same: the last
    expect(
        page.get_by_text("on the same prompts and seeds, with the paired 95%").last
    ).to_be_visible()
    page.get_by_text("score", exact=True).last.click()
    wait_idle(page)
    page.wait_for_function(
        """() => { const el = document.querySelector('.st-key-fr_chart_task .js-plotly-plot');
        const t = el && el.layout.xaxis.title;
        return t && (t.text || t).startsWith('task score (share'); }"""
    )
    xs = [x for t in _traces(page, "fr_chart_task") for x in (t["x"] or [])]
    assert xs and all(0 <= x <= 1 for x in xs)
    expect(page.get_by_text("share of checkable answers right (horizontal bars")).to_be_visible()
    assert page.locator("[data-testid='stException']").count() == 0


def test_playground_puts_the_2026_rules_in_focus(server, browser):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    try:
        page.goto(f"{server}/playground")
        page.get_by_role("heading", name="Playground").wait_for()
        focus = page.locator(".st-key-pg_focus")
        focus.get_by_text("kl-judge", exact=True).click()
        expect(page.get_by_text("Trusts the draft where its distribution").first).to_be_visible()
        focus.get_by_text("fly", exact=True).click()
        expect(page.get_by_text("its top-3 entropy at least θ").first).to_be_visible()
        focus.get_by_text("learned-judge", exact=True).click()
        expect(page.get_by_text("predicts the mismatch would not change").first).to_be_visible()
        assert page.locator("[data-testid='stException']").count() == 0
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "playground-2026-failure.png"), full_page=True)
        raise
    finally:
        page.close()
