"""The verifier's cost of checking w tokens in one pass, w = 1 .. 64: the cost curve that the
draft tree's node budget and depth are chosen from (docs/benchmarks.md, "Draft trees").

One forward of w new tokens through the decoder's KV cache holding --prefix-tokens of context
(the embedded pair's verifier, one thread), its logits at all w columns, then rolled back
(`bench_steps.cache_step`). The widths run interleaved, one call each per block, so that load
from other processes slows them alike; each width's median over the blocks, and its ratio to
w = 1 (a ratio, not a time, is what carries over on a loaded machine); the minimum over the
blocks too, the least disturbed call.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_tree_width.py --dtypes bfloat16 float32
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.bench_steps import PROMPT, cache_step
from cactus_core.engine.loading.models import load_pair

WIDTHS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)


def width_curve(dtype: torch.dtype, widths: tuple[int, ...], prefix_tokens: int, blocks: int):
    """Median ms per width (interleaved blocks) for the embedded verifier in `dtype`."""
    pair = load_pair(device="cpu", dtype=dtype)
    vocab = pair.verifier.get_output_embeddings().out_features
    prompt = pair.encode_prompt(PROMPT)
    gen = torch.Generator().manual_seed(0)
    filler = torch.randint(300, vocab, (max(0, prefix_tokens - len(prompt)),), generator=gen)
    prefix = (prompt + filler.tolist())[:prefix_tokens]
    steps = {w: cache_step(pair.verifier, vocab, prefix, w)[0] for w in widths}
    for step in steps.values():  # warm-up
        step()
    times: dict[int, list[float]] = {w: [] for w in widths}
    for _ in range(blocks):
        for w, step in steps.items():
            t0 = time.perf_counter()
            step()
            times[w].append(time.perf_counter() - t0)
    return {w: (statistics.median(t) * 1000, min(t) * 1000) for w, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16"], choices=("float32", "bfloat16"))
    ap.add_argument("--widths", nargs="+", type=int, default=list(WIDTHS))
    ap.add_argument("--prefix-tokens", type=int, default=200)
    ap.add_argument("--blocks", type=int, default=9, help="interleaved timed calls per width")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    widths = tuple(sorted(set(args.widths)))
    curves = {
        name: width_curve(getattr(torch, name), widths, args.prefix_tokens, args.blocks)
        for name in args.dtypes
    }
    head = " | ".join(f"{n}: median ms (min) | {n}: × w=1, median (min)" for n in curves)
    print(f"| w | {head} |")
    print("|---:|" + "---:|" * (2 * len(curves)))
    first = widths[0]
    for w in widths:
        cells = " | ".join(
            f"{c[w][0]:.1f} ({c[w][1]:.1f}) | "
            f"{c[w][0] / c[first][0]:.2f} ({c[w][1] / c[first][1]:.2f})"
            for c in curves.values()
        )
        print(f"| {w} | {cells} |", flush=True)


if __name__ == "__main__":
    with torch.inference_mode():
        main()
