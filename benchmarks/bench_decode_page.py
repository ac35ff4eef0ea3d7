"""The Decode page's measured speedup, in a real browser: `streamlit run app.py` with the
embedded pair, driven by Chromium (/usr/bin/chromium) through Playwright, as a user would.

For each rule setting (sps, and cactus at delta = 1), each repeat opens the Decode page from a
link (the rule, max new tokens, the seed), clicks Generate, waits for the run, clicks "Race
against verifier-only", waits for the race to finish, and reads the "measured speedup" card
and the caption that gives the recording's cost. Prints each repeat and the medians.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_decode_page.py [--repeats 3] [--max-new 64]
        [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the browser helpers the browser tests use

from streamlit_server import launch_chromium, streamlit_app  # noqa: E402

SETTINGS = {"sps": "rule=sps", "cactus δ=1": "rule=cactus&delta=1"}
TIMEOUT_MS = 600_000
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'


def _idle(page) -> None:
    page.wait_for_timeout(500)
    page.locator(IDLE).wait_for(timeout=TIMEOUT_MS)


def _metric(page, label: str) -> str:
    card = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return card.locator('[data-testid="stMetricValue"]').inner_text()


def measure(page, url: str, query: str) -> dict[str, float | str]:
    page.goto(f"{url}/decode?{query}")
    page.get_by_text("Press Generate to decode the prompt.").wait_for(timeout=TIMEOUT_MS)
    _idle(page)
    page.locator("button", has_text="Generate").first.click()
    page.get_by_text("Run 1:").wait_for(timeout=TIMEOUT_MS)
    _idle(page)
    t0 = time.perf_counter()
    page.locator("button", has_text="Race against verifier-only").first.click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stMetric\"]')].some(m => "
        "m.innerText.includes('measured speedup') && /[0-9]×/.test(m.innerText))",
        timeout=TIMEOUT_MS,
    )
    race_s = time.perf_counter() - t0
    _idle(page)
    speedup = float(_metric(page, "measured speedup").rstrip("×"))
    caption = page.get_by_text(re.compile(r"^Recording \(trace rows")).first.inner_text()
    shares = [float(x) / 100 for x in re.findall(r"(\d+)%", caption)]
    return {"speedup": speedup, "race_s": race_s, "caption": caption, "shares": shares}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    env = {k: v for k, v in os.environ.items() if not k.startswith("CACTUS_LAB_")}
    env["OMP_NUM_THREADS"] = str(args.threads)
    results: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        with streamlit_app(env, timeout_s=180) as app:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            for repeat in range(args.repeats):
                for name, query in SETTINGS.items():
                    q = f"{query}&max_new={args.max_new}&seed={repeat}"
                    got = measure(page, app.url, q)
                    results[name].append(got)
                    print(
                        f"{name} seed {repeat}: {got['speedup']:.2f}× ({got['race_s']:.0f} s "
                        f"race) · {got['caption']}",
                        flush=True,
                    )
        browser.close()
    print("\n| rule | measured speedup per seed | median |")
    print("|---|---|---|")
    for name, runs in results.items():
        each = ", ".join(f"{r['speedup']:.2f}×" for r in runs)
        print(f"| {name} | {each} | {statistics.median(r['speedup'] for r in runs):.2f}× |")


if __name__ == "__main__":
    main()
