"""What recording costs per rule: the trace rows and the exact emitted KL, for every rule.

For each rule (its defaults, cactus-family deltas at 1), the default decoder (record_trace=True,
measure_kl=True, as the Decode page runs it) and the same decoder with recording off
(record_trace=False, measure_kl=False) decode the same prompts back to back. Printed per rule:

- on the critical path: `stats.record_s / stats.wall_s`, the time the decoding thread spent on
  recording (waiting for it, and the final join) as a share of the run's wall time;
- the recording's own work: `stats.record_work_s / stats.wall_s` (where the decoder records on a
  worker thread this runs beside the decoding; inline, it equals the first);
- tokens/s with and without recording, and their ratio (without ÷ with).

Medians over the prompts.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_recording.py [--prompts 2] [--tokens 32]
        [--threads 1] [--rules sps cactus ...]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.loading.embedded_drafts import REFERENCE_EMBEDDED_DRAFT, embedded_draft
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.maths.rules import RULE_NAMES, make_rule

# Each rule at its defaults, but the Cactus family at delta = 1 (the Decode page's example).
PARAMS = {
    "cactus": {"delta": 1.0},
    "cactus-exact": {"delta": 1.0},
    "cactus-adaptive": {"delta": 1.0},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rules", nargs="+", default=list(RULE_NAMES), choices=RULE_NAMES)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(device="cpu", **embedded_draft(REFERENCE_EMBEDDED_DRAFT).load_kwargs("cpu"))
    prompts = builtin_prompts()[: args.prompts]
    print(f"pair: {pair.identity}\n")
    print(
        "| rule | recording on the critical path (share of wall) | recording's own work "
        "(share of wall) | tokens/s recorded | tokens/s without recording | ratio |"
    )
    print("|---|---|---|---|---|---|")
    for name in args.rules:
        rule = make_rule(name, **PARAMS.get(name, {}))
        full = SpeculativeDecoder(pair, rule, k=4, temperature=0.7)
        lean = SpeculativeDecoder(
            pair, rule, k=4, temperature=0.7, record_trace=False, measure_kl=False
        )
        full.generate(prompts[0], max_new_tokens=4, seed=0)  # warm-up
        lean.generate(prompts[0], max_new_tokens=4, seed=0)
        critical, work, with_rec, without = [], [], [], []
        for i, prompt in enumerate(prompts):
            a = full.generate(prompt, max_new_tokens=args.tokens, seed=i).stats
            b = lean.generate(prompt, max_new_tokens=args.tokens, seed=i).stats
            critical.append(a.record_s / a.wall_s)
            # Inline recording (no worker) does all of its work on the critical path.
            work.append(getattr(a, "record_work_s", a.record_s) / a.wall_s)
            with_rec.append(a.tokens_per_s)
            without.append(b.tokens_per_s)
        w, wo = statistics.median(with_rec), statistics.median(without)
        print(
            f"| {rule.label} | {statistics.median(critical):.0%} | {statistics.median(work):.0%} "
            f"| {w:.1f} | {wo:.1f} | {wo / w:.2f}× |",
            flush=True,
        )


if __name__ == "__main__":
    main()
