"""Mixture or Cactus? DIVERSED's static mixture (the lab's `interp`) against Cactus at matched
acceptance, in KL and in total variation, decoded on the reference prompts of the embedded pair.

    PYTHONPATH=. .venv/bin/python benchmarks/mixture_vs_cactus.py [--top-p 1.0 0.95]
        [--threads 1] [--n-prompts N]

Runs the reference sweep's pair and configuration (the bfloat16 feature draft, T 0.7, k 4, 64
tokens, seed 0, the built-in prompts)
for the two rules at their reference grids, with the sweep cache (a rerun reads it back), and
prints one Markdown table per top-p: every mixture setting's acceptance, emitted KL(pi ‖ q) and
TV(pi, q) per token, beside Cactus's KL and TV at the same acceptance (linear between Cactus's
two nearest settings), and which is the smaller.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np
import torch

from cactus_core.engine.loading.embedded_drafts import REFERENCE_EMBEDDED_DRAFT, embedded_draft
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.reference import reference_configs
from cactus_core.experiments.sweeps.run import SweepResult, run_sweep

RULES = ("cactus", "interp")


def at_acceptance(result: SweepResult, rule: str, acceptance: float) -> tuple[float, float]:
    """rule's (KL, TV) per token at this acceptance, linear between its settings (NaN outside
    its range)."""
    rows = sorted(
        (r["acceptance_rate"], r["emitted_kl"], r["emitted_tv"])
        for r in result.rows()
        if r["rule"] == rule
    )
    acc = np.array([a for a, _, _ in rows])
    if not acc[0] <= acceptance <= acc[-1]:
        return math.nan, math.nan
    kl = float(np.interp(acceptance, acc, [k for _, k, _ in rows]))
    tv = float(np.interp(acceptance, acc, [t for _, _, t in rows]))
    return kl, tv


def table(result: SweepResult) -> str:
    lines = [
        "| mixture | acceptance | KL mixture | KL Cactus | TV mixture | TV Cactus |",
        "|---|---|---|---|---|---|",
    ]
    for r in result.rows():
        if r["rule"] != "interp":
            continue
        kl, tv = at_acceptance(result, "cactus", r["acceptance_rate"])

        def pick(mine: float, theirs: float) -> tuple[str, str]:
            a, b = f"{mine:.4f}", f"{theirs:.4f}" if math.isfinite(theirs) else "–"
            if math.isfinite(theirs) and abs(mine - theirs) > 1e-4:
                a, b = (f"**{a}**", b) if mine < theirs else (a, f"**{b}**")
            return a, b

        kl_m, kl_c = pick(r["emitted_kl"], kl)
        tv_m, tv_c = pick(r["emitted_tv"], tv)
        lines.append(
            f"| {r['label']} | {r['acceptance_rate']:.3f} | {kl_m} | {kl_c} | {tv_m} | {tv_c} |"
        )
    cactus = [r for r in result.rows() if r["rule"] == "cactus"]
    lines.append("")
    lines.append(
        "Cactus's settings: "
        + "; ".join(
            f"{r['label']}: acceptance {r['acceptance_rate']:.3f}, KL {r['emitted_kl']:.4f}, "
            f"TV {r['emitted_tv']:.4f}"
            for r in cactus
        )
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top-p", type=float, nargs="+", default=[1.0, 0.95])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-prompts", type=int, default=None, help="default: every built-in one")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = tuple(builtin_prompts()[: args.n_prompts])
    # the pair the reference sweep measures (the bfloat16 feature draft), on this CPU
    pair = load_pair(**embedded_draft(REFERENCE_EMBEDDED_DRAFT).load_kwargs("auto"))
    cache = SweepCache()  # the CLI's cache: a rerun reads the chunks back
    for config in reference_configs(prompts):
        if config.sampling.top_p not in args.top_p:
            continue
        settings = tuple(s for s in config.settings if s.rule in RULES)
        config = replace(config, settings=settings, limit=False, own_estimate=False)
        result = run_sweep(pair, config, cache)
        print(f"\n### top-p {config.sampling.top_p:g} ({len(prompts)} prompts)\n")
        print(table(result))


if __name__ == "__main__":
    main()
