"""Draft trees against the chain, side by side in one run: tokens per call and wall-clock for
several tree shapes (node budget, depth, width, branch, root branch), the chain at k, and the
verifier alone (docs/benchmarks.md, "Draft trees").

Every row decodes the same held-out prompts (the built-in chat prompts, not the draft's
training set) with the same seeds, rows interleaved per prompt (`experiments.bench.run_bench`),
so load from other processes slows them alike. Speedups are medians over prompts of the
per-prompt tokens/s ratio against the verifier alone, measured in the same run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_tree_budgets.py --prompts 8 --max-new-tokens 96

A shape is nodes/depth/width/branch/root (`TreeSettings`), e.g. 8/4/1/2/2.
"""

from __future__ import annotations

import argparse
import json

import torch

from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.embedded_drafts import FASTEST_FEATURE, embedded_draft_named
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.experiments.bench import VERIFIER_ONLY, BenchRow, run_bench
from cactus_core.maths.rules import DEFAULT_RULE, lossless_rule, make_rule
from cactus_core.maths.sampling import SamplingSettings

SHAPES = ("4/3/1/1/2", "6/4/1/1/3", "8/4/1/2/2", "12/5/2/2/3", "16/6/2/2/4")


def parse_shape(text: str) -> TreeSettings:
    """'nodes/depth/width/branch/root' -> TreeSettings (ValueError naming the format)."""
    parts = text.split("/")
    if len(parts) != 5 or not all(p.isdigit() for p in parts):
        raise ValueError(f"a tree shape is nodes/depth/width/branch/root, got {text!r}")
    nodes, depth, width, branch, root = (int(p) for p in parts)
    return TreeSettings(nodes, depth, width, branch, root)


def shape_name(s: TreeSettings) -> str:
    return f"{s.nodes}/{s.depth}/{s.width}/{s.branch}/{s.root_branch}"


def bench_rows(shapes: list[TreeSettings], delta: float) -> list[BenchRow]:
    """The verifier alone, sps and cactus δ on the chain, then both on every tree shape."""
    rules = (lossless_rule(), make_rule(DEFAULT_RULE, delta=delta))
    rows = [BenchRow(VERIFIER_ONLY, kind="verifier-only")]
    rows += [BenchRow(f"{r.label} chain", r) for r in rules]
    for s in shapes:
        rows += [BenchRow(f"{r.label} tree {shape_name(s)}", r, tree=s) for r in rules]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8, help="the first N built-in prompts")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--k", type=int, default=4, help="the chain's draft length")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--delta", type=float, default=1.0, help="the Cactus row's δ")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--embedded-draft",
        default=FASTEST_FEATURE,
        help="the embedded feature draft (default: the faster dtype on this CPU)",
    )
    ap.add_argument("--out", help="also write the summaries as JSON")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shapes = [parse_shape(s) for s in args.shapes]
    pair = load_pair(**embedded_draft_named(args.embedded_draft).load_kwargs("cpu"))
    sampling = SamplingSettings(temperature=args.temperature, top_p=1.0, k=args.k)
    prompts = builtin_prompts()[: args.prompts]
    rows = bench_rows(shapes, args.delta)
    summaries = run_bench(pair, prompts, sampling, args.max_new_tokens, rows=rows, progress=print)
    by = {s["row"]: s for s in summaries}
    labels = {
        "sps": lossless_rule().label,
        "cactus": make_rule(DEFAULT_RULE, delta=args.delta).label,
    }
    chain = {r: by[f"{label} chain"] for r, label in labels.items()}
    print(
        f"\npair: {pair.identity}, threads {args.threads}, {len(prompts)} prompts, "
        f"{args.max_new_tokens} tokens, T {args.temperature}, top-p 1.0, chain k = {args.k}"
    )
    print(
        "| row | tokens per call | × the chain's | acceptance | emitted KL | speedup, median "
        "(pooled) | draft / verify ms per round |"
    )
    print("|---|---:|---:|---:|---:|---|---|")
    base = by[VERIFIER_ONLY]
    for s in summaries:
        if s["row"] == VERIFIER_ONLY:
            print(f"| {s['row']} | 1.00 | – | – | 0 | 1.00× ({s['tokens_per_s']:.2f} tok/s) | – |")
            continue
        rule = "sps" if s["row"].startswith(labels["sps"] + " ") else "cactus"
        tpc_ratio = s["tokens_per_call"] / chain[rule]["tokens_per_call"]
        pooled = s["tokens_per_s"] / base["tokens_per_s"]
        print(
            f"| {s['row']} | {s['tokens_per_call']:.2f} | {tpc_ratio:.2f}× "
            f"| {s['acceptance_rate']:.3f} | {s['mean_emitted_kl']:.3f} "
            f"| {s['speedup_median']:.2f}× ({pooled:.2f}×) "
            f"| {s['draft_ms_per_round']:.1f} / {s['verify_ms_per_round']:.1f} |"
        )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "pair": pair.identity, "rows": summaries}, f, indent=1)


if __name__ == "__main__":
    main()
