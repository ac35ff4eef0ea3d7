"""Data for the feature-conditioned (EAGLE-style) draft: answers, verifier features, top-K logits.

Each record holds the verifier's own chat answer to a training prompt (`training/prompts.py`,
disjoint from the benchmark prompts), the verifier's top-layer feature at every position of
prompt + answer (the last decoder layer's output BEFORE the final norm, float16) and its raw
top-K logits at every answer step (the distribution of the next answer token).

Two ways to fill a shard, same record format:
- generate (default): the verifier samples the answers at T = 0.7 with the given top-p, and a
  forward hook on its last decoder layer records the features on the way, so no second pass is
  needed (prefill gives the prompt's features, each decoding step the feature of the token it
  fed in). The top-K logits are recorded by training.gen_data's logits processor.
- --convert DIR: shards written by training.gen_data (answers + top-K, no features) get one
  verifier forward pass over each full prompt + answer sequence.
- --benchmark-prompts N: the verifier's answers to the first N built-in benchmark prompts
  (cactus_core/data/chat_prompts.jsonl) instead of the training prompts. For measurement
  only (`training.measure_feature_draft --eval-data`): never train on them.
- --add-layers 2,15: the outputs of those verifier decoder layers (0-based) as well, as
  `layer_features`, for a multi-depth (EAGLE-3 style) draft: recorded by hooks in the same
  forwards while generating, or, with --convert DIR, added to DIR's shards written here by a
  forward that stops after the deepest of them (two early layers cost half a full pass).
Shards are written one batch at a time (resumable; several workers can share the prompt list,
as in gen_data), named by batch index, so a shard index means the same prompts in every folder.

    python -m training.gen_features --out /work/data/fd/tp095 --top-p 0.95 --max-new 192 \\
        --threads 1 --worker 0 --workers 2
    python -m training.gen_features --convert /work/data/fd_gen/tp095 --out /work/data/fd/tp095
    python -m training.gen_features --benchmark-prompts 20 --batch 4 --max-new 128 --top-p 1.0 \\
        --out /work/data/fd_bench
    python -m training.gen_features --add-layers 2,15 --convert /work/data/fd/r1 \\
        --out /work/data/fd3/r1 --worker 0 --workers 2

Record: prompt (str), prompt_ids (list, n_p), answer_ids (list, n_a), top_p (float),
features [n_p + n_a - 1, D] float16 (position j: after reading token j; the last answer token
is never fed to the verifier, and no draft target needs its feature), top_values [n_a, K]
float16 and top_indices [n_a, K] int32 (row a: logits at position n_p - 1 + a, i.e. the
distribution answer token a was drawn from). With --add-layers: feature_layers (list of
layer indices) and layer_features [n_p + n_a - 1, len(feature_layers) * D] float16, the layers'
outputs side by side at the same positions as `features`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import LogitsProcessorList

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cactus_core.engine.loading.prompts import builtin_prompts
from training.common import load_verifier_and_tokenizer
from training.gen_data import RecordAndSample
from training.prompts import generate_prompts
from training.wide_prompts import wide_prompts


class FeatureHook:
    """Collects one decoder layer's output ([B, T_step, D] per call) during generate."""

    def __init__(self, layer: torch.nn.Module) -> None:
        self.chunks: list[torch.Tensor] = []
        self.handle = layer.register_forward_hook(self._hook)

    def _hook(self, _module, _inputs, output) -> None:
        out = output[0] if isinstance(output, tuple) else output
        self.chunks.append(out.detach().half())

    def close(self) -> None:
        self.handle.remove()


@torch.inference_mode()
def generate_shard(model, tok, batch: list[str], args, seed: int) -> list[dict]:
    texts = [
        tok.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        for p in batch
    ]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    gen = torch.Generator().manual_seed(seed)
    rec = RecordAndSample(args.top_k, args.temperature, args.top_p, gen)
    hook = FeatureHook(model.model.layers[-1])
    # Earlier layers for a multi-depth draft, captured in the same forwards (no second pass).
    layer_hooks = [FeatureHook(model.model.layers[i]) for i in args.layers]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    try:
        model.generate(
            **enc,
            do_sample=False,
            max_new_tokens=args.max_new,
            logits_processor=LogitsProcessorList([rec]),
            eos_token_id=eos,
            pad_token_id=tok.pad_token_id,
            temperature=None,
            top_p=None,
            top_k=None,
        )
    finally:
        hook.close()
        for h in layer_hooks:
            h.close()
    # chunks[0]: prefill [B, P, D] (left-padded); chunks[s]: [B, 1, D], the feature of answer
    # token s - 1 (fed back at step s).
    feats = torch.cat(hook.chunks, dim=1)  # [B, P + steps - 1, D]
    # [B, P + steps - 1, len(layers) * D], the layers side by side
    layer_feats = (
        torch.cat([torch.cat(h.chunks, dim=1) for h in layer_hooks], dim=-1)
        if layer_hooks
        else None
    )
    chosen = torch.stack(rec.chosen, 1)  # [B, steps]
    vals = torch.stack(rec.values, 1)  # [B, steps, K]
    idx = torch.stack(rec.indices, 1)  # [B, steps, K]
    pad = enc["input_ids"].shape[1]
    records = []
    for b, prompt in enumerate(batch):
        keep = enc["attention_mask"][b].bool()
        prompt_ids = enc["input_ids"][b][keep].tolist()
        ans = chosen[b].tolist()
        n = ans.index(eos) + 1 if eos in ans else len(ans)
        prompt_feats = feats[b, :pad][keep]  # [n_p, D]
        ans_feats = feats[b, pad : pad + n - 1]  # [n - 1, D]
        record = {
            "prompt": prompt,
            "prompt_ids": prompt_ids,
            "answer_ids": ans[:n],
            "top_p": args.top_p,
            "features": torch.cat([prompt_feats, ans_feats]).clone(),
            "top_values": vals[b, :n].clone(),
            "top_indices": idx[b, :n].clone(),
        }
        if layer_feats is not None:
            record["feature_layers"] = list(args.layers)
            record["layer_features"] = torch.cat(
                [layer_feats[b, :pad][keep], layer_feats[b, pad : pad + n - 1]]
            ).clone()
        records.append(record)
    return records


@torch.inference_mode()
def feature_pass(
    model, record: dict, top_k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward over prompt + answer: (features [L - 1, D] f16, top values, top indices)."""
    ids = torch.tensor([record["prompt_ids"] + record["answer_ids"]])  # [1, L]
    hook = FeatureHook(model.model.layers[-1])
    try:
        hidden = model.model(input_ids=ids[:, :-1]).last_hidden_state  # [1, L - 1, D] normed
    finally:
        hook.close()
    n_p = len(record["prompt_ids"])
    logits = model.lm_head(hidden[0, n_p - 1 :])  # [n_a, V]
    vals, idx = logits.float().topk(top_k, dim=-1)
    return hook.chunks[0][0], vals.half(), idx.int()


class _StopForward(Exception):
    """Raised by the hook on the deepest requested layer: later layers are not needed."""


@torch.inference_mode()
def layer_pass(model, record: dict, layers: list[int]) -> torch.Tensor:
    """The outputs of decoder `layers` over prompt + answer but its last token:
    [L - 1, len(layers) * D] float16, the layers side by side in the order given."""
    ids = torch.tensor([record["prompt_ids"] + record["answer_ids"]])[:, :-1]  # [1, L - 1]
    outputs: dict[int, torch.Tensor] = {}
    deepest = max(layers)

    def hook_for(i: int):
        def hook(_module, _inputs, output) -> None:
            outputs[i] = (output[0] if isinstance(output, tuple) else output)[0].half()
            if i == deepest:
                raise _StopForward

        return hook

    handles = [model.model.layers[i].register_forward_hook(hook_for(i)) for i in set(layers)]
    try:
        model.model(input_ids=ids)
    except _StopForward:
        pass
    finally:
        for h in handles:
            h.remove()
    return torch.cat([outputs[i] for i in layers], dim=-1)


def add_layers(model, src_dir: Path, out: Path, layers: list[int], worker: int, workers: int):
    """Copy src_dir's shards to `out` with `layer_features` added (module docstring)."""
    t0, n_tokens = time.time(), 0
    for src in sorted(src_dir.glob("shard_*.pt")):
        dst = out / src.name
        if int(src.stem.split("_")[1]) % workers != worker or dst.exists():
            continue
        records = torch.load(src)
        for r in records:
            r["feature_layers"] = list(layers)
            r["layer_features"] = layer_pass(model, r, layers)
            if r["layer_features"].shape[0] != r["features"].shape[0]:
                raise ValueError(f"{src}: layer features do not line up with the features")
            n_tokens += r["layer_features"].shape[0]
        _save(records, dst)
        el = time.time() - t0
        print(f"{src.name}: {n_tokens} positions, {el:.0f}s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--convert", type=Path, default=None, help="gen_data shards to add features to")
    ap.add_argument(
        "--add-layers",
        default="",
        help="these decoder layers' outputs too (comma-separated, 0-based): recorded while"
        " generating, or added to the shards named by --convert",
    )
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-new", type=int, default=192)
    ap.add_argument("--top-k", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument(
        "--prompt-seed",
        type=int,
        default=0,
        help="training.prompts seed: other template picks, sums and order (0: the shipped rounds)",
    )
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument(
        "--extra-prompts", action="store_true", help="add training.prompts' EXTRA_FAMILIES"
    )
    ap.add_argument(
        "--wide-prompts",
        action="store_true",
        help="training.wide_prompts' list (seeded by --prompt-seed) instead of training.prompts'",
    )
    ap.add_argument(
        "--benchmark-prompts",
        type=int,
        default=0,
        help="answer the first N benchmark prompts instead (to measure on; never train on them)",
    )
    ap.add_argument("--skip", type=Path, nargs="*", default=[], help="skip shards present here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    model, tok = load_verifier_and_tokenizer()
    tok.padding_side = "left"
    t0, n_tokens = time.time(), 0

    args.layers = [int(x) for x in args.add_layers.split(",")] if args.add_layers else []
    if args.layers and args.convert is not None:
        add_layers(model, args.convert, args.out, args.layers, args.worker, args.workers)
        return
    if args.convert is not None:
        for src in sorted(args.convert.glob("shard_*.pt")):
            dst = args.out / src.name
            if dst.exists():
                continue
            records = torch.load(src)
            for r in records:
                r["features"], r["top_values"], r["top_indices"] = feature_pass(
                    model, r, args.top_k
                )
                r["top_p"] = args.top_p
                n_tokens += len(r["answer_ids"])
            _save(records, dst)
            el = time.time() - t0
            print(f"{src.name}: {n_tokens} tokens, {el:.0f}s", flush=True)
        return

    prompts = generate_prompts(args.prompt_seed, extra=args.extra_prompts)
    if args.wide_prompts:
        prompts = wide_prompts(args.prompt_seed)
    if args.benchmark_prompts:
        prompts = builtin_prompts()[: args.benchmark_prompts]
    for start in range(0, len(prompts), args.batch):
        name = f"shard_{start // args.batch:04d}.pt"
        shard = args.out / name
        if (start // args.batch) % args.workers != args.worker or shard.exists():
            continue
        if any((d / name).exists() for d in args.skip):
            continue
        records = generate_shard(
            model, tok, prompts[start : start + args.batch], args, args.seed + start
        )
        n_tokens += sum(len(r["answer_ids"]) for r in records)
        _save(records, shard)
        el = time.time() - t0
        print(f"{name}: {n_tokens} tokens, {el:.0f}s, {n_tokens / el:.1f} tok/s", flush=True)


def _save(records: list[dict], shard: Path) -> None:
    tmp = shard.with_suffix(".tmp")
    torch.save(records, tmp)
    tmp.rename(shard)


if __name__ == "__main__":
    main()
