"""The frontier on the pages, in Chromium: `.venv/bin/python benchmarks/bench_frontier_pages.py`.

1. Decode, moving delta: the server's time for each redraw of the compact frontier's marker
   (the fragment's own run, from the app's timing log) and the browser's, over --moves presses
   of the delta slider. Target: a median of 150 ms on the server.
2. The Frontier page's open: from page.goto to the reference frontier, its chart and the
   tuner's answer, against a bare Streamlit page with one Plotly chart, fresh tabs, the two
   kinds interleaved, --opens of each. Most of an open is Chromium loading Streamlit's and
   Plotly's scripts, which no page can avoid, so the figure that says how the page itself does
   is the ratio of the medians (held to 2.5 when this was a test); target 10 s absolute.

Runs `streamlit run app.py` on the tiny random pair (saved to folders, named through the
environment as the browser tests do), one torch thread, and Debian's Chromium through
Playwright. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the browser helpers the browser tests use

from streamlit_server import launch_chromium, streamlit_app  # noqa: E402

BARE_PAGE = """
import plotly.graph_objects as go
import streamlit as st

st.title("Bare")
st.plotly_chart(go.Figure(go.Scatter(x=[0, 1, 2], y=[1, 3, 2])), key="bare")
"""
MARKER_JS = """() => {
    for (const el of document.querySelectorAll('.js-plotly-plot')) {
        const t = (el.data || []).find(d => d.name === 'current setting');
        if (t) return [t.x[0], t.y[0]];
    }
    return null;
}"""
MOVED_JS = (
    "old => { for (const el of document.querySelectorAll('.js-plotly-plot')) {"
    " const t = (el.data || []).find(d => d.name === 'current setting');"
    " if (t && t.x[0] !== old[0]) return true; } return false; }"
)


def _tiny_pair_env(root: Path) -> dict[str, str]:
    from tests.conftest import make_tiny_pair

    pair = make_tiny_pair()
    for role, model in (("verifier", pair.verifier), ("draft", pair.draft)):
        model.save_pretrained(root / role)
        pair.tokenizer.save_pretrained(root / role)
    return {
        **os.environ,
        "CACTUS_LAB_VERIFIER": str(root / "verifier"),
        "CACTUS_LAB_DRAFT": str(root / "draft"),
        "CACTUS_CACHE_DIR": str(root / "cache"),
        "CACTUS_LAB_PRELOAD": "0",
        "OMP_NUM_THREADS": "1",
        "CACTUS_LAB_TIMING_LOG": str(root / "timing.jsonl"),
    }


def _marker_count(timing: Path) -> int:
    return timing.read_text().count("decode_marker") if timing.exists() else 0


def bench_marker(browser, url: str, timing: Path, moves: int) -> dict[str, list[float]]:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    try:
        page.goto(f"{url}/decode")
        page.get_by_text("where this setting sits").wait_for(timeout=60_000)
        page.get_by_text("Press Generate to decode the prompt.").wait_for()
        thumb = page.get_by_role("slider", name="δ (nats)")
        before, seen, client_ms = _marker_count(timing), page.evaluate(MARKER_JS), []
        for _ in range(moves):
            thumb.focus()
            t0 = time.perf_counter()
            thumb.press("ArrowRight")
            page.wait_for_function(MOVED_JS, arg=seen)
            client_ms.append((time.perf_counter() - t0) * 1000)
            seen = page.evaluate(MARKER_JS)
            # Let the rerun log its time before the next press interrupts it.
            for _ in range(50):
                if _marker_count(timing) >= before + len(client_ms):
                    break
                page.wait_for_timeout(100)
    finally:
        page.close()
    lines = [json.loads(x) for x in timing.read_text().splitlines()]
    server_ms = [x["ms"] for x in lines if x["name"] == "decode_marker"][before:]
    return {"server_ms": server_ms, "client_ms": client_ms}


def _timed_open(browser, url: str, waits: list[tuple[str, str]]) -> float:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        t0 = time.perf_counter()
        page.goto(url)
        for kind, what in waits:
            target = page.get_by_text(what) if kind == "text" else page.locator(what)
            target.first.wait_for(state="visible", timeout=60_000)
        return time.perf_counter() - t0
    finally:
        page.close()


def bench_open(browser, url: str, bare_url: str, opens: int) -> dict[str, object]:
    frontier = [
        ("text", "Reference sweep shipped with the lab"),
        ("css", ".st-key-fr_ref_tpc .js-plotly-plot"),
        ("text", "estimated tokens per call"),
    ]
    bare_s, open_s = [], []
    for _ in range(opens):  # interleaved, so that the machine's load slows both alike
        bare_s.append(_timed_open(browser, bare_url, [("css", ".st-key-bare .js-plotly-plot")]))
        open_s.append(_timed_open(browser, f"{url}/frontier", frontier))
    ratio = statistics.median(open_s) / statistics.median(bare_s)
    return {"open_s": open_s, "bare_page_s": bare_s, "ratio": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=8, help="delta slider presses")
    parser.add_argument("--opens", type=int, default=3, help="opens of each page")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = _tiny_pair_env(root)
        (root / "bare.py").write_text(BARE_PAGE)
        with (
            streamlit_app(env, poll_s=0.5) as app,
            streamlit_app(dict(os.environ), poll_s=0.5, script=root / "bare.py") as bare,
            sync_playwright() as pw,
        ):
            browser = launch_chromium(pw)
            marker = bench_marker(browser, app.url, root / "timing.jsonl", args.moves)
            opened = bench_open(browser, app.url, bare.url, args.opens)
            browser.close()
    marker["server_median_ms"] = statistics.median(marker["server_ms"])
    print(json.dumps({"decode_marker": marker, "frontier_open": opened}, indent=1))


if __name__ == "__main__":
    main()
