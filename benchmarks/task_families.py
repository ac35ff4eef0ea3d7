"""How often the embedded verifier alone answers each candidate task family right: the
measurement that decides which families enter the task set (`experiments/quality/task_set.py`).

    PYTHONPATH=. .venv/bin/python benchmarks/task_families.py [--threads 1] [--max-new-tokens 48]

Decodes every candidate prompt (all families, tuning and held-out alike) verifier-only and with
sps (the same law on other coins), T 0.7, top-p 1.0, k 4, 32 prompts per batched call, and
prints each family's accuracy with its 95% Wilson interval and whether it is kept
(MIN_ACCURACY ≤ verifier-only accuracy ≤ MAX_ACCURACY). Paste the printed dict into
`FAMILY_ACCURACY` and the table into docs/rules.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from cactus_core.cli import build_parser, load_pair_from_args
from cactus_core.cli.common import text_progress
from cactus_core.cli.sweep import sweep_config_from_args
from cactus_core.experiments.estimates.override import wilson_interval
from cactus_core.experiments.quality.task_set import (
    CANDIDATES,
    MAX_ACCURACY,
    MIN_ACCURACY,
    draw,
    lines,
)
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.run import run_sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    opts = ap.parse_args()
    rows = draw(list(CANDIDATES))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "candidates.jsonl"
        path.write_text(lines(rows), encoding="utf-8")
        args = build_parser().parse_args(
            ["sweep", "--prompts", str(path), "--n-prompts", str(len(rows)), "--rules", "sps",
             "--top-p", "1.0", "--temperature", "0.7", "--k", "4", "--no-limit",
             "--max-new-tokens", str(opts.max_new_tokens), "--chunk-size", "32",
             "--threads", str(opts.threads)]
        )  # fmt: skip
        config = sweep_config_from_args(args)
        start = time.perf_counter()
        result = run_sweep(load_pair_from_args(args), config, SweepCache(Path(tmp) / "cache"),
                           on_progress=text_progress(sys.stderr))  # fmt: skip
        wall = time.perf_counter() - start
    answers = [r.answer for r in rows]
    verifier = result.baseline.passed(answers)
    sps = result.settings[0].passed(answers)
    print(f"{len(rows)} prompts, verifier-only and sps, {wall:.0f} s\n")
    print("| family | prompts | verifier alone (95% interval) | sps | kept |")
    print("|---|---:|---|---:|---|")
    accuracy: dict[str, float] = {}
    for family in CANDIDATES:
        idx = [i for i, r in enumerate(rows) if r.family == family]
        v = wilson_interval(int(sum(verifier[i] for i in idx)), len(idx))
        s = sum(sps[i] for i in idx) / len(idx)
        kept = MIN_ACCURACY <= v.estimate <= MAX_ACCURACY
        accuracy[family] = round(v.estimate, 3)
        print(f"| {family} | {len(idx)} | {v.estimate:.3f} [{v.lo:.3f}, {v.hi:.3f}] | {s:.3f} "
              f"| {'yes' if kept else 'no'} |")  # fmt: skip
    print(f"\nFAMILY_ACCURACY = {accuracy!r}")


if __name__ == "__main__":
    main()
