"""The estimated frontier against the reference sweep, and what a trace's tail does to it.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_estimate.py error   # needs no model
    PYTHONPATH=. .venv/bin/python benchmarks/bench_estimate.py tail    # decodes 2 prompts

`error`: for every measured setting of the shipped reference (both top-p values, every rule),
the estimated frontier at the same parameter value against the measured tokens per call and
emitted KL per token, two ways: as shown (`from_own_runs`, which at a swept value is that
run's own curve: on-policy, so this tests the round model) and held out (`held_out`: the same
blend without that run, from the runs at the swept values around it: what a slider position
between swept values gets). Targets: within 10% of tokens per call and within max(20%, 0.02
nats) of emitted KL. Prints one markdown row per rule (its worst setting) and every miss.

`tail`: full (p, q) rows of an sps run on the embedded pair against the same rows cut to a
trace's top-128 entries of p and q plus the tail (1 and 16 tail buckets): the estimate's
acceptance and KL per decided position at a few values of each rule, and how long a whole
curve (50 values, every rule) takes on the compact rows.
"""

from __future__ import annotations

import sys
import time

import torch

from cactus_core.experiments.estimates.curves import compact_rows, estimate_frontier, held_out
from cactus_core.experiments.sweeps.reference import REFERENCE_SAMPLING, load_reference
from cactus_core.maths.rules import RULES

TPC_TOL = 0.10
KL_REL, KL_ABS = 0.20, 0.02


def _errors(
    est_t: float, est_k: float, row: dict, misses: list[str], how: str, top_p: float
) -> tuple[float, float, bool]:
    t_err = (est_t - row["tokens_per_call"]) / row["tokens_per_call"]
    k_err = est_k - row["emitted_kl"]
    ok = abs(t_err) <= TPC_TOL and abs(k_err) <= max(KL_REL * row["emitted_kl"], KL_ABS)
    if not ok:
        misses.append(
            f"{how}, top-p {top_p:g} {row['label']}: tokens/call {row['tokens_per_call']:.2f} "
            f"measured, {est_t:.2f} estimated ({t_err:+.0%}); KL {row['emitted_kl']:.3f} "
            f"measured, {est_k:.3f} estimated"
        )
    return t_err, k_err, ok


def error() -> None:
    ref = load_reference()
    print(f"reference: {ref.caption()}\n")
    print(
        "| top-p | rule | settings | shown: worst tokens/call error | worst KL error (nats) "
        "| misses | held out: worst tokens/call error | worst KL error (nats) | misses |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    misses: list[str] = []
    counts = {"shown": [0, 0], "held out": [0, 0]}
    abs_t: dict[str, list[float]] = {"shown": [], "held out": []}
    for top_p, part in ref.sweeps.items():
        assert part.estimate is not None
        k = part.estimate.k
        for name in RULES:
            curve = part.estimate.curves[name]
            runs = part.own_runs[name]
            worst = {how: [0.0, 0.0, 0] for how in counts}
            rows = part.rule_rows(name)
            for r in rows:
                guesses = {
                    "shown": (
                        curve.at(r["value"], "tokens_per_call"),
                        curve.at(r["value"], "kl_token"),
                    )
                }
                if len(runs) > 1:
                    index = next(i for i, (v, _) in enumerate(runs) if v == r["value"])
                    out = held_out(runs, index, k)
                    guesses["held out"] = (out["tokens_per_call"], out["kl_token"])
                for how, (t, kl_) in guesses.items():
                    t_err, k_err, ok = _errors(t, kl_, r, misses, how, top_p)
                    w = worst[how]
                    w[0], w[1] = max(w[0], abs(t_err)), max(w[1], abs(k_err))
                    w[2] += not ok
                    counts[how][0] += 1
                    counts[how][1] += ok
                    abs_t[how].append(abs(t_err))
            cells = [f"{w[0]:.1%} | {w[1]:.3f} | {w[2]}" for w in worst.values()]
            if len(runs) == 1:  # nothing to hold a lone run out against
                cells[1] = "— | — | —"
            print(f"| {top_p:g} | {name} | {len(rows)} | {cells[0]} | {cells[1]} |")
    for how, (n, ok) in counts.items():
        med = sorted(abs_t[how])[len(abs_t[how]) // 2]
        print(
            f"\n{how}: {ok} of {n} settings within both targets; "
            f"median |tokens/call error| {med:.1%}"
        )
    print("\nMisses:")
    for m in misses:
        print(f"- {m}")


def tail() -> None:
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder
    from cactus_core.engine.loading.models import load_pair
    from cactus_core.engine.loading.prompts import builtin_prompts
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
