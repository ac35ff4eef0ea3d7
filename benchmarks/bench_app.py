"""App targets, measured: `.venv/bin/python benchmarks/bench_app.py [--skip-browser]`.

1. Playground: the library call the delta fragment makes after a slider move
   (app.playground.compare_rules over every rule + app.playground.taylor_gap) at V = 49,152.
   Rules that do not depend on delta come from the per-(position, rule) cache, as in the app.
2. Cold start: `streamlit run app.py` until the health endpoint answers, until the Overview is
   drawn, and until the Decode page has the embedded pair loaded (the GGUF conversion cache
   must exist; the first load ever builds it).
3. Decode: Generate clicked until the first token is on screen (warm models), and until the
   run is done; three runs: on the empty page, after the previous results are drawn, and the
   instant the previous run ends (the browser still drawing its results).
4. Resident memory of the app process with the embedded pair loaded, after generating.

Parts 2–4 drive Chromium (/usr/bin/chromium) through Playwright.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the browser helpers the browser tests use

from streamlit_server import launch_chromium, streamlit_app  # noqa: E402

V = 49_152


def bench_playground(vocab: int = V, repeats: int = 7) -> dict[str, float]:
    import torch

    from cactus_core.app.playground.comparison import compare_rules, playground_rules, taylor_gap
    from cactus_core.app.shared.positions import Position

    g = torch.Generator().manual_seed(0)
    # A peaked verifier and a draft that roughly tracks it, like real next-token rows.
    q = torch.softmax(torch.randn(vocab, generator=g) * 3.0, -1)
    p = torch.softmax(torch.log(q) + torch.randn(vocab, generator=g), -1)
    pos = Position(tuple(str(i) for i in range(vocab)), p, q, drafted=int(p.argmax()))
    t0 = time.perf_counter()
    compare_rules(pos, playground_rules({"delta": 0.21}))
    taylor_gap(pos, 0.21)
    first = time.perf_counter() - t0
    moves = []
    for i in range(repeats):
        delta = 0.22 + 0.05 * i  # a new delta each time: cactus and cactus-exact recompute
        t0 = time.perf_counter()
        compare_rules(pos, playground_rules({"delta": delta}))
        taylor_gap(pos, delta)
        moves.append(time.perf_counter() - t0)
    per_rule = {}
    for rule in playground_rules({"delta": 1.7}):
        t0 = time.perf_counter()
        compare_rules(pos, [rule])
        per_rule[rule.label] = time.perf_counter() - t0
    return {"first_position_s": first, "slider_move_s": statistics.median(moves)} | {
        f"rule {k}": v for k, v in per_rule.items()
    }


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def bench_browser() -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    # the embedded pair (no CACTUS_LAB_* override); OMP_NUM_THREADS comes from main()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACTUS_LAB_")}
    out: dict[str, float] = {}
    # Chromium starts first, so the cold-start clock holds the app only.
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        start = time.perf_counter()
        with streamlit_app(env, timeout_s=120, poll_s=0.05) as app:
            out["health_s"] = time.perf_counter() - start
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(300_000)
            page.goto(app.url)
            page.get_by_role("heading", name="Cactus Lab").wait_for()
            page.get_by_text("Worth knowing").wait_for()
            out["overview_drawn_s"] = time.perf_counter() - start
            page.get_by_role("link", name="Decode").first.click()
            page.locator("button", has_text="Generate").first.wait_for()
            page.get_by_text("Press Generate to decode the prompt.").wait_for()
            out["decode_ready_with_models_s"] = time.perf_counter() - start
            out["rss_models_loaded_mb"] = _rss_mb(app.pid)
            # Run 1 on the empty page; run 2 once run 1's results are drawn (its timeline
            # chart is on screen: a user who looked at them); run 3 the instant run 2's
            # summary line appears, while the browser is still drawing run 2's results.
            for attempt in (1, 2, 3):
                # the first token of *this* run: a transcript that differs from the last one
                before = page.evaluate(_TRANSCRIPT_JS)
                t0 = time.perf_counter()
                page.locator("button", has_text="Generate").first.click()
                page.wait_for_function(
                    f"prev => {{ const t = ({_TRANSCRIPT_JS})(); return t !== null && t !== prev "
                    "&& t.includes('<span'); }",
                    arg=before,
                )
                out[f"first_token_on_screen_s_run{attempt}"] = time.perf_counter() - t0
                page.get_by_text(f"Run {attempt}:").wait_for()
                out[f"generate_done_s_run{attempt}"] = time.perf_counter() - t0
                if attempt == 1:
                    page.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()
                    out["results_drawn_s_run1"] = time.perf_counter() - t0
            out["rss_after_generate_mb"] = _rss_mb(app.pid)
        browser.close()
    return out


_TRANSCRIPT_JS = (
    "() => { const e = document.querySelector('.cactus-transcript'); "
    "return e ? e.innerHTML : null; }"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-browser", action="store_true", help="playground timing only")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads here and in the app (1 keeps a shared 2-core machine stable)",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    print(f"torch threads: {torch.get_num_threads()}, CPUs: {os.cpu_count()}")
    # 257: the largest position the app builds from a trace (top-128 of p and q + the rest)
    for vocab in (V, 257):
        for key, value in bench_playground(vocab).items():
            print(f"playground V={vocab} {key}: {value * 1000:.1f} ms")
    if not args.skip_browser:
        for key, value in bench_browser().items():
            unit = "MB" if key.endswith("_mb") else "s"
            print(f"app {key}: {value:.2f} {unit}")


if __name__ == "__main__":
    main()
