"""Labels for the learned judge (AutoJudge, Garipov et al., arXiv 2504.20039): which of the
draft's mismatches change the answer.

For each task prompt (`training.judge_tasks`: checkable answers, none of the built-in task
set's), the verifier's greedy answer is decoded with the embedded pair at T = 0, so every
rejected draft is a mismatch with the verifier's own token (the rounds' rejections, exactly
the mismatches decoding meets; a round's drafts after its rejection are never judged and not
mined). For each mismatch at answer position t with drafted token n, the verifier continues
greedily from the answer's first t tokens and n; the mismatch is *important* when the
continuation's answer passes the prompt's check differently from the verifier's own answer
(`task_score.passes`), unimportant otherwise (AutoJudge's "the answers match").

Features of a mismatch: the verifier's last hidden state after its final norm (what its LM
head reads) at the position that predicted token t, and after reading n, side by side
[2H] float32: the same two rows the decoder's verify pass gives a judge (`hidden[:, j]` and
`hidden[:, j + 1]` at draft j). Continuations run as batches of the float32 verifier.

    python -m training.mine_judge --out /work/data/judge/mined.pt --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cactus_core import SpeculativeDecoder, load_pair
from cactus_core.engine.loading.embedded_drafts import (
    DEFAULT_EMBEDDED_DRAFT,
    embedded_draft,
)
from cactus_core.experiments.quality.task_score import passes
from training.common import load_verifier_and_tokenizer
from training.judge_tasks import judge_tasks


def mismatches(dec: SpeculativeDecoder, prompt: str, max_new: int) -> tuple[list[int], list]:
    """(the prompt's ids, its greedy answer's ids) and each mismatch (answer position, drafted
    token) from the decoder's T = 0 rounds."""
    out = dec.generate(prompt, max_new_tokens=max_new, seed=0)
    found, at = [], 0
    for rnd in out.trace.rounds:
        v = rnd.verdict
        for i, fate in enumerate(v.fates):
            if fate == "rejected":
                found.append((at + v.depths[i] - 1, v.tokens[i]))
        at += len(rnd.emitted_ids)
    answer = list(out.token_ids)
    # a rejection whose recovered token the budget cut was never part of the answer
    return out.prompt_ids, answer, [(t, n) for t, n in found if t < len(answer)]


@torch.inference_mode()
def continue_greedy(model, tok, prefixes: list[list[int]], max_new: int, eos: int) -> list[str]:
    """The verifier's greedy continuations of each prefix (ids), decoded."""
    width = max(len(p) for p in prefixes)
    pad = tok.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prefixes])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prefixes])
    gen = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=max_new,
        eos_token_id=eos,
        pad_token_id=pad,
        temperature=None,
        top_p=None,
        top_k=None,
    )
    return [tok.decode(row[width:], skip_special_tokens=True) for row in gen]


@torch.inference_mode()
def features(model, prefixes: list[list[int]]) -> torch.Tensor:
    """[N, 2H]: the final-norm hidden states at each prefix's last two positions (the one that
    predicted its last token, and after reading it)."""
    rows = []
    for p in prefixes:
        hidden = model.model(input_ids=torch.tensor([p])).last_hidden_state[0]  # [L, H]
        rows.append(torch.cat([hidden[-2], hidden[-1]]).float())
    return torch.stack(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0, help="judge_tasks' seed")
    ap.add_argument("--limit", type=int, default=0, help="mine only the first N prompts")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(**embedded_draft(DEFAULT_EMBEDDED_DRAFT).load_kwargs("cpu"))
    dec = SpeculativeDecoder(pair, "sps", k=4, temperature=0.0)
    model, tok = load_verifier_and_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    rows = judge_tasks(args.seed)[: args.limit or None]
    feats, labels, meta, t0 = [], [], [], time.time()
    for i, row in enumerate(rows):
        prompt_ids, answer, found = mismatches(dec, row["prompt"], args.max_new)
        target = tok.decode(answer, skip_special_tokens=True)
        target_pass = passes(row["answer"], target)
        prefixes = [prompt_ids + answer[:t] + [n] for t, n in found]
        for s in range(0, len(prefixes), args.batch):
            chunk = prefixes[s : s + args.batch]
            texts = continue_greedy(model, tok, chunk, args.max_new, eos)
            feats.append(features(model, chunk))
            for (t, n), text in zip(found[s : s + args.batch], texts, strict=True):
                alt = tok.decode([*answer[:t], n], skip_special_tokens=True) + text
                labels.append(passes(row["answer"], alt) != target_pass)
                meta.append({"prompt": i, "position": t, "draft": n, "target": answer[t]})
        print(
            f"{i + 1}/{len(rows)} prompts, {len(labels)} mismatches "
            f"({sum(labels)} important), {time.time() - t0:.0f}s",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "features": torch.cat(feats) if feats else torch.zeros(0, 0),
            "important": torch.tensor(labels, dtype=torch.bool),
            "meta": meta,
            "prompts": rows,
            "pair": pair.identity,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
