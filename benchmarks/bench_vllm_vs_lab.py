"""The lab's decoder and vLLM with the cactus_vllm plugin on the same pair, prompts and
settings: acceptance per draft position and the exact emitted KL, side by side.

The pair is the embedded verifier (SmolLM2-135M-Instruct, float32) with the embedded 3-layer
subset-head draft (float32), both engines at T = 0.7, top-p 1 (vLLM's drafter applies only
the temperature to p, so the lab's p is the same only without truncation), k = 4, the same
token ids (the lab's chat template), each prompt with the same seed under every rule.

- lab: `SpeculativeDecoder` on all prompts as one batch per rule. Its acceptance per position
  is reported twice: measured (accepted ÷ reached) and predicted, the mean of the rule's exact
  a(n) over the drafts that got a decision (the expected rate, without the coin's noise).
- vLLM: `python -m cactus_vllm.run` in the plugin's environment (make test-vllm builds it),
  every rule's requests in one batch (per-request rules through `extra_args`), counted by the
  plugin in vLLM's definitions (its counters equal vLLM's own, checked here too).

Both engines' emitted KL is the mean over emitted tokens of the exact KL(pi ‖ q) (a bonus
token counts 0). Prints a Markdown table per rule and writes everything to --out; vLLM's part
and the lab's are also saved on their own as soon as each is done (--out with .vllm.json,
.lab.json), and --vllm-result / --lab-result read such a file instead of running that part
again. The lab decodes with one torch thread (two
threads on two shared cores spin against each other); vLLM binds its own.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_vllm_vs_lab.py [--prompts 24] [--tokens 64]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "integrations" / "vllm"
sys.path[:0] = [str(REPO), str(PLUGIN)]  # cactus_core, and cactus_vllm.export

from cactus_vllm.export import export_embedded  # noqa: E402

from cactus_core.engine.decoding.decoder import SpeculativeDecoder  # noqa: E402
from cactus_core.engine.decoding.generation import PositionCounts  # noqa: E402
from cactus_core.engine.loading.models import load_pair  # noqa: E402
from cactus_core.engine.loading.prompts import builtin_prompts  # noqa: E402
from cactus_core.maths.rules import make_rule  # noqa: E402

RULES = {
    "sps": {"rule": "sps"},
    "cactus δ=0.1": {"rule": "cactus", "delta": 0.1},
    "cactus δ=1": {"rule": "cactus", "delta": 1.0},
}


def lab_run(pair, spec: dict, prompts: list[str], args) -> dict:
    """The lab's decoder on all prompts (one batch, row i seeded with seed + i)."""
    params = {k: v for k, v in spec.items() if k != "rule"}
    dec = SpeculativeDecoder(
        pair, make_rule(spec["rule"], **params), k=args.k, temperature=args.temperature,
        top_p=1.0, record_trace=True, measure_kl=True, trace_top_n=1, replay_top_m=1,
    )  # fmt: skip
    start = time.perf_counter()
    outs = dec.generate(prompts, max_new_tokens=args.tokens, seed=args.seed)
    wall = time.perf_counter() - start
    counts = PositionCounts.pooled([o.stats.positions for o in outs])
    a_sum, a_n = [0.0] * args.k, [0] * args.k
    for o in outs:
        for rnd in o.trace.rounds:
            for j in range(min(rnd.k, rnd.num_accepted + 1)):  # the drafts that got a decision
                a_sum[j] += rnd.accept_probs[j]
                a_n[j] += 1
    tokens = sum(o.stats.new_tokens for o in outs)
    return {
        "reached": list(counts.reached),
        "accepted": list(counts.accepted),
        "rounds": counts.rounds,
        "conditional": counts.conditional(),
        "unconditional": counts.unconditional(),
        "predicted": [s / n if n else None for s, n in zip(a_sum, a_n, strict=True)],
        "emitted_kl_per_token": sum(o.stats.kl_sum for o in outs) / tokens if tokens else 0.0,
        "new_tokens": tokens,
        "wall_s": wall,
    }


def vllm_run(folders: dict, token_prompts: list[list[int]], args) -> dict:
    """All rules' requests in one vLLM batch, in the plugin's environment."""
    python = Path(args.vllm_python)
    if not python.exists():
        raise SystemExit(f"{python} is missing: `make test-vllm` builds the plugin's environment")
    spec = {
        "verifier": folders["verifier"], "draft": folders["draft"], "method": "draft_model",
        "k": args.k, "temperature": args.temperature, "top_p": 1.0, "max_tokens": args.tokens,
        "seed": args.seed, "prompts": token_prompts,
        "settings": [{"name": name, "rule": rule} for name, rule in RULES.items()],
        "calls": [list(RULES)], "max_num_seqs": len(RULES) * len(token_prompts),
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        spec_file, out_file = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_file.write_text(json.dumps(spec))
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "HF_HUB_OFFLINE": "1",
               "CACTUS_VLLM_RULE": "", "CACTUS_VLLM_LOG_INTERVAL": "0"}  # fmt: skip
        subprocess.run(
            [str(python), "-m", "cactus_vllm.run", str(spec_file), str(out_file)],
            env=env, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        return vllm_summary(json.loads(out_file.read_text()))


def vllm_summary(result: dict) -> dict:
    """`cactus_vllm.run`'s output -> the plugin's metrics by rule name, after checking that
    its counts are vLLM's own."""
    call = result["calls"][0]
    ours = call["metrics"]
    per_pos = call["vllm"]["num_accepted_tokens_per_pos"]
    summed = [sum(m["accepted"][j] for m in ours.values() if j < len(m["accepted"]))
              for j in range(len(per_pos))]  # fmt: skip
    assert summed == per_pos, f"plugin counts {summed} != vLLM's {per_pos}"
    label = {make_rule(r["rule"], **{k: v for k, v in r.items() if k != "rule"}).label: name
             for name, r in RULES.items()}  # fmt: skip
    return {
        "by_rule": {label[lbl]: m for lbl, m in ours.items()},
        "wall_s": call["wall_s"],
        "startup_s": result["startup_s"],
        "status": result["status"],
    }


def gap(lab: float | None, lab_n: int, vllm: float | None, vllm_n: int) -> str:
    """vLLM's rate over the lab's prediction, with the 95% half-width of the difference."""
    if lab is None or vllm is None or not lab:
        return "–"
    half = 1.96 * math.sqrt(vllm * (1 - vllm) / max(vllm_n, 1) + lab * (1 - lab) / max(lab_n, 1))
    return f"{100 * (vllm - lab) / lab:+.1f}% (±{100 * half / lab:.1f}%)"


def table(name: str, lab: dict, vllm: dict) -> str:
    lines = [
        f"**{name}**: emitted KL {lab['emitted_kl_per_token']:.4f} (lab) vs "
        f"{vllm['emitted_kl_per_token']:.4f} (vLLM) nats/token; rounds {lab['rounds']} vs "
        f"{vllm['rounds']}",
        "",
        "| position | lab predicted | lab measured | vLLM measured | vLLM vs lab predicted "
        "| unconditional lab / vLLM |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for j in range(len(lab["predicted"])):
        pred, meas = lab["predicted"][j], lab["conditional"][j]
        v_cond = vllm["conditional"][j] if j < len(vllm["conditional"]) else None
        v_n = vllm["reached"][j] if j < len(vllm["reached"]) else 0
        v_unc = vllm["unconditional"][j] if j < len(vllm["unconditional"]) else None
        fmt = lambda x: "–" if x is None else f"{x:.3f}"  # noqa: E731
        lines.append(
            f"| {j + 1} | {fmt(pred)} | {fmt(meas)} ({lab['reached'][j]}) | {fmt(v_cond)} ({v_n}) "
            f"| {gap(pred, lab['reached'][j], v_cond, v_n)} "
            f"| {fmt(lab['unconditional'][j])} / {fmt(v_unc)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vllm-python", default=str(PLUGIN / ".venv" / "bin" / "python"))
    parser.add_argument("--out", default="bench_vllm_vs_lab.json")
    parser.add_argument("--vllm-result", default=None, help="a saved .vllm.json to reuse")
    parser.add_argument("--lab-result", default=None, help="a saved .lab.json to reuse")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the lab")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    folders = export_embedded()
    pair = load_pair(dtype="float32")  # the embedded verifier and its 3-layer draft
    prompts = builtin_prompts()[: args.prompts]
    token_prompts = [pair.encode_prompt(p) for p in prompts]
    out = Path(args.out)
    if args.vllm_result:
        vllm = json.loads(Path(args.vllm_result).read_text())
    else:
        print(f"vLLM: {len(RULES)} rules x {len(prompts)} prompts x {args.tokens} tokens ...")
        vllm = vllm_run(folders, token_prompts, args)
        out.with_suffix(".vllm.json").write_text(json.dumps(vllm, indent=1))
        print(f"  {vllm['wall_s']:.0f} s (startup {vllm['startup_s']:.0f} s)")
    if args.lab_result:
        lab = json.loads(Path(args.lab_result).read_text())
    else:
        lab = {}
        for name, spec in RULES.items():
            print(f"lab: {name} ...")
            lab[name] = lab_run(pair, spec, prompts, args)
            print(f"  {lab[name]['wall_s']:.0f} s")
        out.with_suffix(".lab.json").write_text(json.dumps(lab, indent=1))
    for name in RULES:
        print("\n" + table(name, lab[name], vllm["by_rule"][name]))
    settings = {k: getattr(args, k) for k in ("prompts", "tokens", "k", "temperature", "seed")}
    out.write_text(json.dumps({"settings": settings, "lab": lab, "vllm": vllm}, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
