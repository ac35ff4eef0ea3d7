"""Block verification against token-wise sps on the embedded pair: tokens per verifier call.

Two measurements, both over every round of the built-in prompts:

1. measured: the decoder runs each rule (same seeds), and every round's emitted tokens
   (accepted + 1) are averaged, with a 95% interval from a bootstrap over prompts;
2. paired: on the rounds `block` itself decoded, the exact expected accepted drafts of both
   rules on the same draft and the same rows (block: `Block.expected_accepted`; sps:
   sum_i prod_{j≤i} a(n_j)), so the coins' noise drops out.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_block.py [--prompts 20] [--max-new-tokens 128]
"""

from __future__ import annotations

import argparse
import random
import statistics

import torch

import cactus_core.engine.decoding.chain_round as chain_round
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.maths.rules import LOSSLESS_RULE, make_rule

BLOCK = "block"


def bootstrap_mean_ci(groups: list[list[float]], draws: int = 2000) -> tuple[float, float, float]:
    """Mean over all values and a 95% percentile interval from resampling whole groups."""
    rng = random.Random(0)
    flat = [x for g in groups for x in g]
    means = []
    for _ in range(draws):
        pick = [groups[rng.randrange(len(groups))] for _ in groups]
        values = [x for g in pick for x in g]
        means.append(sum(values) / len(values))
    means.sort()
    return sum(flat) / len(flat), means[int(0.025 * draws)], means[int(0.975 * draws)]


def measured_rounds(pair, rule: str, prompts: list[str], args) -> list[list[float]]:
    """Tokens emitted per round, one list per prompt."""
    dec = SpeculativeDecoder(
        pair, make_rule(rule), k=args.k, temperature=args.temperature, top_p=args.top_p,
        record_trace=False, measure_kl=False, lazy_head=False,
    )  # fmt: skip
    per_prompt: list[list[float]] = [[] for _ in prompts]

    def on_round(rnd, row: int) -> None:
        per_prompt[row].append(rnd.num_accepted + 1)

    dec.generate(prompts, max_new_tokens=args.max_new_tokens, seed=args.seed, on_round=on_round)
    return per_prompt


def paired_expectations(pair, prompts: list[str], args) -> tuple[list[float], list[float]]:
    """Exact E[accepted drafts] of block and of sps on every round block decoded."""
    block, sps = make_rule(BLOCK), make_rule(LOSSLESS_RULE)
    out_block: list[float] = []
    out_sps: list[float] = []
    original = chain_round.verify_draft

    def spy(judge, cache, ids, draft, coins, probs, lazy):
        verdict = original(judge, cache, ids, draft, coins, probs, lazy)
        p = draft.probs.double()
        q = verdict[1].double()  # [B, k+1, V]: the full rows (lazy head off)
        _, h = block.stop_chances(p, draft.ids, q)
        out_block.extend(block.expected_accepted(h).tolist())
        a = sps.accept_probs(q[:, :-1], p, draft.ids, validate=False)
        out_sps.extend(a.cumprod(-1).sum(-1).tolist())
        return verdict

    chain_round.verify_draft = spy
    try:
        measured_rounds(pair, BLOCK, prompts, args)
    finally:
        chain_round.verify_draft = original
    return out_block, out_sps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair()
    prompts = builtin_prompts()[: args.prompts]
    print(
        f"embedded pair, {len(prompts)} prompts × {args.max_new_tokens} tokens, "
        f"T={args.temperature}, top-p {args.top_p}, k={args.k}, seed {args.seed}\n"
    )
    print("| rule | rounds | tokens per call | 95% CI (bootstrap over prompts) |")
    print("|---|---:|---:|---|")
    for rule in (LOSSLESS_RULE, BLOCK):
        groups = measured_rounds(pair, rule, prompts, args)
        mean, lo, hi = bootstrap_mean_ci(groups)
        rounds = sum(len(g) for g in groups)
        print(f"| {rule} | {rounds} | {mean:.3f} | [{lo:.3f}, {hi:.3f}] |", flush=True)
    block, sps = paired_expectations(pair, prompts, args)
    diff = [b - s for b, s in zip(block, sps, strict=True)]
    se = statistics.stdev(diff) / len(diff) ** 0.5
    print(
        f"\npaired, exact over the coins, on the {len(diff)} rounds block decoded: "
        f"E[tokens per call] block {1 + statistics.mean(block):.3f}, "
        f"sps {1 + statistics.mean(sps):.3f}, difference {statistics.mean(diff):+.4f} "
        f"± {1.96 * se:.4f} (95%), block ≥ sps on {sum(d >= -1e-9 for d in diff)} of "
        f"{len(diff)} rounds"
    )


if __name__ == "__main__":
    main()
