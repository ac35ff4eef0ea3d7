"""Choose the ids the draft's head scores (engine.runtime.subset_head) from the distillation data.

Every id gets a score: the verifier's probability mass on it (T = 0.7 after top-p 0.95, from
the saved top-64 logits) summed over all training answer positions, plus one per time it was
actually emitted in an answer. The top-S ids by score, plus the special / chat tokens, form the
head. What the subset costs is the verifier's nucleus mass outside it on answers not used for
the ranking: the draft can never propose those tokens, so that mass is acceptance lost for good.

    python -m training.subset --data /work/data/distill --sizes 2048,4096,8192,16384
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.common import target_probs

SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def special_ids(tok) -> list[int]:
    ids = {tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    for attr in ("eos_token_id", "bos_token_id", "pad_token_id"):
        v = getattr(tok, attr, None)
        if v is not None:
            ids.add(int(v))
    return sorted(i for i in ids if i is not None and i >= 0)


def scores(records: list[dict], vocab: int, temperature=0.7, top_p=0.95) -> torch.Tensor:
    s = torch.zeros(vocab, dtype=torch.float64)
    for r in records:
        q = target_probs(r["top_values"], temperature, top_p).double()
        s.index_add_(0, r["top_indices"].long().flatten(), q.flatten())
        s.index_add_(0, torch.tensor(r["answer_ids"]), torch.ones(len(r["answer_ids"])).double())
    return s


def choose(score: torch.Tensor, size: int, always: list[int]) -> torch.Tensor:
    """The `size` ids: `always` first, then the best-scored; returned sorted ascending."""
    chosen = list(dict.fromkeys(always))
    taken = set(chosen)
    for i in torch.argsort(score, descending=True).tolist():
        if len(chosen) >= size:
            break
        if i not in taken:
            chosen.append(i)
            taken.add(i)
    return torch.tensor(sorted(chosen), dtype=torch.long)


def lost_mass(records: list[dict], ids: torch.Tensor, vocab: int, temperature=0.7, top_p=0.95):
    """Mean verifier nucleus mass outside `ids` per answer position, and the share of answer
    tokens outside them."""
    inside = torch.zeros(vocab, dtype=torch.bool)
    inside[ids] = True
    lost, out_tok, n = 0.0, 0, 0
    for r in records:
        q = target_probs(r["top_values"], temperature, top_p)
        lost += (q * ~inside[r["top_indices"].long()]).sum().item()
        out_tok += int((~inside[torch.tensor(r["answer_ids"])]).sum())
        n += len(r["answer_ids"])
    return lost / n, out_tok / n


def main() -> None:
    from training.common import load_records, load_verifier_and_tokenizer, split_holdout

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path("/work/data/distill"))
    ap.add_argument("--sizes", default="2048,4096,6144,8192,12288,16384")
    ap.add_argument("--holdout", type=int, default=24)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    _, tok = load_verifier_and_tokenizer()
    vocab = len(tok)
    train, held = split_holdout(load_records(args.data), args.holdout)
    score = scores(train, vocab)
    always = special_ids(tok)
    rows = []
    for size in [int(x) for x in args.sizes.split(",")]:
        ids = choose(score, size, always)
        lost_h, tok_h = lost_mass(held, ids, vocab)
        lost_t, tok_t = lost_mass(train, ids, vocab)
        rows.append(
            {
                "size": size,
                "held_lost_q_mass": lost_h,
                "held_tokens_outside": tok_h,
                "train_lost_q_mass": lost_t,
                "train_tokens_outside": tok_t,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    print(f"ids with any mass: {(score > 0).sum().item()}; special ids {always}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
