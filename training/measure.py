"""Measure the embedded pair: draft cost per token and speculative decoding on the chat prompts.

    python -m training.measure --cost --decode --max-new 128

--cost: forward time per token of each model at batch 1 with a KV cache (after a 64-token
    prefill), the two models interleaved token by token so that load from other processes hits
    both alike; medians and their ratio.
--decode: engine.decoding.decoder.SpeculativeDecoder with lossless `sps`, k = 4, T = 0.7,
    top-p 0.95 over the built-in chat prompts (cactus_core/data/chat_prompts.jsonl).
--expected: teacher-forced expected acceptance sum_x min(p, q) on the verifier's own answers.
--draft-dir: measure a checkpoint folder instead of cactus_core/assets/draft.
A draft with a vocabulary-subset head (config.json "cactus_head_token_ids") is loaded with it,
as the app loads it, so --cost measures the subset head's cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cactus_core.engine.loading import models as cm
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.maths.sampling import logits_to_probs


@torch.inference_mode()
def cost(pair, tokens: int = 48, reps: int = 3) -> dict:
    ids = torch.tensor([pair.encode_prompt(builtin_prompts()[0])])[:, :64]
    times = {"verifier": [], "draft": []}
    for _ in range(reps):
        caches, last = {}, {}
        for name in times:
            model = getattr(pair, name)
            out = model(ids, use_cache=True)
            caches[name], last[name] = out.past_key_values, ids[:, -1:]
        for _ in range(tokens):
            for name in times:
                model = getattr(pair, name)
                t0 = time.perf_counter()
                out = model(last[name], past_key_values=caches[name], use_cache=True)
                times[name].append(time.perf_counter() - t0)
                caches[name] = out.past_key_values
                last[name] = out.logits[:, -1].argmax(-1, keepdim=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    # Per-token ratios of adjacent calls are the least disturbed by load from other processes.
    ratios = [d / v for d, v in zip(times["draft"], times["verifier"], strict=True)]
    return {
        "verifier_ms": med["verifier"] * 1e3,
        "draft_ms": med["draft"] * 1e3,
        "ratio_of_medians": med["draft"] / med["verifier"],
        "median_ratio": statistics.median(ratios),
        "tokens": len(ratios),
    }


def decode(pair, max_new: int, batch: int) -> dict:
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder, summarize

    dec = SpeculativeDecoder(pair, "sps", k=4, temperature=0.7, top_p=0.95, record_trace=False)
    prompts = builtin_prompts()[:20]
    outs = []
    for i in range(0, len(prompts), batch):
        res = dec.generate(prompts[i : i + batch], max_new_tokens=max_new, seed=i)
        outs.extend(res if isinstance(res, list) else [res])
    s = summarize(outs)
    s["per_prompt_acceptance"] = [o.stats.acceptance_rate for o in outs]
    return s


@torch.inference_mode()
def expected(pair, max_new: int) -> dict:
    """Sample the verifier's answers, then score sum_x min(p, q) at every answer position."""
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder

    dec = SpeculativeDecoder(pair, "sps", k=4, temperature=0.7, top_p=0.95, record_trace=False)
    outs = dec.generate_autoregressive(builtin_prompts()[:20], max_new_tokens=max_new, seed=0)
    accs = []
    for o in outs:
        ids = torch.tensor([o.prompt_ids + o.token_ids])
        n = len(o.token_ids)
        q = logits_to_probs(pair.verifier(ids).logits[0, -n - 1 : -1], 0.7, top_p=0.95)
        p = logits_to_probs(pair.draft(ids).logits[0, -n - 1 : -1], 0.7, top_p=0.95)
        accs.append(torch.minimum(p, q).sum(-1))
    a = torch.cat(accs)
    return {"positions": a.numel(), "expected_acceptance": a.mean().item()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cost", action="store_true")
    ap.add_argument("--decode", action="store_true")
    ap.add_argument("--expected", action="store_true")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--draft-dir", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.draft_dir is not None:
        cm.DRAFT_DIR = args.draft_dir
    t0 = time.perf_counter()
    pair = cm.load_pair(device="cpu")
    res: dict = {"draft": pair.draft_name, "load_s": time.perf_counter() - t0}
    res["torch_threads"] = torch.get_num_threads()
    # A VocabSubsetHead (engine.runtime.subset_head) scores only its ids; None: the full vocabulary.
    head_ids = getattr(pair.draft.get_output_embeddings(), "token_ids", None)
    res["draft_head_size"] = None if head_ids is None else int(head_ids.numel())
    if args.cost:
        res["cost"] = cost(pair)
        print(json.dumps(res["cost"]), flush=True)
    if args.expected:
        res["expected"] = expected(pair, args.max_new)
        print(json.dumps(res["expected"]), flush=True)
    if args.decode:
        res["decode"] = decode(pair, args.max_new, args.batch)
        print(json.dumps(res["decode"]), flush=True)
    print(json.dumps(res, indent=1))
    if args.out:
        args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
