"""Train the embedded draft by distillation from the verifier's top-K logits.

The draft is a LlamaForCausalLM with the verifier's widths. Its first `--shared` layers ARE the
verifier's first layers (frozen, not saved: the loader takes them from the verifier, like the
embedding matrix, which is also frozen and tied to the head); the layers above them are
initialised from chosen verifier layers and trained. Because the shared layers are frozen,
their output is computed once for the whole data set and training runs only the layers above.
The loss is measured where the app samples, at temperature T after the verifier's top-p:
q = the verifier's nucleus distribution (from its saved top-K logits), p = the draft at T,
    loss = KL(q || p) + (1 - sum_x min(p_x, q_x))
the second term being one minus the expected lossless acceptance itself.

    python -m training.train_draft --data /work/data/distill --out /work/data/ckpt \\
        --layers 0,1,2,3,29 --shared 3 --minutes 60
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cactus_core.engine.loading.models import tokenizer_fingerprint
from training.common import (
    load_records,
    load_verifier_and_tokenizer,
    split_holdout,
    target_probs,
)
from training.export import save_draft


def make_draft(verifier: LlamaForCausalLM, layers: list[int], shared: int = 0) -> LlamaForCausalLM:
    cfg = LlamaConfig.from_dict(verifier.config.to_dict())
    cfg.num_hidden_layers = len(layers)
    cfg.quantization_config = None
    cfg.layer_types = None
    draft = LlamaForCausalLM(cfg)
    sd = verifier.state_dict()
    own = {}
    for new, old in enumerate(layers):
        prefix = f"model.layers.{old}."
        for k, v in sd.items():
            if k.startswith(prefix):
                own[f"model.layers.{new}." + k[len(prefix) :]] = v.clone()
    own["model.norm.weight"] = sd["model.norm.weight"].clone()
    missing, unexpected = draft.load_state_dict(own, strict=False)
    assert not unexpected and set(missing) <= {"model.embed_tokens.weight", "lm_head.weight"}
    emb = verifier.get_input_embeddings().weight
    draft.get_input_embeddings().weight = emb
    draft.get_output_embeddings().weight = emb
    emb.requires_grad_(False)
    if layers[:shared] != list(range(shared)):
        raise ValueError(f"the {shared} shared layers must be the verifier's first: {layers}")
    for i in range(shared):
        draft.model.layers[i] = verifier.model.layers[i]
        draft.model.layers[i].requires_grad_(False)
    draft.config.cactus_shared_verifier_layers = shared
    return draft


@torch.no_grad()
def shared_features(draft, records: list[dict], shared: int, pad_id: int, batch: int = 8) -> None:
    """Store under r["h"] the hidden state after the shared layers, [T, H] float16."""
    m = draft.model
    order = sorted(records, key=lambda r: len(r["prompt_ids"]) + len(r["answer_ids"]))
    for i in range(0, len(order), batch):
        recs = order[i : i + batch]
        ids, *_ = batch_tensors(recs, pad_id)
        h = m.embed_tokens(ids)
        pos = torch.arange(ids.shape[1])[None]
        pe = m.rotary_emb(h, position_ids=pos)
        for layer in m.layers[:shared]:
            h = layer(h, attention_mask=None, position_ids=pos, position_embeddings=pe)
        for b, r in enumerate(recs):
            r["h"] = h[b, : len(r["prompt_ids"]) + len(r["answer_ids"])].half()


def batch_tensors(recs: list[dict], pad_id: int):
    """Right-padded inputs and, for every answer token, its predicting position and targets."""
    seqs = [r["prompt_ids"] + r["answer_ids"] for r in recs]
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), t), dtype=torch.long)
    rows, cols, vals, idx = [], [], [], []
    for b, (r, s) in enumerate(zip(recs, seqs, strict=True)):
        ids[b, : len(s)] = torch.tensor(s)
        mask[b, : len(s)] = 1
        n_p, n_a = len(r["prompt_ids"]), len(r["answer_ids"])
        rows.append(torch.full((n_a,), b))
        cols.append(torch.arange(n_p - 1, n_p - 1 + n_a))
        vals.append(r["top_values"])
        idx.append(r["top_indices"].long())
    return ids, mask, torch.cat(rows), torch.cat(cols), torch.cat(vals), torch.cat(idx)


def draft_logits(draft, ids, mask, rows, cols):
    hidden = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, T, H]
    return draft.lm_head(hidden[rows, cols])  # [N, V]


def draft_hidden_from_features(draft, recs, shared, rows, cols):
    """The trained layers only, on the cached shared-layer output (right padding, causal)."""
    m = draft.model
    t = max(r["h"].shape[0] for r in recs)
    h = torch.zeros(len(recs), t, m.config.hidden_size)
    for b, r in enumerate(recs):
        h[b, : r["h"].shape[0]] = r["h"].float()
    pos = torch.arange(t)[None]
    pe = m.rotary_emb(h, position_ids=pos)
    for layer in m.layers[shared:]:
        h = layer(h, attention_mask=None, position_ids=pos, position_embeddings=pe)
    return m.norm(h)[rows, cols]  # [N, H]


def subset_losses(hidden, weight, vals, idx, temperature, top_p, negatives, generator):
    """losses() with p normalised over a candidate set instead of the whole vocabulary.

    The candidates are every id in the batch's top-K targets plus `negatives` random ids, so
    the head costs a few thousand rows instead of 49,152 (the head is most of the training
    FLOPs). Ids outside the set are never pushed down here; the evaluation uses the full
    softmax, which is what tells whether that mattered.
    """
    rand = torch.randint(0, weight.shape[0], (negatives,), generator=generator)
    cand = torch.unique(torch.cat([idx.flatten(), rand]))  # [U] sorted
    logits = hidden @ weight[cand].T  # [N, U]
    return losses(logits, vals, torch.searchsorted(cand, idx), temperature, top_p)


def losses(logits, vals, idx, temperature, top_p, valid=None):
    """Mean KL(q_S || p) and mean sum min(p, q).

    Ids the draft cannot propose (outside a subset head: logit FILL, or `valid` False) have
    p = 0: they count in the acceptance term (that mass is lost for good) but the KL is taken
    against q restricted to the ids the draft can propose, renormalised.
    """
    q = target_probs(vals, temperature, top_p)  # [N, K]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, idx)  # [N, K]
    ok = logp > -1e20
    if valid is not None:
        ok = ok & valid
    logp = torch.where(ok, logp, torch.zeros_like(logp))
    q_s = q * ok
    q_s = q_s / q_s.sum(-1, keepdim=True).clamp_min(1e-12)
    kl = (q_s * (torch.log(q_s.clamp_min(1e-12)) - logp)).sum(-1)
    acc = torch.minimum(logp.exp() * ok, q).sum(-1)
    return kl.mean(), acc.mean()


def head_losses(hidden, head, vals, idx, temperature, top_p, lookup):
    """losses() over a VocabSubsetHead's ids only (a full softmax over S, not over V)."""
    logits = hidden @ head.weight.T  # [N, S]
    pos = lookup[idx]  # [N, K] position in S, -1 outside
    return losses(logits, vals, pos.clamp_min(0), temperature, top_p, valid=pos >= 0)


@torch.no_grad()
def evaluate(draft, recs, pad_id, temperature, top_p, batch=8):
    """Mean KL(q||p) and mean sum min(p, q) with p untruncated, and with p's own top-p too."""
    draft.eval()
    kls, accs, accs_tp, n = 0.0, 0.0, 0.0, 0
    for i in range(0, len(recs), batch):
        ids, mask, rows, cols, vals, idx = batch_tensors(recs[i : i + batch], pad_id)
        logits = draft_logits(draft, ids, mask, rows, cols)
        kl, acc = losses(logits, vals, idx, temperature, top_p)
        # p after its own nucleus, approximated inside its top 256 (a full sort is too slow).
        p = torch.softmax(logits.float() / temperature, dim=-1)
        pv, pi = p.topk(256, dim=-1)
        keep = pv.cumsum(-1) - pv < top_p
        pv = pv * keep
        pv = pv / pv.sum(-1, keepdim=True)
        p_t = torch.zeros_like(p).scatter_(-1, pi, pv)
        q = target_probs(vals, temperature, top_p)
        acc_tp = torch.minimum(p_t.gather(-1, idx), q).sum(-1)
        m = rows.numel()
        kls += kl.item() * m
        accs += acc.item() * m
        accs_tp += acc_tp.sum().item()
        n += m
    draft.train()
    return kls / n, accs / n, accs_tp / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path("/work/data/distill"))
    ap.add_argument("--out", type=Path, default=Path("/work/data/ckpt"))
    ap.add_argument("--layers", default="0,1,2,28,29", help="verifier layers to start from")
    ap.add_argument("--init-from", type=Path, default=None, help="warm start: a saved draft")
    ap.add_argument("--shared", type=int, default=0, help="first N layers shared, frozen")
    ap.add_argument("--negatives", type=int, default=2048, help="0: full softmax in training")
    ap.add_argument("--head-size", type=int, default=0, help="subset head of N ids (0: full)")
    ap.add_argument("--kl-weight", type=float, default=1.0)
    ap.add_argument("--acc-weight", type=float, default=1.0, help="weight of 1 - sum min(p, q)")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=60.0, help="wall-clock budget (LR schedule)")
    ap.add_argument("--steps", type=int, default=0, help="step budget instead of minutes")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=40)
    ap.add_argument("--holdout", type=int, default=24, help="records kept out for evaluation")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--export", type=Path, default=None, help="also export the best to this dir")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    neg_gen = torch.Generator().manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    verifier, tok = load_verifier_and_tokenizer()
    layers = [int(x) for x in args.layers.split(",")]
    draft = make_draft(verifier, layers, args.shared)
    del verifier
    if args.init_from is not None:
        from safetensors.torch import load_file

        own = {
            k: v.float() for k, v in load_file(str(args.init_from / "model.safetensors")).items()
        }
        _missing, unexpected = draft.load_state_dict(own, strict=False)
        assert not unexpected, unexpected
        print(f"warm start from {args.init_from} ({len(own)} tensors)", flush=True)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    args.tok_sha = tokenizer_fingerprint(tok)

    train, held = split_holdout(load_records(args.data), args.holdout)
    n_tok = sum(len(r["answer_ids"]) for r in train)
    print(f"train {len(train)} answers / {n_tok} tokens, holdout {len(held)}", flush=True)
    lookup = None
    if args.head_size:
        from cactus_core.engine.runtime.subset_head import attach_subset_head
        from training.subset import choose, lost_mass, scores, special_ids

        vocab = draft.get_input_embeddings().weight.shape[0]
        head_ids = choose(scores(train, vocab), args.head_size, special_ids(tok))
        attach_subset_head(draft, head_ids)
        lookup = torch.full((vocab,), -1, dtype=torch.long)
        lookup[head_ids] = torch.arange(head_ids.numel())
        lost, out_tok = lost_mass(held, head_ids, vocab, args.temperature, args.top_p)
        args.head_info = {"size": args.head_size, "held_lost_q_mass": lost}
        print(
            f"subset head of {args.head_size} ids: holdout q mass outside {lost:.4f}, "
            f"answer tokens outside {out_tok:.4f}",
            flush=True,
        )
    if args.shared:
        t_f = time.time()
        shared_features(draft, train, args.shared, pad_id)
        print(f"shared-layer features cached in {time.time() - t_f:.0f}s", flush=True)

    params = [p for p in draft.parameters() if p.requires_grad]
    print(f"trainable parameters: {sum(p.numel() for p in params) / 1e6:.2f}M", flush=True)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.98))

    def lr_at(step: int, frac: float) -> float:
        warm = min(1.0, (step + 1) / args.warmup)
        return args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    kl0, acc0, acc0_tp = evaluate(draft, held, pad_id, args.temperature, args.top_p)
    print(f"step 0: eval kl {kl0:.3f} acc {acc0:.4f} acc(top-p p) {acc0_tp:.4f}", flush=True)
    best = acc0_tp
    log = [{"step": 0, "kl": kl0, "acc": acc0, "acc_top_p": acc0_tp, "minutes": 0.0}]
    t0, step, epoch = time.time(), 0, 0
    draft.train()
    done = False
    while not done:
        # Similar lengths in a batch waste less padding; batches are shuffled across the epoch.
        order = sorted(
            train, key=lambda r: len(r["prompt_ids"]) + len(r["answer_ids"]) + rng.random() * 40
        )
        batches = [order[i : i + args.batch] for i in range(0, len(order), args.batch)]
        rng.shuffle(batches)
        for recs in batches:
            elapsed = (time.time() - t0) / 60
            frac = step / args.steps if args.steps else elapsed / args.minutes
            if frac >= 1.0:
                done = True
                break
            for g in opt.param_groups:
                g["lr"] = lr_at(step, frac)
            ids, mask, rows, cols, vals, idx = batch_tensors(recs, pad_id)
            if args.shared:
                hidden = draft_hidden_from_features(draft, recs, args.shared, rows, cols)
            else:
                hidden = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state
                hidden = hidden[rows, cols]
            if lookup is not None:
                kl, acc = head_losses(
                    hidden, draft.lm_head, vals, idx, args.temperature, args.top_p, lookup
                )
            elif args.negatives:
                kl, acc = subset_losses(
                    hidden,
                    draft.lm_head.weight,
                    vals,
                    idx,
                    args.temperature,
                    args.top_p,
                    args.negatives,
                    neg_gen,
                )
            else:
                kl, acc = losses(draft.lm_head(hidden), vals, idx, args.temperature, args.top_p)
            loss = args.kl_weight * kl + args.acc_weight * (1 - acc)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            if step % 10 == 0:
                print(
                    f"step {step} ep {epoch} {elapsed:.1f}min lr {opt.param_groups[0]['lr']:.2e} "
                    f"kl {kl.item():.3f} acc {acc.item():.3f}",
                    flush=True,
                )
            if step % args.eval_every == 0:
                best = _eval_and_save(
                    draft, held, pad_id, args, step, epoch, t0, log, best, layers, n_tok
                )
        epoch += 1
    _eval_and_save(draft, held, pad_id, args, step, epoch, t0, log, best, layers, n_tok, final=True)


def _eval_and_save(
    draft, held, pad_id, args, step, epoch, t0, log, best, layers, n_tok, final=False
):
    kl, acc, acc_tp = evaluate(draft, held, pad_id, args.temperature, args.top_p)
    minutes = (time.time() - t0) / 60
    log.append(
        {
            "step": step,
            "epoch": epoch,
            "kl": kl,
            "acc": acc,
            "acc_top_p": acc_tp,
            "minutes": minutes,
        }
    )
    print(f"step {step}: eval kl {kl:.3f} acc {acc:.4f} acc(top-p p) {acc_tp:.4f}", flush=True)
    info = {
        "init_layers": layers,
        "steps": step,
        "epochs": epoch,
        "train_tokens": n_tok,
        "train_minutes": minutes,
        "lr": args.lr,
        "batch": args.batch,
        "shared": args.shared,
        "kl_weight": args.kl_weight,
        "acc_weight": args.acc_weight,
        "head": getattr(args, "head_info", None),
        "temperature": args.temperature,
        "top_p": args.top_p,
        "eval": log[-1],
        "log": log,
    }
    (args.out / "train_log.json").write_text(json.dumps(info, indent=1))
    save_draft(draft, args.out / "last", info, args.tok_sha)
    if acc_tp > best or (final and not (args.out / "best").exists()):
        best = max(best, acc_tp)
        save_draft(draft, args.out / "best", info, args.tok_sha)
        if args.export is not None:
            save_draft(draft, args.export, info, args.tok_sha)
        print(f"  saved best (acc(top-p p) {acc_tp:.4f})", flush=True)
    return best


if __name__ == "__main__":
    main()
