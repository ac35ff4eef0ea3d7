"""The refining tuner on the embedded pair: for each emitted KL budget, the answer the runs
settle on, then that setting measured again on fresh seeds (same prompts), which must be within
the budget at the upper end of its 95% interval (the tuner keeps one more half-width of room
above a run's upper bound for this: `TuneStep.guarded`).

The first guess comes from the shipped reference's estimated curve (top-p 1.0); each run is one
setting on the first --prompts reference prompts × --tokens tokens (T 0.7, k 4, top-p 1.0,
seed 0); the fresh-seed check uses seed 1000. Prints a Markdown table.

    .venv/bin/python benchmarks/bench_tuner.py [--prompts 6] [--tokens 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

import torch

from cactus_core.engine.loading.embedded_drafts import REFERENCE_EMBEDDED_DRAFT, embedded_draft
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import Setting, SweepConfig
from cactus_core.experiments.sweeps.reference import REFERENCE_SAMPLING, load_reference
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.experiments.tuning.refine import TuneStep
from cactus_core.experiments.tuning.tune import first_guess, refine

BUDGETS = (0.02, 0.05, 0.1, 0.3, 1.0)
RULE = "cactus"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-runs", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # The reference's pair: the embedded verifier with the feature draft in bfloat16.
    pair = load_pair(device="cpu", **embedded_draft(REFERENCE_EMBEDDED_DRAFT).load_kwargs("cpu"))
    part = load_reference().for_top_p(1.0)
    assert part is not None
    config = SweepConfig(
        prompts=tuple(builtin_prompts()[: args.prompts]),
        settings=(Setting.of(RULE),),
        sampling=REFERENCE_SAMPLING,
        max_new_tokens=args.tokens,
        chunk_size=args.prompts,
        limit=False,
    )
    fresh = replace(config, sampling=replace(REFERENCE_SAMPLING, seed=1000))
    cache = SweepCache(tempfile.mkdtemp(prefix="bench_tuner_"))

    def measure(cfg: SweepConfig, value: float) -> TuneStep:
        res = run_sweep(pair, replace(cfg, settings=(Setting.of(RULE, delta=value),)), cache)
        return TuneStep.of(value, res.settings[0])

    start = time.perf_counter()
    print(f"pair: {pair.identity}")
    print()
    print(
        "| budget (nats) | first guess δ | runs | status | answer δ | tuning KL (95% interval) "
        "| fresh-seed KL (95% interval) | fresh within budget |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for budget in BUDGETS:
        guess = first_guess(part, RULE, budget).value
        res = refine(RULE, budget, guess, lambda v: measure(config, v), max_runs=args.max_runs)
        row = f"| {budget:g} | {guess:.4g} | {len(res.runs)} | {res.status} |"
        if res.value is None:
            print(f"{row} – | – | – | – |  <!-- {res.message} -->")
            continue
        kl = res.measured_kl
        check = measure(fresh, res.value).kl
        ok = "yes" if check.hi <= budget else "**no**"
        print(
            f"{row} {res.value:.4g} | {kl.mean:.4f} ({kl.lo:.4f}–{kl.hi:.4f}) | "
            f"{check.mean:.4f} ({check.lo:.4f}–{check.hi:.4f}) | {ok} |",
            flush=True,
        )
    print(f"\nwall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
