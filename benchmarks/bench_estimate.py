"""The estimated frontier against the reference sweep, and what a trace's tail does to it.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_estimate.py error   # needs no model
    PYTHONPATH=. .venv/bin/python benchmarks/bench_estimate.py tail    # decodes 2 prompts

`error`: for every measured setting of the shipped reference (both top-p values, every rule),
the estimate at the same parameter value (from the reference's traced sps rows) against the
measured tokens per call and emitted KL per token. Targets: within 10% of tokens per call and
within max(20%, 0.02 nats) of emitted KL. Prints one markdown row per rule (its worst setting)
and every miss.

`tail`: full (p, q) rows of an sps run on the embedded pair against the same rows cut to a
trace's top-128 entries of p and q plus the tail (1 and 16 tail buckets): the estimate's
acceptance and KL per decided position at a few values of each rule, and how long a whole
curve (50 values, every rule) takes on the compact rows.
"""

from __future__ import annotations

import sys
import time

import torch

from cactus_core.experiments.estimate import compact_rows, estimate_frontier
from cactus_core.experiments.reference import REFERENCE_SAMPLING, load_reference
from cactus_core.maths.rules import RULES

TPC_TOL = 0.10
KL_REL, KL_ABS = 0.20, 0.02


def error() -> None:
    ref = load_reference()
    print(f"reference: {ref.caption()}\n")
    print("| top-p | rule | settings | worst tokens/call error | worst KL error (nats) | misses |")
    print("|---|---|---:|---:|---:|---:|")
    misses: list[str] = []
    total = hit = 0
    for top_p, part in ref.sweeps.items():
        assert part.estimate is not None
        for name in RULES:
            curve = part.estimate.curves[name]
            worst_t = worst_k = 0.0
            n_miss = 0
            rows = part.rule_rows(name)
            for r in rows:
                est_t = curve.at(r["value"], "tokens_per_call")
                est_k = curve.at(r["value"], "kl_token")
                t_err = (est_t - r["tokens_per_call"]) / r["tokens_per_call"]
                k_err = est_k - r["emitted_kl"]
                worst_t = max(worst_t, abs(t_err), key=abs)
                worst_k = max(worst_k, abs(k_err), key=abs)
                ok_t = abs(t_err) <= TPC_TOL
                ok_k = abs(k_err) <= max(KL_REL * r["emitted_kl"], KL_ABS)
                total += 1
                hit += ok_t and ok_k
                if not (ok_t and ok_k):
                    n_miss += 1
                    misses.append(
                        f"top-p {top_p:g} {r['label']}: tokens/call {r['tokens_per_call']:.2f} "
                        f"measured, {est_t:.2f} estimated ({t_err:+.0%}); KL "
                        f"{r['emitted_kl']:.3f} measured, {est_k:.3f} estimated"
                    )
            print(
                f"| {top_p:g} | {name} | {len(rows)} | {worst_t:.1%} | {worst_k:.3f} | {n_miss} |"
            )
    print(f"\n{hit} of {total} settings within both targets. Misses:")
    for m in misses:
        print(f"- {m}")


def tail() -> None:
    from cactus_core.engine.decoder import SpeculativeDecoder
    from cactus_core.engine.models import load_pair
    from cactus_core.engine.prompts import builtin_prompts
    from cactus_core.maths.rules import LOSSLESS_RULE

    torch.set_num_threads(1)
    pair = load_pair()
    rows: list[tuple[torch.Tensor, torch.Tensor]] = []

    def probe(row: int, rnd: int, p: torch.Tensor, q: torch.Tensor) -> None:
        rows.append((p.double().clone(), q.double().clone()))

    dec = SpeculativeDecoder(
        pair, LOSSLESS_RULE, sampling=REFERENCE_SAMPLING, record_trace=False, probe=probe
    )
    dec.generate(builtin_prompts()[:2], max_new_tokens=32, seed=0)
    p = torch.cat([r[0] for r in rows])
    q = torch.cat([r[1] for r in rows])
    print(f"{p.shape[0]} decided positions, V = {p.shape[1]}")
    names = list(RULES)
    full = estimate_frontier(p, q, 4, rules=names, count=3)
    for buckets in (1, 16):
        pc, qc = compact_rows(p, q, 128, buckets)
        small = estimate_frontier(pc, qc, 4, rules=names, count=3)
        print(f"\n### top-128 + {buckets} tail bucket(s), W = {pc.shape[1]}")
        print("| rule | value | acceptance full | compact | KL/position full | compact |")
        print("|---|---:|---:|---:|---:|---:|")
        for name in names:
            f, s = full.curves[name], small.curves[name]
            for i in range(len(f.values)):
                print(
                    f"| {name} | {f.values[i]:.3g} | {f.acceptance[i]:.4f} | "
                    f"{s.acceptance[i]:.4f} | {f.kl_position[i]:.4f} | {s.kl_position[i]:.4f} |"
                )
    pc, qc = compact_rows(p, q, 128, 1)
    start = time.perf_counter()
    estimate_frontier(pc, qc, 4)
    print(
        f"\nwhole curve, every rule, 50 values, {pc.shape[0]} compact rows: "
        f"{time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    {"error": error, "tail": tail}[sys.argv[1] if len(sys.argv) > 1 else "error"]()
