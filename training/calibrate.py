"""Sharpen a trained draft: scale its final norm so its logits grow by a factor s.

Multiplying the logits by s is sampling the draft at temperature T / s. Distillation with a
mass-covering KL leaves the draft broader than the verifier, and with top-p on both sides the
drafts from its tail land where the verifier's nucleus gives q_n = 0 (always rejected). The
factor with the best expected acceptance on the holdout answers is folded into the weights,
so the result is still a plain LlamaForCausalLM.

    python -m training.calibrate --ckpt /work/data/ckpt/best --data /work/data/distill \\
        --export cactus_core/assets/draft
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cactus_core.engine.loading.models import tokenizer_fingerprint
from training.common import load_records, load_verifier_and_tokenizer, split_holdout
from training.export import save_draft
from training.train_draft import evaluate, make_draft


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=Path("/work/data/distill"))
    ap.add_argument("--scales", default="1.0,1.25,1.5,1.75,2.0")
    ap.add_argument("--holdout", type=int, default=24)
    ap.add_argument(
        "--shards", default="", help="evaluate on these shard numbers (unseen in training)"
    )
    ap.add_argument(
        "--head-size",
        type=int,
        default=0,
        help="re-choose a smaller subset head: the top N ids of the same ranking (training.subset)"
        " on --train-data, which must be the training run's data; 0 keeps the checkpoint's head",
    )
    ap.add_argument("--train-data", type=Path, default=Path("/work/data/distill"))
    ap.add_argument("--train-holdout", type=int, default=24, help="the training run's --holdout")
    ap.add_argument("--export", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    cfg = json.loads((args.ckpt / "config.json").read_text())
    info = json.loads((args.ckpt / "train_log.json").read_text())
    verifier, tok = load_verifier_and_tokenizer()
    shared = cfg.get("cactus_shared_verifier_layers", 0)
    draft = make_draft(verifier, info["init_layers"], shared)
    saved = {k: v.float() for k, v in load_file(str(args.ckpt / "model.safetensors")).items()}
    _, unexpected = draft.load_state_dict(saved, strict=False)
    assert not unexpected, unexpected
    if cfg.get("cactus_head_token_ids"):
        from cactus_core.engine.runtime.subset_head import attach_subset_head

        ids = load_file(str(args.ckpt / cfg["cactus_head_token_ids"]))["token_ids"]
        if args.head_size:
            from training.subset import choose, scores, special_ids

            train, _ = split_holdout(load_records(args.train_data), args.train_holdout)
            vocab = draft.get_input_embeddings().weight.shape[0]
            new = choose(scores(train, vocab), args.head_size, special_ids(tok))
            if not bool(torch.isin(new, ids).all()):
                raise SystemExit("--head-size: not a subset of the trained head (other data?)")
            info = {**info, "head_after_training": {"size": args.head_size, "from": ids.numel()}}
            ids = new
        attach_subset_head(draft, ids)
        print(f"subset head of {ids.numel()} ids", flush=True)
    draft.eval()

    if args.shards:
        # Shards written after the training run had loaded its data: never trained on.
        held = []
        for n in args.shards.split(","):
            held.extend(torch.load(args.data / f"shard_{int(n):04d}.pt"))
        held = [r for r in held if len(r["answer_ids"]) >= 2][: args.holdout]
    else:
        # The same holdout rule as train_draft.py (every n-th answer by prompt text).
        _, held = split_holdout(load_records(args.data), args.holdout)
    print(f"{len(held)} answers, {sum(len(r['answer_ids']) for r in held)} tokens", flush=True)
    norm = draft.model.norm.weight.data.clone()
    results = []
    for s in [float(x) for x in args.scales.split(",")]:
        draft.model.norm.weight.data = norm * s
        kl, acc, acc_tp = evaluate(draft, held, tok.pad_token_id, 0.7, 0.95)
        results.append({"scale": s, "kl": kl, "acc": acc, "acc_top_p": acc_tp})
        print(json.dumps(results[-1]), flush=True)
    best = max(results, key=lambda r: r["acc_top_p"])
    print("best", json.dumps(best), flush=True)
    if args.export is not None:
        draft.model.norm.weight.data = norm * best["scale"]
        calibration = {"results": results, "chosen": best, "shards": args.shards}
        info = {**info, "calibration": calibration}
        save_draft(draft, args.export, info, tokenizer_fingerprint(tok))


if __name__ == "__main__":
    main()
