"""Draft trees against their optimum, on real rounds of the embedded pair (docs/benchmarks.md,
"Trees against their optimum").

The default tree (8/4/1/2/2, `TreeSettings`) decodes the built-in prompts under `sps`; every
round's tree and the verifier's whole rows are kept as the decoder verified them. On those
same rounds:

- per row with candidates: the chance that one candidate is accepted, exactly over the draws of
  the candidates, for the lab's recursive rejection sampling (`tree_optimum.rrs_acceptance`),
  against the most any lossless verifier can reach there (`tree_optimum.multidraft_optimum`,
  the optimal-transport bound); split by how many candidates the row has;
- per round: the expected tokens per call (accepted drafts + 1, exactly over the coins) of RRS
  and of traversal verification (`block` on a tree, `maths.traversal`) on the same trees.

Then both schemes decode the prompts for real (`run_bench`, interleaved), for the measured
tokens per call and speed.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_tree_optimum.py --prompts 8 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from typing import Any

import torch

from cactus_core.engine.decoding import tree_round
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.embedded_drafts import FASTEST_FEATURE, embedded_draft_named
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.experiments.bench import VERIFIER_ONLY, BenchRow, run_bench
from cactus_core.maths.rules import make_rule
from cactus_core.maths.sampling import SamplingSettings
from cactus_core.maths.tree import DraftTree, children_of, expected_accepted
from cactus_core.maths.tree_optimum import multidraft_optimum, rrs_acceptance


def kept_rounds(decoder: SpeculativeDecoder, prompts: list[str], tokens: int) -> list[Any]:
    """(tree, q rows) of every tree round the decoder verifies on the prompts."""
    kept: list[tuple[DraftTree, torch.Tensor]] = []
    walk = tree_round.verify_tree

    def keep(judge, tree, q, *args, **kwargs):  # the decoder's own call, recorded
        kept.append((tree, q.double()))
        return walk(judge, tree, q, *args, **kwargs)

    tree_round.verify_tree = keep
    try:
        for i, prompt in enumerate(prompts):
            decoder.generate(prompt, max_new_tokens=tokens, seed=i)
    finally:
        tree_round.verify_tree = walk
    return kept


def measure(kept: list[Any]) -> dict[str, Any]:
    """Per-row acceptance against the bound, by candidates per row; per-round tokens per call."""
    rows: dict[int, list[tuple[float, float]]] = defaultdict(list)
    tpc = {"rrs": [], "traversal": []}
    sps, block = make_rule("sps"), make_rule("block")
    for tree, q in kept:
        p = tree.draft_probs.double()
        parents = tree.parents.tolist()
        for r, kids in enumerate(children_of(parents)):
            if kids:
                m = len(kids)
                rows[m].append(
                    (float(rrs_acceptance(p[r], q[r], m)), float(multidraft_optimum(p[r], q[r], m)))
                )
        args = (tree.tokens[None], parents, p[None], q[None])
        tpc["rrs"].append(1 + float(expected_accepted(sps, *args)))
        tpc["traversal"].append(1 + float(expected_accepted(block, *args)))
    return {"rows": rows, "tpc": tpc, "rounds": len(kept)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8, help="the first N built-in prompts")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, nargs="+", default=[1.0, 0.95])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--embedded-draft", default=FASTEST_FEATURE)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(**embedded_draft_named(args.embedded_draft).load_kwargs("cpu"))
    prompts = builtin_prompts()[: args.prompts]
    shape = TreeSettings()
    print(f"pair: {pair.identity}; {len(prompts)} prompts, {args.max_new_tokens} tokens, ", end="")
    print(f"T {args.temperature}, tree {shape.to_dict()}")
    for top_p in args.top_p:
        sampling = SamplingSettings(temperature=args.temperature, top_p=top_p)
        decoder = SpeculativeDecoder(pair, make_rule("sps"), sampling=sampling, tree=shape)
        out = measure(kept_rounds(decoder, prompts, args.max_new_tokens))
        print(f"\ntop-p {top_p}: {out['rounds']} rounds")
        print("| candidates at the row | rows | RRS acceptance | optimum | RRS / optimum |")
        print("|---:|---:|---:|---:|---:|")
        for m in sorted(out["rows"]):
            got = out["rows"][m]
            rrs = statistics.fmean(a for a, _ in got)
            best = statistics.fmean(b for _, b in got)
            print(f"| {m} | {len(got)} | {rrs:.3f} | {best:.3f} | {rrs / best:.3f} |")
        rrs, trav = out["tpc"]["rrs"], out["tpc"]["traversal"]
        diff = [t - r for t, r in zip(trav, rrs, strict=True)]
        print(
            f"tokens per call on the same rounds, exact: RRS {statistics.fmean(rrs):.3f}, "
            f"traversal {statistics.fmean(trav):.3f} ({statistics.fmean(diff):+.3f} per round; "
            f"traversal ahead on {sum(d > 1e-9 for d in diff)}, behind on "
            f"{sum(d < -1e-9 for d in diff)} of {len(diff)} rounds)"
        )
        bench = [BenchRow(VERIFIER_ONLY, kind="verifier-only")]
        bench += [BenchRow(f"{n} tree", make_rule(n), tree=shape) for n in ("sps", "block")]
        summaries = run_bench(pair, prompts, sampling, args.max_new_tokens, rows=bench)
        print("| decoded | tokens per call | speedup, median |")
        print("|---|---:|---:|")
        for s in summaries[1:]:
            print(f"| {s['row']} | {s['tokens_per_call']:.3f} | {s['speedup_median']:.2f}× |")


if __name__ == "__main__":
    main()
