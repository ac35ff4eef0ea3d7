"""Run vLLM offline with the plugin on token-id prompts and report outputs and metrics as JSON:
what the tests and benchmarks/bench_vllm_vs_lab.py drive, from the vLLM environment.

    python -m cactus_vllm.run SPEC.json OUT.json

SPEC holds: verifier (folder), method ("ngram" or "draft_model"), draft (folder, for
draft_model), k, temperature, top_p, max_tokens, seed, prompts (lists of token ids) or texts
(user turns, put in the verifier's chat template here, as the lab's `encode_prompt` does),
settings ({"name": ..., "rule": {...} or null}: a request's own rule through
`SamplingParams.extra_args`; null: no own rule), calls (lists of setting names: each call
generates every prompt under each listed setting in one batch, after re-seeding torch, so two
calls with the same shapes draw the same drafts), and optionally deployment_rule (set in the
speculative config). The engine and its worker run in this process, so the plugin's metrics
and torch's seed are this process's.

Each request gets seed = SPEC seed + its prompt's index, so settings differ only by rule.
OUT holds the plugin's status, per call the output token ids by setting, the plugin's
metrics and vLLM's own spec-decode counters (their change over the call), and timings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def engine(spec: dict[str, Any]):
    from vllm import LLM

    speculative: dict[str, Any] = {"method": spec["method"], "num_speculative_tokens": spec["k"]}
    if spec["method"] == "ngram":
        speculative.update(prompt_lookup_max=spec.get("ngram_max", 4), prompt_lookup_min=1)
    else:
        speculative.update(model=spec["draft"], draft_sample_method="probabilistic")
    if spec.get("deployment_rule"):
        speculative["cactus_rule"] = spec["deployment_rule"]
    return LLM(
        model=spec["verifier"],
        dtype=spec.get("dtype", "float32"),
        enforce_eager=True,
        max_model_len=spec.get("max_model_len", 512),
        max_num_seqs=spec.get("max_num_seqs", 16),
        seed=spec["seed"],
        disable_log_stats=False,
        speculative_config=speculative,
        distributed_executor_backend="uni",
    )


def vllm_counters(llm) -> dict[str, Any]:
    """vLLM's own spec-decode counters (cumulative)."""
    out: dict[str, Any] = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode_"):
            key = m.name.removeprefix("vllm:spec_decode_")
            out[key] = list(m.values) if hasattr(m, "values") else m.value
    return out


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in after.items():
        old = before.get(key, 0 if not isinstance(value, list) else [0] * len(value))
        if isinstance(value, list):
            old = old + [0] * (len(value) - len(old))
            out[key] = [a - b for a, b in zip(value, old, strict=True)]
        else:
            out[key] = value - old
    return out


def token_prompts(llm, spec: dict[str, Any]) -> list[list[int]]:
    if "prompts" in spec:
        return spec["prompts"]
    tok = llm.get_tokenizer()
    out = []
    for text in spec["texts"]:
        chat = [{"role": "user", "content": text}]
        templated = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        out.append(list(tok(templated, add_special_tokens=False)["input_ids"]))
    return out


def generate_call(llm, spec: dict[str, Any], names: list[str]) -> dict[str, Any]:
    import torch
    from vllm import SamplingParams

    from cactus_vllm import metrics

    settings = {s["name"]: s for s in spec["settings"]}
    prompts, params, keys = [], [], []
    for name in names:
        rule = settings[name].get("rule")
        for i, ids in enumerate(spec["token_prompts"]):
            prompts.append({"prompt_token_ids": ids})
            params.append(
                SamplingParams(
                    temperature=spec["temperature"],
                    top_p=spec.get("top_p", 1.0),
                    max_tokens=spec["max_tokens"],
                    seed=spec["seed"] + i,
                    extra_args=None if rule is None else {"cactus_rule": rule},
                )
            )
            keys.append(name)
    metrics.reset()
    before = vllm_counters(llm)
    torch.manual_seed(spec["seed"])
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - start
    by_setting: dict[str, list[list[int]]] = {name: [] for name in names}
    for key, out in zip(keys, outputs, strict=True):
        by_setting[key].append(list(out.outputs[0].token_ids))
    return {
        "settings": names,
        "outputs": by_setting,
        "metrics": metrics.snapshot()["rules"],
        "vllm": delta(vllm_counters(llm), before),
        "wall_s": wall,
    }


def run(spec: dict[str, Any]) -> dict[str, Any]:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    start = time.perf_counter()
    llm = engine(spec)
    startup = time.perf_counter() - start
    from cactus_vllm import plugin

    spec = {**spec, "token_prompts": token_prompts(llm, spec)}

    calls = [generate_call(llm, spec, names) for names in spec["calls"]]
    return {"status": plugin.status(), "startup_s": startup, "calls": calls}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m cactus_vllm.run SPEC.json OUT.json", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        spec = json.load(f)
    result = run(spec)
    with open(args[1], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
