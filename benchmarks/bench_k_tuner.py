"""The k tuner's prediction against measured runs on the embedded pair.

Everything is measured interleaved in one process, in `--repeats` passes. Each pass takes one
sample of the pair's costs (`k_tuner.cost_sample`: the decoder's own verify pass, draft and
rest from short sps runs at k = 1..12, on a built-in prompt), a verifier-only run, a run of
every rule at every k (in an order rotated from pass to pass), and a second verifier-only run;
each pass has its own seeds. Then:

- predicted: per-position acceptance from the k = 4 runs (all passes pooled) and the medians of
  the cost samples (`k_tuner.combine_costs`) give tokens per call and speedup at every k;
- measured: tokens per call of the runs at that k over whole rounds (mean acceptance length,
  vLLM's definition: the 32-token limit's cut of a last round does not count against it), and
  the decoding speedup: each pass's tokens/s over decoding time (prefill left out on both
  sides, as the model leaves it out) ÷ that pass's verifier-only tokens/s, the median over
  passes, so that a load swing between passes cancels.

Held-out prompts (not among the reference's), the decoder without recording. Prints the costs,
the per-position rates each k measured (are rates from k = 4 valid at other k?) and a Markdown
table.

    .venv/bin/python benchmarks/bench_k_tuner.py [--tokens 32] [--prompts 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.generation import PositionCounts
from cactus_core.engine.loading.embedded_drafts import REFERENCE_EMBEDDED_DRAFT, embedded_draft
from cactus_core.engine.loading.models import load_pair
from cactus_core.experiments.tuning.k_tuner import (
    CostProbe,
    combine_costs,
    cost_sample,
    predict_k,
    store_costs,
)
from cactus_core.maths.rules import make_rule

HELD_OUT = (
    "Describe how a bicycle gear works.",
    "Give three tips for keeping houseplants alive.",
    "What causes the seasons on Earth?",
    "Write a short note inviting a neighbour to dinner.",
)
KS = (2, 3, 4, 6, 8)
SOURCE_K = 4  # the runs whose per-position rates make the prediction
RULES = {"sps": {}, "cactus δ=1": {"name": "cactus", "delta": 1.0}}


def run(pair, rule, k: int, tokens: int, seed: int, prompts: int, plain: bool = False):
    """(tokens over whole rounds, decoding seconds, per-position counts, the decoder's own
    per-round ms of the verify pass, the draft and the rest) over the prompts."""
    dec = SpeculativeDecoder(pair, rule, k=k, temperature=0.7, record_trace=False, measure_kl=False)
    call = dec.generate_autoregressive if plain else dec.generate
    outs = [call(p, max_new_tokens=tokens, seed=seed + i) for i, p in enumerate(HELD_OUT[:prompts])]
    decode_s = sum(o.stats.wall_s - o.stats.prefill_s - o.stats.record_s for o in outs)
    counts = PositionCounts.pooled([o.stats.positions for o in outs])
    if plain:
        whole = sum(o.stats.new_tokens for o in outs)
    else:  # every round's m + 1 tokens, the last round's past the limit included
        whole = sum(o.stats.rounds + o.stats.accepted_tokens for o in outs)
    rounds = sum(o.stats.rounds for o in outs)
    verify = sum(o.stats.verify_s for o in outs)
    draft = sum(o.stats.draft_s for o in outs)
    parts = tuple(1000 * x / rounds for x in (verify, draft, decode_s - verify - draft))
    return whole, decode_s, counts, parts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    # The reference's pair: the embedded verifier with the feature draft in bfloat16.
    pair = load_pair(device="cpu", **embedded_draft(REFERENCE_EMBEDDED_DRAFT).load_kwargs("cpu"))
    start = time.perf_counter()
    rules = {label: make_rule(spec.get("name", "sps"), **{k: v for k, v in spec.items()
                                                           if k != "name"})
             for label, spec in RULES.items()}  # fmt: skip
    cells = [(label, k) for label in rules for k in KS]
    probe = CostProbe(pair)
    run(pair, rules["sps"], 4, 8, 0, 1)  # warm-up
    samples = []
    speedups: dict[tuple[str, int], list[float]] = {c: [] for c in cells}
    counts: dict[tuple[str, int], list[PositionCounts]] = {c: [] for c in cells}
    parts: dict[tuple[str, int], list[tuple[float, ...]]] = {c: [] for c in cells}
    n = args.prompts
    for r in range(args.repeats):
        seed = 100 + 1000 * r
        samples.append(cost_sample(probe, seed=r))
        b0 = run(pair, rules["sps"], 1, args.tokens, seed, n, plain=True)
        got = {}
        shift = (r * len(cells)) // max(args.repeats, 1)
        for label, k in cells[shift:] + cells[:shift]:
            got[label, k] = run(pair, rules[label], k, args.tokens, seed, n)
        b1 = run(pair, rules["sps"], 1, args.tokens, seed, n, plain=True)
        base = (b0[0] + b1[0]) / (b0[1] + b1[1])  # verifier-only tokens/s over the pass
        for cell, (whole, secs, c, ms) in got.items():
            speedups[cell].append(whole / secs / base)
            counts[cell].append(c)
            parts[cell].append(ms)
        print(f"pass {r + 1}/{args.repeats}: verifier-only {base:.1f} tokens/s", flush=True)
    costs = combine_costs(pair, samples)
    store_costs(costs)
    print(f"pair: {pair.identity}")
    print(
        f"costs (medians of {costs.samples} interleaved samples): v(1..13) ms = "
        f"{', '.join(f'{x:.0f}' for x in costs.verify_ms)}; draft step d {costs.draft_ms:.1f} ms "
        f"(c = {costs.c:.3f}), draft per round f {costs.draft_round_ms:.1f} ms, round rest o "
        f"{costs.round_overhead_ms:.1f} ms, verifier-only rest o_1 {costs.plain_overhead_ms:.1f} ms"
    )
    print("\nconditional acceptance by position, per k (all passes):")
    for label in rules:
        for k in KS:
            c = PositionCounts.pooled(counts[label, k])
            rates = " ".join("-" if x is None else f"{x:.2f}" for x in c.conditional())
            print(f"  {label} k={k}: {rates}  ({c.rounds} rounds)")
    print("\nper round, ms: the decoder's own (median of passes) against the model's")
    print("| rule | k | verify pass | v(k + 1) | draft | f + k·d | rest | o |")
    print("|---|---|---|---|---|---|---|---|")
    for label, k in cells:
        v, d, o = (statistics.median(col) for col in zip(*parts[label, k], strict=True))
        print(
            f"| {label} | {k} | {v:.0f} | {costs.verify(k + 1):.0f} | {d:.0f} | "
            f"{costs.draft_round(k):.0f} | {o:.0f} | {costs.round_overhead_ms:.0f} |"
        )
    print()
    print(
        "| rule | k | predicted tokens/call | measured | error | predicted speedup | measured "
        "(median of passes) | error |"
    )
    print("|---|---|---|---|---|---|---|---|")
    worst = {"tpc": [], "speed": []}
    for label in rules:
        src = PositionCounts.pooled(counts[label, SOURCE_K])
        pred = predict_k(src.conditional(), costs, KS, reached=src.reached)
        for k in KS:
            tpc, speed = pred.at(k)
            m_tpc = PositionCounts.pooled(counts[label, k]).mean_acceptance_length
            m_speed = statistics.median(speedups[label, k])
            e_tpc, e_speed = tpc / m_tpc - 1, speed / m_speed - 1
            worst["tpc"].append(abs(e_tpc))
            worst["speed"].append(abs(e_speed))
            ext = " (extrapolated)" if pred.extrapolated(k) else ""
            spread = f"{min(speedups[label, k]):.2f}–{max(speedups[label, k]):.2f}"
            print(
                f"| {label} | {k}{ext} | {tpc:.2f} | {m_tpc:.2f} | {100 * e_tpc:+.0f}% "
                f"| {speed:.2f}× | {m_speed:.2f}× ({spread}) | {100 * e_speed:+.0f}% |"
            )
        print(f"<!-- {label}: best k predicted {pred.best_k}; {pred.how()} -->")
    within_tpc = sum(e <= 0.10 for e in worst["tpc"])
    within_speed = sum(e <= 0.15 for e in worst["speed"])
    total = len(worst["tpc"])
    print(
        f"\ntokens per call within 10% at {within_tpc}/{total} (worst "
        f"{100 * max(worst['tpc']):.0f}%); speedup within 15% at {within_speed}/{total} (worst "
        f"{100 * max(worst['speed']):.0f}%); wall {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
