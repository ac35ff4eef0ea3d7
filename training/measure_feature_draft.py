"""Measure a feature draft (cactus_core/engine/loading/feature_draft.py): cost per token, held-out
acceptance, and the effect of cutting its head to fewer ids; optionally export the result.

    python -m training.measure_feature_draft --draft cactus_core/assets/feature_draft --cost \\
        --accept --data /work/data/fd/r1 /work/data/fd/r2 --threads 1

--cost: one-thread median time of one draft step (one token, with its KV cache after a
    200-position prefill, logits over the full vocabulary included) in float32 and bfloat16,
    against one verifier step (one token, ~200-token KV cache, LM head included) in bfloat16
    (and float32 for reference). The models run interleaved token by token, so load from other
    processes hits them alike; c = median draft step / median verifier step.
--accept: expected acceptance sum min(p, q) at draft steps 1..k on the held-out shards
    (--eval-shards, never trained on), steps >= 2 on the draft's own features, at top-p 1.0
    and 0.95, T = 0.7, and the implied tokens per verifier call and acceptance rate at k.
--eval-data DIR: measure on the held-out shards of DIR instead, e.g. the verifier's answers to
    the benchmark prompts (`training.gen_features --benchmark-prompts 20`, all of its shards
    named in --eval-shards), which says what the decoder's bench will see: the held-out
    training shards share their prompt templates with the training data.
--cactus-delta D: with --accept, also Cactus's expected acceptance per draft step at delta D,
    sum min(p, h) with h the paper's closed form applied to q (top-p 1.0, q's saved top 64).
--head-sizes: also evaluate (and cost) the draft with its head cut to the top N ids of the
    ranking the training used (training.subset on the training shards); --export-head N
    --export DIR writes the draft with that head.
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

from cactus_core.engine.loading.feature_draft import DraftKVCache, FeatureDraft
from training.common import load_verifier_and_tokenizer
from training.subset import choose, scores, special_ids
from training.train_feature_draft import evaluate, load_split, summary


def with_head(draft: FeatureDraft, verifier, head_ids: torch.Tensor | None) -> FeatureDraft:
    """The same trained weights over another head (ids sorted ascending, or None: full)."""
    new = FeatureDraft(
        draft.config,
        verifier.get_input_embeddings(),
        verifier.model.norm.weight,
        verifier.get_output_embeddings().weight,
        head_ids,
        draft.embed_scale,
        draft.feature_scale,
        draft.feature_layers,
        draft.layer_scales,
    )
    new.load_state_dict(draft.state_dict())
    return new.to(draft.dtype).eval()


@torch.inference_mode()
def cost(verifier_f32, drafts: dict[str, FeatureDraft], prefix: int = 200, tokens: int = 64):
    """Median seconds per one-token step of each model, interleaved; and the ratios c."""
    verifier_bf16 = _bf16_copy(verifier_f32)
    ids = torch.randint(100, 40000, (1, prefix), generator=torch.Generator().manual_seed(0))
    models = {"verifier_bf16": verifier_bf16, "verifier_f32": verifier_f32}
    times: dict[str, list[float]] = {name: [] for name in [*models, *drafts]}
    caches, last = {}, {}
    for name, model in models.items():
        out = model(ids, use_cache=True)
        caches[name], last[name] = out.cache, out.logits[:, -1:].argmax(-1)
    d = verifier_f32.config.hidden_size
    feats = torch.randn(1, prefix, d) * 30  # the draft's cost does not depend on the values
    for name, draft in drafts.items():
        caches[name] = DraftKVCache()
        draft(feats, ids, caches[name], start_pos=0)
        last[name] = (feats[:, -1:], ids[:, -1:])
    for _ in range(tokens):
        for name in times:
            if name in models:
                t0 = time.perf_counter()
                out = models[name](last[name], cache=caches[name], use_cache=True)
                times[name].append(time.perf_counter() - t0)
                last[name] = out.logits[:, -1:].argmax(-1)
            else:
                f, tok = last[name]
                cache = caches[name]
                t0 = time.perf_counter()
                logits, f = drafts[name](f, tok, cache, start_pos=cache.length)
                times[name].append(time.perf_counter() - t0)
                last[name] = (f, logits[:, -1:].argmax(-1))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    res = {"ms": med, "prefix": prefix, "tokens": tokens}
    for name in drafts:
        res[f"c_{name}_vs_verifier_bf16"] = med[name] / med["verifier_bf16"]
        res[f"c_{name}_vs_verifier_f32"] = med[name] / med["verifier_f32"]
    return res


def _bf16_copy(model):
    import copy

    return copy.deepcopy(model).to(torch.bfloat16).eval()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", type=Path, required=True)
    ap.add_argument("--cost", action="store_true")
    ap.add_argument("--accept", action="store_true")
    ap.add_argument("--data", type=Path, nargs="+", default=[Path("/work/data/fd/r1")])
    ap.add_argument(
        "--eval-shards", default="3,29", help="held-out shard indices (of --eval-data if given)"
    )
    ap.add_argument(
        "--eval-data",
        type=Path,
        nargs="+",
        default=None,
        help="measure only these folders' held-out answers (default: all of --data)",
    )
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--cactus-delta", type=float, default=None, help="with --accept (see above)")
    ap.add_argument("--head-sizes", default="", help="also try the head cut to these sizes")
    ap.add_argument("--export-head", type=int, default=0)
    ap.add_argument("--export", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    verifier, tok = load_verifier_and_tokenizer()
    verifier.requires_grad_(False)
    draft = FeatureDraft.load(args.draft, verifier, dtype=torch.float32)
    vocab = verifier.get_input_embeddings().weight.shape[0]
    variants = {"as_saved": draft}
    sizes = [int(x) for x in args.head_sizes.split(",") if x]
    if args.export_head and args.export_head not in sizes:
        sizes.append(args.export_head)
    train, held = [], []
    if args.accept or sizes:
        eval_shards = {int(x) for x in args.eval_shards.split(",") if x}
        if sizes or args.eval_data is None:  # the head ranking needs the training shards
            train, held = load_split(args.data, eval_shards)
        if args.eval_data is not None:
            _, held = load_split(args.eval_data, eval_shards)
        print(f"held-out: {len(held)} answers, {sum(len(r['answer_ids']) for r in held)} tokens")
    if sizes:
        score = scores(train, vocab)
        for size in sizes:
            ids = None if size >= vocab else choose(score, size, special_ids(tok))
            if ids is not None and draft.head_ids is not None:
                inside = torch.isin(ids, draft.head_ids).float().mean().item()
                print(f"head {size}: {inside:.4f} of its ids are in the trained head")
            variants[f"head{size}"] = with_head(draft, verifier, ids)
    res: dict = {"draft": str(args.draft), "threads": torch.get_num_threads()}
    if args.accept:
        res["accept"] = {}
        for name, d in variants.items():
            lookup = torch.arange(vocab)
            if d.head_ids is not None:
                lookup = torch.full((vocab,), -1, dtype=torch.long)
                lookup[d.head_ids] = torch.arange(d.head_ids.numel())
            t0 = time.time()
            ev = evaluate(d, held, args.depth, lookup, 0.7, cactus_delta=args.cactus_delta)
            res["accept"][name] = ev
            print(f"{name} ({time.time() - t0:.0f}s): {summary(ev)}", flush=True)
            if "cactus" in ev:
                steps = " ".join(f"{a:.3f}" for a in ev["cactus"]["per_step"])
                print(f"  cactus delta {args.cactus_delta:g}: steps {steps}", flush=True)
    if args.cost:
        drafts = {}
        for name, d in variants.items():
            drafts[f"{name}_f32"] = d
            drafts[f"{name}_bf16"] = with_head(d, verifier, d.head_ids).to(torch.bfloat16)
        res["cost"] = cost(verifier, drafts)
        print(json.dumps(res["cost"], indent=1), flush=True)
    if args.export is not None:
        d = variants[f"head{args.export_head}"] if args.export_head else draft
        meta = json.loads((args.draft / "config.json").read_text())
        keep = {k: v for k, v in meta.items() if k not in ("llama", "format", "format_version")}
        keep.update({"exported_from": str(args.draft), "measured": res})
        d.save(args.export, info=keep)
        print(f"exported to {args.export}")
    print(json.dumps(res, indent=1))
    if args.out:
        args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
