"""What recording costs per rule: the trace rows and the exact emitted KL, as a share of a
run's wall time (`stats.record_s`), and tokens/s with and without it, measured back to back.

    .venv/bin/python benchmarks/bench_recording.py [--prompts 2] [--tokens 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.loading.embedded_drafts import REFERENCE_EMBEDDED_DRAFT, embedded_draft
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.maths.rules import make_rule

RULES = {
    "sps": {},
    "cactus": {"delta": 1.0},
    "cactus-exact": {"delta": 1.0},
    "cactus-budget": {"budget": 0.1},
    "interp": {"alpha": 0.5},
    "tas": {},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(device="cpu", **embedded_draft(REFERENCE_EMBEDDED_DRAFT).load_kwargs("cpu"))
    prompts = builtin_prompts()[: args.prompts]
    print(f"pair: {pair.identity}\n")
    print(
        "| rule | recording share of wall (default decoder) | tokens/s recorded | "
        "tokens/s without recording | ratio |"
    )
    print("|---|---|---|---|---|")
    for name, params in RULES.items():
        rule = make_rule(name, **params)
        full = SpeculativeDecoder(pair, rule, k=4, temperature=0.7)
        lean = SpeculativeDecoder(
            pair, rule, k=4, temperature=0.7, record_trace=False, measure_kl=False
        )
        full.generate(prompts[0], max_new_tokens=4, seed=0)  # warm-up
        shares, with_rec, without = [], [], []
        for i, prompt in enumerate(prompts):
            a = full.generate(prompt, max_new_tokens=args.tokens, seed=i).stats
            b = lean.generate(prompt, max_new_tokens=args.tokens, seed=i).stats
            shares.append(a.record_s / a.wall_s)
            with_rec.append(a.tokens_per_s)
            without.append(b.tokens_per_s)
        w, wo = statistics.median(with_rec), statistics.median(without)
        print(
            f"| {name} | {statistics.median(shares):.0%} | {w:.1f} | {wo:.1f} | {wo / w:.2f}× |",
            flush=True,
        )


if __name__ == "__main__":
    main()
