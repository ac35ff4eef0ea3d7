"""The k tuner's prediction against measured runs on the embedded pair.

For each rule, one run at k = 4 on held-out prompts (not among the reference's) gives the
per-position acceptance; the pair's costs (`k_tuner.pair_costs`, measured afresh) turn it into
predicted tokens per call and speedup for every k. Then runs at k = 2, 3, 4, 6, 8 on the same
prompts, with a verifier-only run, measure both, in one run of this script (decoder without
recording: record_trace=False, measure_kl=False). Prints a Markdown table.

    .venv/bin/python benchmarks/bench_k_tuner.py [--tokens 48] [--prompts 4] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.generation import PositionCounts, summarize
from cactus_core.engine.loading.embedded_drafts import REFERENCE_EMBEDDED_DRAFT, embedded_draft
from cactus_core.engine.loading.models import load_pair
from cactus_core.experiments.k_tuner import pair_costs, predict_k
from cactus_core.maths.rules import make_rule

HELD_OUT = (
    "Describe how a bicycle gear works.",
    "Give three tips for keeping houseplants alive.",
    "What causes the seasons on Earth?",
    "Write a short note inviting a neighbour to dinner.",
)
KS = (2, 3, 4, 6, 8)
RULES = {"sps": {}, "cactus δ=1": {"name": "cactus", "delta": 1.0}}


def run(pair, rule, k: int, tokens: int, plain: bool = False, prompts: int = 4):
    dec = SpeculativeDecoder(pair, rule, k=k, temperature=0.7, record_trace=False, measure_kl=False)
    outs = []
    for i, prompt in enumerate(HELD_OUT[:prompts]):
        call = dec.generate_autoregressive if plain else dec.generate
        outs.append(call(prompt, max_new_tokens=tokens, seed=100 + i))
    return summarize(outs), PositionCounts.pooled([o.stats.positions for o in outs])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=len(HELD_OUT))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # The reference's pair: the embedded verifier with the feature draft in bfloat16.
    pair = load_pair(device="cpu", **embedded_draft(REFERENCE_EMBEDDED_DRAFT).load_kwargs("cpu"))
    start = time.perf_counter()
    costs = pair_costs(pair, refresh=True)
    print(f"pair: {pair.identity}")
    print(
        f"costs: v(1..13) ms = {', '.join(f'{x:.1f}' for x in costs.verify_ms)}; draft step "
        f"{costs.draft_ms:.2f} ms (c = {costs.c:.3f}); round overhead "
        f"{costs.round_overhead_ms:.2f} ms; verifier-only overhead {costs.plain_overhead_ms:.2f} ms"
    )
    run(pair, make_rule("sps"), 4, 8)  # warm-up
    n = args.prompts
    base, _ = run(pair, make_rule("sps"), 4, args.tokens, plain=True, prompts=n)
    print()
    print(
        "| rule | k | predicted tokens/call | measured | error | predicted speedup | measured "
        "| error |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, spec in RULES.items():
        spec = dict(spec)
        rule = make_rule(spec.pop("name", "sps"), **spec)
        _, counts = run(pair, rule, 4, args.tokens, prompts=n)
        pred = predict_k(counts.conditional(), costs, KS, reached=counts.reached)
        for k in KS:
            got, _ = run(pair, rule, k, args.tokens, prompts=n)
            tpc, speed = pred.at(k)
            m_tpc = got["tokens_per_call"]
            m_speed = got["tokens_per_s"] / base["tokens_per_s"]
            ext = " (extrapolated)" if pred.extrapolated(k) else ""
            print(
                f"| {label} | {k}{ext} | {tpc:.2f} | {m_tpc:.2f} | {100 * (tpc / m_tpc - 1):+.0f}% "
                f"| {speed:.2f}× | {m_speed:.2f}× | {100 * (speed / m_speed - 1):+.0f}% |"
            )
        print(f"<!-- {label}: best k predicted {pred.best_k}; {pred.how()} -->")
    print(
        f"\nverifier-only: {base['tokens_per_s']:.1f} tokens/s; "
        f"wall {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
