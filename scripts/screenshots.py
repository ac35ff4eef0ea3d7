"""Screenshots for the docs: `.venv/bin/python scripts/screenshots.py` writes every page as a
first-time visitor sees it at 1440×900 (docs/screens/*.png) and every kind of step on the Step
through page (docs/step/*.png), and a small sweep of the 2026 rules on the task set (the
Frontier's TV axis and task score, docs/screens/8-*, 9-*), the shipped quality reference
(docs/screens/12-*, 13-*); with the pages, the views the third look changed
(docs/screens/10-*, 11-*). `--only pages`, `--only steps`, `--only rules` or `--only quality`
makes one set.

Runs `streamlit run app.py` on a free port with the embedded pair (CPU) and drives headless
Chromium (/usr/bin/chromium, Playwright). Steps open through links (the same query strings a
user would copy: the step, or a `jump` to the first step of a kind) and the step's card is
photographed. The app's defaults (prompt, rule and parameters, sampling) and seed 0 are used
throughout, so the pictures are reproducible up to the timings on screen.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the browser helpers the browser tests use

from streamlit_server import (  # noqa: E402
    fill,
    launch_chromium,
    pick_rule,
    slider_from_start,
    streamlit_app,
)

from cactus_core.app.shared.links import K  # noqa: E402

CARD = ".st-key-step_card"
APP_IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
TIMEOUT_MS = 300_000

# name -> (query, Next step clicks after opening): one picture per kind of step
SHOTS: dict[str, tuple[dict[str, str], int]] = {
    "1-draft": ({"round": "0", "step": "0"}, 0),
    "2-verify": ({"round": "0", "step": str(int(K.default))}, 0),
    "3-decide-rejected": ({"jump": "rejection"}, 0),
    "4-residual": ({"jump": "rejection"}, 1),
    "5-summary": ({"jump": "rejection"}, 2),
    "6-decide-rescued": ({"jump": "rescue"}, 0),
    "7-bonus": ({"jump": "bonus"}, 0),
}


def idle(page) -> None:
    page.wait_for_timeout(500)
    page.locator(APP_IDLE).wait_for(timeout=TIMEOUT_MS)


def shoot(page, url: str, query: dict[str, str], clicks: int, path: Path) -> None:
    page.goto(f"{url}/step?{urlencode({'seed': '0', **query})}")
    idle(page)
    page.locator(CARD).wait_for(timeout=TIMEOUT_MS)
    for _ in range(clicks):
        page.get_by_role("button", name="Next step").click()
        idle(page)
    page.wait_for_timeout(800)  # let the charts finish drawing
    page.locator(CARD).screenshot(path=str(path))


def why_rejected(page, url: str, path: Path) -> None:
    """The run's "Why drafts get rejected" section after Finish."""
    page.goto(f"{url}/step?seed=0")
    idle(page)
    page.get_by_role("button", name="Finish").click()
    idle(page)
    section = page.locator('[data-testid="stExpander"]', has_text="Why drafts get rejected")
    section.locator("summary").click()
    idle(page)
    page.wait_for_timeout(800)
    section.screenshot(path=str(path))


VIEWPORT = {"width": 1440, "height": 900}  # a laptop screen: what the first look shows


def screen(page, path: Path) -> None:
    page.wait_for_timeout(1200)  # let the charts finish drawing
    page.screenshot(path=str(path))
    print(f"wrote {path}")


def page_shots(page, url: str, out: Path) -> None:
    """Every page at its defaults, as the visitor first sees it, and the Decode page's run and
    race scrolled into view."""
    for name, path in (("1-overview", ""), ("4-step", "step"), ("5-playground", "playground")):
        page.goto(f"{url}/{path}")
        idle(page)
        screen(page, out / f"{name}.png")
    page.goto(f"{url}/frontier")
    idle(page)
    # the reference frontier and its tuner open the page: the first look, unscrolled
    page.get_by_text("reference sweep: tokens per call vs emitted KL").wait_for(timeout=TIMEOUT_MS)
    screen(page, out / "6-frontier.png")
    # the k tuner further down: its chart, or the control that measures the costs it needs
    section = page.get_by_role("heading", name="Draft length k: predicted speedup")
    section.wait_for(timeout=TIMEOUT_MS)
    idle(page)
    section.scroll_into_view_if_needed()
    page.mouse.wheel(0, -60)
    screen(page, out / "7-frontier-k.png")
    page.goto(f"{url}/decode")
    idle(page)
    page.locator("button", has_text="Generate").first.click()
    page.get_by_text("Run 1:").wait_for(timeout=TIMEOUT_MS)
    idle(page)
    screen(page, out / "2-decode.png")
    page.locator("button", has_text="Race against verifier-only").first.click()
    page.get_by_text(re.compile("Speculation is|Neither is clearly")).first.wait_for(
        timeout=TIMEOUT_MS
    )
    idle(page)
    heading = page.get_by_role("heading", name="Race: speculative against verifier-only")
    heading.first.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.mouse.wheel(0, -40)
    screen(page, out / "3-race.png")
    the_third_look(page, url, out)


def the_third_look(page, url: str, out: Path) -> None:
    """The views the third look changed: Decode's stale mark after the rule changes and its
    compact frontier for FLy (ringed at its measured points), and the Frontier's export after
    "Find it" (the tuner's measured answer)."""
    box = page.locator(".st-key-dec_rule").get_by_role("combobox")
    box.click()
    box.fill("fly")
    page.get_by_role("option", name="fly", exact=True).first.click()
    idle(page)
    page.evaluate("window.scrollTo(0, 0)")
    screen(page, out / "10-decode-stale-and-fly.png")
    page.goto(f"{url}/frontier")
    idle(page)
    page.locator("button", has_text="Find it (runs)").first.click()
    page.get_by_text("measured emitted KL").first.wait_for(timeout=TIMEOUT_MS)
    idle(page)
    panel = page.get_by_text("Use this setting").first
    panel.click()
    idle(page)
    panel.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.mouse.wheel(0, -80)
    screen(page, out / "11-frontier-tuned-export.png")


def quality_shots(page, url: str, out: Path) -> None:
    """The Frontier's shipped quality reference: the tuner that keeps quality with its held-out
    confirmation, and the long answers' loop rate against divergence."""
    page.goto(f"{url}/frontier")
    idle(page)
    heading = page.get_by_role("heading", name="Do the answers get worse? (quality reference)")
    heading.evaluate("el => el.scrollIntoView({block: 'start'})")
    idle(page)
    screen(page, out / "12-frontier-keep-quality.png")
    tabs = page.locator(".stTabs").filter(has=page.get_by_role("tab", name="keep quality"))
    tabs.get_by_role("tab", name="long answers").click()
    page.locator(".st-key-fr_qref_long .js-plotly-plot").wait_for(timeout=TIMEOUT_MS)
    idle(page)
    heading.evaluate("el => el.scrollIntoView({block: 'start'})")
    screen(page, out / "13-frontier-long-answers.png")


def new_rules_shots(page, url: str, out: Path) -> None:
    """A small sweep of the 2026 rules on the task set: the tokens-per-call chart against total
    variation (FLy drawn as an estimate) and the task score tab."""
    page.goto(f"{url}/frontier")
    idle(page)
    page.get_by_text("Built-in task set", exact=True).click()
    idle(page)
    slider_from_start(page, "Prompts to use", 7, settle_ms=None)  # 8 prompts
    slider_from_start(page, "Max new tokens", 3, settle_ms=None)  # 32 tokens
    # five series at most, so that the chart opens with every one shown (frontier figures)
    for rule in ("fly", "interp"):
        pick_rule(page, rule, settle_ms=None)
    fill(page, "cactus: values of delta", "0.1, 1", settle_ms=None)
    fill(page, "fly: values of theta", "0.7, 0.3", settle_ms=None)
    fill(page, "interp: values of alpha", "0.25, 0.5", settle_ms=None)
    page.get_by_role("button", name="Run sweep").click()
    chart = page.locator(".st-key-fr_chart_tpc .js-plotly-plot")
    chart.wait_for(state="visible", timeout=TIMEOUT_MS)
    page.get_by_text("emitted TV(pi, q) per token", exact=True).click()
    idle(page)
    page.get_by_role("heading", name="Trade-off").evaluate(
        "el => el.scrollIntoView({block: 'start'})"
    )
    screen(page, out / "8-frontier-tv.png")
    page.get_by_role("tab", name="task score").last.click()  # the sweep's, below the reference's
    page.locator(".st-key-fr_chart_task .js-plotly-plot").wait_for(timeout=TIMEOUT_MS)
    idle(page)
    screen(page, out / "9-frontier-task-score.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only",
        choices=("pages", "steps", "rules", "third-look", "quality"),
        help="make one set of pictures (third-look: docs/screens/10-*, 11-* alone; quality: "
        "12-*, 13-*)",
    )
    ap.add_argument("--docs", type=Path, default=ROOT / "docs")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", CACTUS_LAB_PRELOAD="0")
    from playwright.sync_api import sync_playwright

    with streamlit_app(env, timeout_s=120) as app, sync_playwright() as pw:
        browser = launch_chromium(pw)
        if args.only in (None, "pages", "rules"):
            out = args.docs / "screens"
            out.mkdir(parents=True, exist_ok=True)
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(TIMEOUT_MS)
            if args.only != "rules":
                page_shots(page, app.url, out)
            if args.only != "pages":
                new_rules_shots(page, app.url, out)
            page.close()
        if args.only == "third-look":
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"{app.url}/decode")
            idle(page)
            page.locator("button", has_text="Generate").first.click()
            page.get_by_text("Run 1:").wait_for(timeout=TIMEOUT_MS)
            idle(page)
            the_third_look(page, app.url, args.docs / "screens")
            page.close()
        if args.only in (None, "quality"):
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(TIMEOUT_MS)
            quality_shots(page, app.url, args.docs / "screens")
            page.close()
        if args.only in (None, "steps"):
            out = args.docs / "step"
            out.mkdir(parents=True, exist_ok=True)
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            page.set_default_timeout(TIMEOUT_MS)
            for name, (query, clicks) in SHOTS.items():
                shoot(page, app.url, query, clicks, out / f"{name}.png")
                print(f"wrote {out / name}.png")
            why_rejected(page, app.url, out / "8-why-rejected.png")
            print(f"wrote {out / '8-why-rejected'}.png")
        browser.close()


if __name__ == "__main__":
    main()
