"""Screenshots of every kind of step on the Step through page, for the docs:
`.venv/bin/python scripts/screenshots.py` writes docs/step/*.png.

Runs `streamlit run app.py` on a free port with the embedded pair (CPU), opens the page through
links (the same query strings a user would copy: the step, or a `jump` to the first step of a
kind) in headless Chromium (/usr/bin/chromium, Playwright) and photographs the step's card.
The default prompt, rule (Cactus, delta = 1) and seed 0 are used throughout, so the pictures
are reproducible.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the browser helpers the browser tests use

from streamlit_server import launch_chromium, streamlit_app  # noqa: E402

from cactus_core.app.links import K  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "step")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", CACTUS_LAB_PRELOAD="0")
    from playwright.sync_api import sync_playwright

    with streamlit_app(env, timeout_s=120) as app, sync_playwright() as pw:
        browser = launch_chromium(pw)
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.set_default_timeout(TIMEOUT_MS)
        for name, (query, clicks) in SHOTS.items():
            shoot(page, app.url, query, clicks, args.out / f"{name}.png")
            print(f"wrote {args.out / name}.png")
        why_rejected(page, app.url, args.out / "8-why-rejected.png")
        print(f"wrote {args.out / '8-why-rejected'}.png")
        browser.close()


if __name__ == "__main__":
    main()
