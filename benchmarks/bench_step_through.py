"""Step through, server time per click: `.venv/bin/python benchmarks/bench_step_through.py`.

Drives the Step through page with Streamlit's AppTest on the embedded pair (CPU, one torch
thread; the default prompt, rule and settings) and times each click from the click to the end
of the script run, which is the server's whole share of a click: the first open (it decodes
round 1), "Next step" through two decoded rounds, "Back", and "Next round" (it decodes one).
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


def timed(at, key: str | None = None) -> float:
    start = time.perf_counter()
    (at.button(key=key).click() if key else at).run()
    elapsed = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="decoded rounds to step through")
    args = ap.parse_args()
    os.environ.setdefault("CACTUS_LAB_PRELOAD", "0")
    import torch
    from streamlit.testing.v1 import AppTest

    torch.set_num_threads(1)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["sb_device"] = "cpu"
    at.run()
    at.switch_page("pages/step.py")
    first = timed(at)  # loads the pair and decodes round 1
    warm = timed(at)  # the same step again, everything cached
    for _ in range(args.rounds - 1):  # decode the rounds to step through, then go back
        timed(at, "step_next_round")
    while at.session_state["step_round"] > 0 or at.session_state["step_index"] > 0:
        timed(at, "step_back")
    steps = []
    for _ in range(sum(len(r) for r in at.session_state["step_state"].run.step_cache.values()) - 1):
        steps.append(timed(at, "step_next"))
    back = [timed(at, "step_back") for _ in range(5)]
    next_round = timed(at, "step_next_round")
    ms = [1000 * t for t in steps]
    print(
        f"first open (pair load + round 1): {first:.1f} s; a rerun on the same step: "
        f"{1000 * warm:.0f} ms"
    )
    print(
        f"Next step over {len(ms)} clicks: median {statistics.median(ms):.0f} ms, "
        f"max {max(ms):.0f} ms"
    )
    print(f"Back: median {1000 * statistics.median(back):.0f} ms")
    print(f"Next round (decodes one round): {1000 * next_round:.0f} ms")


if __name__ == "__main__":
    main()
