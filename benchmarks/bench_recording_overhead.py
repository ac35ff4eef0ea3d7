"""What the Decode page's recording adds to the time per token, as a ratio measured in one run.

The decoder as the Decode page runs it (the trace rows and the exact emitted KL, the defaults)
against the same decoder with record_trace=False, measure_kl=False: the embedded pair with the
sidebar's default draft, cactus δ = 1, k 4, T 0.7, one torch thread, 48 new tokens, the first
3 built-in prompts (none is a training prompt of the drafts) × 2 seeds. The two decoders run
back to back on each (prompt, seed), in alternating order, so that a load swing on a busy
machine falls on both.

Printed: the ratio of total time per token (recorded ÷ lean: the summed wall time over the
summed new tokens of each), the median of the per-run ratios, the same ratio of the process's
CPU time per token (both threads; less swayed by other processes on a loaded machine, but it
counts the recording thread's work whether or not a core was free for it), and the recording's
share of the recorded runs' wall time on the decoding thread (`stats.record_s`) and its own
work (`stats.record_work_s`, mostly on the recording thread).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_recording_overhead.py [--prompts 3]
        [--seeds 2] [--tokens 48] [--threads 1] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.loading.embedded_drafts import DEFAULT_EMBEDDED_DRAFT, embedded_draft
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.maths.rules import make_rule


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1, help="passes over the prompts and seeds")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    draft = embedded_draft(DEFAULT_EMBEDDED_DRAFT)
    pair = load_pair(device="cpu", **draft.load_kwargs("cpu"))
    rule = make_rule("cactus", delta=1.0)
    full = SpeculativeDecoder(pair, rule, k=4, temperature=0.7)
    lean = SpeculativeDecoder(
        pair, rule, k=4, temperature=0.7, record_trace=False, measure_kl=False
    )
    prompts = builtin_prompts()[: args.prompts]
    for dec in (full, lean):  # warm-up: first calls, caches, the recording thread's start
        dec.generate(prompts[0], max_new_tokens=8, seed=0)
    totals = {"full": [0.0, 0], "lean": [0.0, 0]}
    cpu = {"full": 0.0, "lean": 0.0}
    ratios, critical, work = [], [], []
    order = [("full", full), ("lean", lean)]
    for _ in range(args.repeats):
        for i, prompt in enumerate(prompts):
            for seed in range(args.seeds):
                stats = {}
                for name, dec in order:
                    start = time.process_time()
                    s = dec.generate(prompt, max_new_tokens=args.tokens, seed=seed).stats
                    cpu[name] += time.process_time() - start
                    stats[name] = s
                    totals[name][0] += s.wall_s
                    totals[name][1] += s.new_tokens
                order.reverse()
                f, w = stats["full"], stats["lean"]
                ratios.append((f.wall_s / f.new_tokens) / (w.wall_s / w.new_tokens))
                critical.append(f.record_s / f.wall_s)
                work.append(f.record_work_s / f.wall_s)
                print(
                    f"prompt {i} seed {seed}: {f.new_tokens} tokens, recorded "
                    f"{f.wall_s:.2f} s, lean {w.wall_s:.2f} s ({ratios[-1]:.3f}×)",
                    flush=True,
                )
    per_token = {k: t / n for k, (t, n) in totals.items()}
    print(f"\npair: {pair.identity}; rule {rule.label}; load average {os.getloadavg()[0]:.1f}")
    print(
        f"time per token: recorded {per_token['full'] * 1000:.1f} ms, lean "
        f"{per_token['lean'] * 1000:.1f} ms; ratio {per_token['full'] / per_token['lean']:.3f}× "
        f"(median of runs {statistics.median(ratios):.3f}×)"
    )
    cpu_ratio = (cpu["full"] / totals["full"][1]) / (cpu["lean"] / totals["lean"][1])
    print(f"CPU time per token (both threads): ratio {cpu_ratio:.3f}×")
    print(
        f"recording on the decoding thread {statistics.median(critical):.1%} of wall, its own "
        f"work {statistics.median(work):.1%} (medians)"
    )


if __name__ == "__main__":
    main()
