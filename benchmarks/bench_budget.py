"""cactus-budget in the decoder as the Decode page runs it (full trace, exact emitted KL):
tokens per second of the whole generation, beside cactus and sps on the same prompts, and the
time of one per-position search (`budget_delta`) on [1, V] and [4, V] rows.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_budget.py --prompts 2 --max-new-tokens 24

Uses only the public API, so the same file can time an older commit from a worktree.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cactus_core import SpeculativeDecoder, load_pair, make_rule
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.maths.rules import budget_delta

ROWS = (("cactus-budget", {"budget": 0.1}), ("cactus", {"delta": 1.0}), ("sps", {}))


def search_ms(v: int, positions: int, repeats: int = 5) -> float:
    """Median ms of one budget_delta call on fresh rows (no row seen before)."""
    times = []
    for seed in range(repeats):
        g = torch.Generator().manual_seed(1000 + seed)
        z = torch.randn(positions, v, generator=g) * 2.5
        q = torch.softmax(z / 0.7, -1)
        p = torch.softmax((z + torch.randn(positions, v, generator=g)) / 0.7, -1)
        start = time.perf_counter()
        budget_delta(p, q, 0.1)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"budget_delta [1, V]: {search_ms(49152, 1):.0f} ms")
    print(f"budget_delta [4, V]: {search_ms(49152, 4):.0f} ms")
    pair = load_pair(device="cpu")
    prompts = builtin_prompts()[: args.prompts]
    print("| rule | tokens | seconds | tokens/s | tokens per call |")
    print("|---|---:|---:|---:|---:|")
    for name, params in ROWS:
        dec = SpeculativeDecoder(pair, make_rule(name, **params), k=4, temperature=0.7)
        tokens, wall, calls = 0, 0.0, 0
        for i, prompt in enumerate(prompts):
            start = time.perf_counter()
            out = dec.generate(prompt, max_new_tokens=args.max_new_tokens, seed=i)
            wall += time.perf_counter() - start
            tokens += out.stats.new_tokens
            calls += out.stats.verifier_calls
        label = make_rule(name, **params).label
        print(f"| {label} | {tokens} | {wall:.1f} | {tokens / wall:.2f} | {tokens / calls:.2f} |")


if __name__ == "__main__":
    main()
