"""SGLang's `--speculative-accept-threshold-acc` fitted to Cactus settings on the shipped
reference sweep, and the fit checked against measured runs.

For each Cactus δ of the reference grid and each top-p, the fit reads both rules off the
reference's estimated curves (`engine_fit.fit_on_curves`: each rule's own runs, on-policy at
its swept values): the written threshold, SGLang's acceptance there against Cactus's (the fit's
error), and both rules' emitted KL per decided position. `--confirm` then measures: it decodes
the reference prompts with SGLang's rule at the fitted threshold (the reference's prompts,
seeds and sampling; chunks cached) and compares its measured acceptance rate with Cactus's
measured row, which is the fit's error against what actually runs. Prints Markdown tables.

    .venv/bin/python benchmarks/bench_sglang_fit.py [--confirm 1.0] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from cactus_core.experiments.estimates.engine_fit import SGLANG_RULE, fit_on_curves
from cactus_core.experiments.sweeps.config import Setting
from cactus_core.experiments.sweeps.reference import confirm_config, load_reference
from cactus_core.maths.rules import DEFAULT_RULE, make_rule, rule_class


def fits(ref) -> list:
    spec = rule_class(DEFAULT_RULE).swept()
    out = []
    for top_p, part in sorted(ref.sweeps.items(), reverse=True):
        curves = part.estimate.curves
        for value in spec.grid:
            if value <= 0:
                continue
            rule = make_rule(DEFAULT_RULE, **{spec.name: value})
            source = f"reference curves, top-p {top_p:g}"
            fit = fit_on_curves(rule, curves[rule.name], curves[SGLANG_RULE], source)
            out.append((top_p, value, fit))
    return out


def table(rows) -> None:
    print("| top-p | setting | t_acc | acceptance: Cactus | SGLang | fit error "
          "| KL/position: Cactus | SGLang | edge |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for top_p, _, f in rows:
        print(
            f"| {top_p:g} | {f.setting} | {f.threshold_acc:g} | {f.target_acceptance:.3f} "
            f"| {f.acceptance:.3f} | {f.error:+.4f} | {f.target_kl:.4f} | {f.kl:.4f} "
            f"| {f.edge or '–'} |"
        )


def confirm(ref, rows, delta: float, threads: int) -> None:
    from cactus_core.engine.loading.embedded_drafts import (
        REFERENCE_EMBEDDED_DRAFT,
        embedded_draft,
    )
    from cactus_core.engine.loading.models import load_pair
    from cactus_core.experiments.sweeps.cache import SweepCache
    from cactus_core.experiments.sweeps.run import run_sweep

    torch.set_num_threads(threads)
    pair = load_pair(device="cpu", **embedded_draft(REFERENCE_EMBEDDED_DRAFT).load_kwargs("cpu"))
    print("\n| top-p | Cactus δ | t_acc | Cactus measured | SGLang measured | measured error "
          "| emitted KL/token: Cactus | SGLang | seconds |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for top_p, value, f in rows:
        if value != delta:
            continue
        part = ref.for_top_p(top_p)
        measured = next(r for r in part.rule_rows(DEFAULT_RULE) if r["value"] == delta)
        setting = Setting.of(SGLANG_RULE, threshold_acc=f.threshold_acc)
        start = time.perf_counter()
        res = run_sweep(pair, confirm_config(ref, part, setting), SweepCache())
        row = next(r for r in res.rows() if r["rule"] == SGLANG_RULE)
        print(
            f"| {top_p:g} | {delta:g} | {f.threshold_acc:g} | {measured['acceptance_rate']:.3f} "
            f"| {row['acceptance_rate']:.3f} "
            f"| {row['acceptance_rate'] - measured['acceptance_rate']:+.3f} "
            f"| {measured['emitted_kl']:.4f} | {row['emitted_kl']:.4f} "
            f"| {time.perf_counter() - start:.0f} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--confirm", type=float, default=None, help="a Cactus δ to measure")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    ref = load_reference()
    rows = fits(ref)
    table(rows)
    if args.confirm is not None:
        confirm(ref, rows, args.confirm, args.threads)


if __name__ == "__main__":
    main()
