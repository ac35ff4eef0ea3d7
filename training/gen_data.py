"""Distillation data: the verifier's own chat answers plus its top-K logits at every answer step.

The verifier samples at the app's settings (T = 0.7, top-p 0.95) so the draft learns on the
text it will later be asked to predict. Sampling is done inside a logits processor, which also
records the raw (T = 1) top-K logits of that step: one forward pass yields both the answer and
the soft targets, with no second scoring pass. Each batch is written as its own shard so a
partial run is still usable and a killed run resumes where it stopped.

    python -m training.gen_data --out /work/data/distill --batch 16 --max-new 160
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import LogitsProcessor, LogitsProcessorList

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.common import load_verifier_and_tokenizer
from training.prompts import generate_prompts


class RecordAndSample(LogitsProcessor):
    """Records top-K raw logits, samples at (T, top-p), and returns a one-hot score row."""

    def __init__(self, top_k: int, temperature: float, top_p: float, generator: torch.Generator):
        self.top_k, self.temperature, self.top_p, self.generator = (
            top_k,
            temperature,
            top_p,
            generator,
        )
        self.values: list[torch.Tensor] = []  # each [B, K] float16
        self.indices: list[torch.Tensor] = []  # each [B, K] int32
        self.chosen: list[torch.Tensor] = []  # each [B]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.float()  # [B, V] raw logits of this step
        vals, idx = scores.topk(self.top_k, dim=-1)
        self.values.append(vals.half())
        self.indices.append(idx.int())
        # Nucleus from the top-K only: a full-vocabulary sort costs ~0.3 s a step on this CPU,
        # and at T = 0.7 the 0.95 nucleus lies inside the top 64 almost always (when it does
        # not, the tail beyond the top K is dropped).
        logz = torch.logsumexp(scores / self.temperature, dim=-1, keepdim=True)
        sp = torch.exp(vals / self.temperature - logz)  # [B, K] true probabilities, sorted
        keep = sp.cumsum(-1) - sp < self.top_p
        pick = torch.multinomial(sp * keep, 1, generator=self.generator)  # [B, 1]
        token = idx.gather(-1, pick).squeeze(-1)
        self.chosen.append(token)
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(-1, token[:, None], 0.0)
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/work/data/distill"))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--top-k", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N prompts (0: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    # Several single-thread workers share the prompt list by batch index: on a loaded machine
    # that wastes less time than one multi-thread process whose threads wait on each other.
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--reverse", action="store_true", help="take batches from the end")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    model, tok = load_verifier_and_tokenizer()
    tok.padding_side = "left"
    prompts = generate_prompts()
    if args.limit:
        prompts = prompts[: args.limit]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    t0, n_tokens = time.time(), 0
    starts = list(range(0, len(prompts), args.batch))
    for start in reversed(starts) if args.reverse else starts:
        shard = args.out / f"shard_{start // args.batch:04d}.pt"
        if (start // args.batch) % args.workers != args.worker or shard.exists():
            continue
        batch = prompts[start : start + args.batch]
        texts = [
            tok.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in batch
        ]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        gen = torch.Generator().manual_seed(args.seed + start)
        rec = RecordAndSample(args.top_k, args.temperature, args.top_p, gen)
        with torch.inference_mode():
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
        chosen = torch.stack(rec.chosen, 1)  # [B, T]
        vals = torch.stack(rec.values, 1)  # [B, T, K]
        idx = torch.stack(rec.indices, 1)  # [B, T, K]
        records = []
        for b, prompt in enumerate(batch):
            prompt_ids = enc["input_ids"][b][enc["attention_mask"][b].bool()].tolist()
            ans = chosen[b].tolist()
            # Keep the answer through its first end-of-turn token; positions after it are padding.
            n = ans.index(eos) + 1 if eos in ans else len(ans)
            records.append(
                {
                    "prompt": prompt,
                    "prompt_ids": prompt_ids,
                    "answer_ids": ans[:n],
                    "top_values": vals[b, :n].clone(),
                    "top_indices": idx[b, :n].clone(),
                }
            )
            n_tokens += n
        tmp = shard.with_suffix(".tmp")
        torch.save(records, tmp)
        tmp.rename(shard)
        el = time.time() - t0
        print(
            f"{start + len(batch)}/{len(prompts)} prompts, {n_tokens} tokens, "
            f"{el:.0f}s, {n_tokens / el:.1f} tok/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
