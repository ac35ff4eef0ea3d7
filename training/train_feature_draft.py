"""Train the feature-conditioned (EAGLE-style) draft, cactus_core/engine/loading/feature_draft.py.

Data: training.gen_features shards (verifier answers, features before the final norm, top-K
logits). Every position of every answer is a chain that drafts `--depth` tokens, unrolled on
the draft's own predicted features ("training-time test", EAGLE-3), so steps 2..k are trained
on the inputs they will see in decoding. At draft step d, chain i predicts f_{i+d} and the
verifier's distribution q of token x_{i+d+1}. Loss per step, summed over steps:

    w_reg * SmoothL1(f^ / s, f / s)           (s: the features' RMS; EAGLE's regression)
    + KL(q_S || p)                            (q at T, top-p 1.0; q_S restricted to the head)
    + (1 - sum min(p, q_1.0)) + (1 - sum min(p, q_0.95))   (expected lossless acceptance)

p = the draft at T over its head ids. The decoder layer starts as the verifier's last layer;
with --layers 2 and --init-from a one-layer draft, the second layer starts as an identity on the
residual stream (`FeatureDraft.from_verifier`), so training starts where that draft was.
With --feature-layers 2,15 (data from `training.gen_features --add-layers 2,15`) the draft is
multi-depth (EAGLE-3 style): it also reads those verifier layers' outputs at the verifier-fed
positions, through a fuse that starts as "the top feature alone", so a warm start from a
one-depth draft starts where that draft was.
AdamW, cosine learning rate over a wall-clock budget (--minutes), best/last checkpoints by
the held-out implied tokens per verifier call at k = depth (mean over top-p 1.0 and 0.95).
Shards named in --eval-shards (in every data folder) are never trained on.

    python -m training.train_feature_draft --data /work/data/fd/r1 /work/data/fd/r2 \\
        --out /work/data/fd_ckpt --head-size 16384 --minutes 50 --threads 1
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cactus_core.engine.loading.feature_draft import FeatureDraft, rms
from cactus_core.maths.rules.cactus import cactus_h
from training.common import load_verifier_and_tokenizer, target_probs
from training.prompts import heldout_prompts
from training.subset import choose, lost_mass, scores, special_ids


def shard_index(path: Path) -> int:
    return int(re.search(r"shard_(\d+)", path.name).group(1))


def load_split(dirs: list[Path], eval_shards: set[int]) -> tuple[list[dict], list[dict]]:
    """(train, held): held = the records of the shards in eval_shards, in every folder.

    A folder generated with another --prompt-seed orders the prompts differently, so a
    held-out prompt can sit in one of its training shards: such records are held out too,
    which keeps every held-out prompt unseen in training. Answers to the draft's own held-out
    prompts (`training.prompts.heldout_prompts`, the decoder's measurement set) are dropped.
    The shards are memory-mapped: their tensors are read from disk as batches need them, so
    data many times the memory's size trains.
    """
    measured = set(heldout_prompts())
    train, held = [], []
    for d in dirs:
        for shard in sorted(d.glob("shard_*.pt")):
            recs = [
                r
                for r in torch.load(shard, mmap=True)
                if len(r["answer_ids"]) >= 3 and r["prompt"] not in measured
            ]
            for r in recs:
                r["source"] = f"{d.name}/{shard.name}"
            (held if shard_index(shard) in eval_shards else train).extend(recs)
    held_prompts = {r["prompt"] for r in held}
    held += [r for r in train if r["prompt"] in held_prompts]
    train = [r for r in train if r["prompt"] not in held_prompts]
    return train, held


def make_batch(recs: list[dict], depth: int, layer_features: bool = False) -> dict:
    """Right-padded tensors of a batch.

    feats [B, T, D] float32: f_0 .. f_{T-1} (T = the longest record's feature count), or
    [B, T, (n + 1) D] with `layer_features` (the records' n feature layers, then the top);
    tokens [B, T + depth]: x_0 ..; at position j (j < T + depth): valid [B, T + depth] (j has a
    target: an answer's predicting position with a saved feature), target feature
    tfeat [B, T + depth, D], top-K vals / idx [B, T + depth, K] (the verifier's logits of x_{j+1}).
    """
    t = max(r["features"].shape[0] for r in recs)
    b, dim = len(recs), recs[0]["features"].shape[1]
    k = recs[0]["top_values"].shape[1]
    n = t + depth
    feats = torch.zeros(b, n, dim)
    wide = None
    if layer_features:
        extra = recs[0]["layer_features"].shape[1]
        wide = torch.zeros(b, t, extra + dim)
    tokens = torch.zeros(b, n, dtype=torch.long)
    valid = torch.zeros(b, n, dtype=torch.bool)
    vals = torch.zeros(b, n, k)
    idx = torch.zeros(b, n, k, dtype=torch.long)
    for i, r in enumerate(recs):
        seq = r["prompt_ids"] + r["answer_ids"]
        n_p = len(r["prompt_ids"])
        m = r["features"].shape[0]  # = n_p + n_answer - 1
        feats[i, :m] = r["features"].float()
        if wide is not None:
            wide[i, :m, :extra] = r["layer_features"].float()
            wide[i, :m, extra:] = r["features"].float()
        tokens[i, : len(seq)] = torch.tensor(seq)
        # Positions n_p - 1 .. m - 1 have both a saved feature and the top-K of their next
        # token (row a of top_values is position n_p - 1 + a).
        valid[i, n_p - 1 : m] = True
        vals[i, n_p - 1 : m] = r["top_values"][: m - n_p + 1].float()
        idx[i, n_p - 1 : m] = r["top_indices"][: m - n_p + 1].long()
    return {
        "feats": feats[:, :t] if wide is None else wide,
        "tokens": tokens,
        "valid": valid,
        "tfeat": feats,
        "vals": vals,
        "idx": idx,
    }


def step_rows(batch: dict, outs: list[torch.Tensor], d: int):
    """Rows of draft step d (1-based) that have targets: (pred [N, D], target [N, D], vals, idx)."""
    t = outs[0].shape[1]
    m = batch["valid"][:, d : d + t]  # [B, T]: chain i's step d predicts position i + d
    return (
        outs[d - 1][m],
        batch["tfeat"][:, d : d + t][m],
        batch["vals"][:, d : d + t][m],
        batch["idx"][:, d : d + t][m],
        m,
    )


def dist_losses(sub_logits, vals, idx, lookup, temperature):
    """KL(q_S || p), sum min(p, q) at top-p 1.0 and 0.95; p over the head's ids."""
    pos = lookup[idx]  # [N, K] index in the head, -1 outside it
    ok = pos >= 0
    logp = torch.log_softmax(sub_logits.float() / temperature, dim=-1)  # [N, S]
    logp_k = torch.where(ok, logp.gather(-1, pos.clamp_min(0)), torch.zeros_like(vals))
    p_k = logp_k.exp() * ok
    q1 = target_probs(vals, temperature, 1.0)  # [N, K]
    q95 = target_probs(vals, temperature, 0.95)
    q_s = q1 * ok
    q_s = q_s / q_s.sum(-1, keepdim=True).clamp_min(1e-12)
    kl = (q_s * (torch.log(q_s.clamp_min(1e-12)) - logp_k)).sum(-1)
    acc1 = torch.minimum(p_k, q1).sum(-1)
    acc95 = torch.minimum(p_k, q95).sum(-1)
    return kl, acc1, acc95


def losses(draft, batch, depth, lookup, args):
    outs = draft.forward_unrolled(batch["feats"], batch["tokens"], depth)
    total, parts = 0.0, []
    s = draft.feature_scale
    for d in range(1, depth + 1):
        pred, tgt, vals, idx, _ = step_rows(batch, outs, d)
        reg = F.smooth_l1_loss(pred * s, tgt * s)
        kl, acc1, acc95 = dist_losses(
            draft.subset_logits(pred), vals, idx, lookup, args.temperature
        )
        kl, acc1, acc95 = kl.mean(), acc1.mean(), acc95.mean()
        w = args.step_decay ** (d - 1)
        total = total + w * (args.reg_weight * reg + kl + (1 - acc1) + (1 - acc95))
        parts.append((reg.item(), kl.item(), acc1.item(), acc95.item()))
    return total, parts


@torch.no_grad()
def evaluate(draft, recs, depth, lookup, temperature, batch_size=8, cactus_delta=None) -> dict:
    """Held-out expected acceptance sum min(p, q) per draft step, at top-p 1.0 and 0.95 (p and q
    both after their own nucleus, as the decoder processes them), and what it implies for k =
    depth: tokens per verifier call 1 + sum_j prod_{m<=j} a_m and the acceptance rate
    (accepted / decided drafts), per chain (every answer position with all steps scored).
    """
    draft.eval()
    acc = {tp: [[] for _ in range(depth)] for tp in (1.0, 0.95)}
    cactus = [[] for _ in range(depth)]  # with cactus_delta: sum min(p, h), h = cactus_h(q)
    chains = {tp: [] for tp in (1.0, 0.95)}  # [N, depth] per batch
    for i in range(0, len(recs), batch_size):
        batch = make_batch(recs[i : i + batch_size], depth, bool(draft.feature_layers))
        outs = draft.forward_unrolled(batch["feats"], batch["tokens"], depth)
        t = outs[0].shape[1]
        per_tp = {tp: torch.full((*outs[0].shape[:2], depth), float("nan")) for tp in acc}
        for d in range(1, depth + 1):
            pred, _, vals, idx, m = step_rows(batch, outs, d)
            p = torch.softmax(draft.subset_logits(pred).float() / temperature, dim=-1)  # [N, S]
            pos = lookup[idx]
            ok = pos >= 0
            for tp in acc:
                q = target_probs(vals, temperature, tp)
                pt = p
                if tp < 1.0:  # p's own nucleus, inside its top 512
                    pv, pi = p.topk(min(512, p.shape[-1]), dim=-1)
                    keep = pv.cumsum(-1) - pv < tp
                    pv = pv * keep
                    pt = torch.zeros_like(p).scatter_(-1, pi, pv / pv.sum(-1, keepdim=True))
                a = torch.minimum(pt.gather(-1, pos.clamp_min(0)) * ok, q).sum(-1)  # [N]
                acc[tp][d - 1].append(a)
                per_tp[tp][..., d - 1][m] = a
                if tp == 1.0 and cactus_delta is not None:
                    h = cactus_h(q, cactus_delta)
                    cactus[d - 1].append(
                        torch.minimum(pt.gather(-1, pos.clamp_min(0)) * ok, h).sum(-1)
                    )
        for tp in acc:
            full = per_tp[tp][:, :t].reshape(-1, depth)
            chains[tp].append(full[~full.isnan().any(-1)])
    draft.train()
    out = {}
    if cactus_delta is not None:
        out["cactus"] = {
            "delta": cactus_delta,
            "per_step": [torch.cat(a).mean().item() for a in cactus],
        }
    for tp in acc:
        per_step = [torch.cat(a).mean().item() for a in acc[tp]]
        c = torch.cat(chains[tp])  # [N, depth]
        prods = c.cumprod(-1)  # P(first j drafts accepted), per chain
        accepted = prods.sum(-1)  # expected accepted drafts
        decided = 1 + prods[:, :-1].sum(-1)  # expected decisions
        out[str(tp)] = {
            "per_step": per_step,
            "mean": sum(per_step) / depth,
            "tokens_per_call": 1 + accepted.mean().item(),
            "acceptance_rate": (accepted.sum() / decided.sum()).item(),
            "chains": c.shape[0],
        }
    return out


def summary(ev: dict) -> str:
    return " | ".join(
        f"tp{tp}: steps {' '.join(f'{a:.3f}' for a in v['per_step'])} "
        f"rate {v['acceptance_rate']:.3f} tok/call {v['tokens_per_call']:.3f}"
        for tp, v in ev.items()
        if tp != "cactus"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, nargs="+", default=[Path("/work/data/fd/r1")])
    ap.add_argument("--out", type=Path, default=Path("/work/data/fd_ckpt"))
    ap.add_argument("--eval-shards", default="3,29", help="shard indices never trained on")
    ap.add_argument("--eval-records", type=int, default=32, help="held-out answers per eval")
    ap.add_argument("--head-size", type=int, default=16384, help="0: full vocabulary")
    ap.add_argument("--depth", type=int, default=4, help="draft steps unrolled in training")
    ap.add_argument("--step-decay", type=float, default=1.0, help="loss weight of step d: x^(d-1)")
    ap.add_argument("--reg-weight", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=3e-4, help="peak learning rate of the layer")
    ap.add_argument("--fc-lr", type=float, default=1e-3, help="peak learning rate of the fc")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=50.0, help="wall-clock budget (LR schedule)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--init-from", type=Path, default=None, help="warm start: a saved draft")
    ap.add_argument("--layers", type=int, default=1, help="decoder layers (a deeper head)")
    ap.add_argument(
        "--feature-layers",
        default="",
        help="multi-depth: also read these verifier layers (data from gen_features --add-layers)",
    )
    ap.add_argument("--no-bf16", action="store_true", help="train in float32 (1.5x slower)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: by time)")
    ap.add_argument(
        "--steps",
        type=int,
        default=0,
        help="a step budget for the cosine schedule instead of --minutes (a rerun repeats it)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in --out (weights, optimiser, step, data order; --steps)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    verifier, tok = load_verifier_and_tokenizer()
    verifier.requires_grad_(False)
    eval_shards = {int(x) for x in args.eval_shards.split(",") if x}
    train, held = load_split(args.data, eval_shards)
    n_tok = sum(len(r["answer_ids"]) for r in train)
    print(f"train {len(train)} answers / {n_tok} tokens; held-out {len(held)}", flush=True)
    held_eval = sorted(held, key=lambda r: r["source"] + r["prompt"])
    held_eval = held_eval[:: max(1, len(held_eval) // args.eval_records)][: args.eval_records]

    vocab = verifier.get_input_embeddings().weight.shape[0]
    head_ids = None
    lookup = torch.arange(vocab)
    if args.head_size:
        head_ids = choose(scores(train, vocab), args.head_size, special_ids(tok))
        lookup = torch.full((vocab,), -1, dtype=torch.long)
        lookup[head_ids] = torch.arange(head_ids.numel())
        lost, out_tok = lost_mass(held, head_ids, vocab)
        print(
            f"head {args.head_size} ids: held-out q mass (top-p 0.95) outside {lost:.4f}, "
            f"answer tokens outside {out_tok:.4f}",
            flush=True,
        )
    sample = torch.cat([r["features"][len(r["prompt_ids"]) :] for r in train[:200]])
    embed_scale = 1 / rms(verifier.get_input_embeddings().weight)
    feature_scale = 1 / rms(sample)
    feature_layers = [int(x) for x in args.feature_layers.split(",") if x]
    layer_scales = None
    if feature_layers:
        missing = [r["source"] for r in train + held if r.get("feature_layers") != feature_layers]
        if missing:
            raise SystemExit(
                f"{len(missing)} answers lack layer features {feature_layers} (e.g. "
                f"{missing[0]}): make the data with gen_features --add-layers"
            )
        wide = torch.cat([r["layer_features"][len(r["prompt_ids"]) :] for r in train[:200]])
        d = sample.shape[1]
        layer_scales = [1 / rms(wide[:, i * d : (i + 1) * d]) for i in range(len(feature_layers))]
        print(f"feature layers {feature_layers}, scales {layer_scales}", flush=True)
    warm = None
    if args.init_from is not None:
        # The fc was trained on inputs at the saved draft's scales: keep them.
        warm = FeatureDraft.load(args.init_from, verifier)
        embed_scale, feature_scale = warm.embed_scale, warm.feature_scale
        if warm.feature_layers and warm.feature_layers == feature_layers:
            layer_scales = warm.layer_scales
    draft = FeatureDraft.from_verifier(
        verifier,
        head_ids,
        embed_scale,
        feature_scale,
        num_layers=args.layers,
        feature_layers=feature_layers,
        layer_scales=layer_scales,
    )
    if warm is not None:
        # A deeper draft keeps its identity-started layers past the saved draft's, and a
        # multi-depth one grown from a one-depth draft its top-feature-only fuse.
        missing, unexpected = draft.load_state_dict(warm.state_dict(), strict=False)
        grown = len(warm.layers) < args.layers
        missing = [k for k in missing if not (k == "fuse.weight" and not warm.feature_layers)]
        if unexpected or (missing and not grown):
            raise SystemExit(
                f"--init-from does not fit --layers {args.layers}: {missing or unexpected}"
            )
        print(f"warm start from {args.init_from} ({len(warm.layers)} layer(s))", flush=True)
    draft.train()
    params = [p for p in draft.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params) / 1e6
    print(
        f"trainable parameters: {n_params:.2f}M; embed_scale {embed_scale:.3f} "
        f"feature_scale {feature_scale:.5f}",
        flush=True,
    )
    # The fc starts as identity blocks (entries O(1)); the layer holds the verifier's small
    # pretrained weights, which a large Adam step would wipe out: two learning rates.
    groups = [
        {
            "params": [*draft.fc.parameters(), *(draft.fuse.parameters() if draft.fuse else [])],
            "peak": args.fc_lr,
        },
        {"params": [p for layer in draft.layers for p in layer.parameters()], "peak": args.lr},
    ]
    opt = torch.optim.AdamW(groups, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.98))

    info = {
        "data": [str(d) for d in args.data],
        "eval_shards": sorted(eval_shards),
        "train_answers": len(train),
        "train_tokens": n_tok,
        "held_out_answers": len(held),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    run = RunState.start(args, draft, opt, verifier, rng)
    if not run.log:
        t_ev = time.time()
        ev = evaluate(draft, held_eval, args.depth, lookup, args.temperature)
        print(f"step 0 eval ({time.time() - t_ev:.0f}s): {summary(ev)}", flush=True)
        run.log.append({"step": 0, "minutes": 0.0, "eval": ev})
    done = False
    while not done:
        # Similar lengths in a batch waste less padding; batches are shuffled across the epoch.
        # The epoch's order comes from the rng as it stood at the epoch's start, which a
        # resumed run restores, so it meets the same batches and skips the ones it trained.
        if run.epoch_rng is not None:
            rng.setstate(run.epoch_rng)
        run.epoch_rng = rng.getstate()
        order = sorted(train, key=lambda r: r["features"].shape[0] + rng.random() * 30)
        batches = [order[i : i + args.batch] for i in range(0, len(order), args.batch)]
        rng.shuffle(batches)
        for recs in batches[run.batch_index :]:
            elapsed = run.minutes()
            frac = run.step / args.steps if args.steps else elapsed / args.minutes
            if frac >= 1.0 or (args.max_steps and run.step >= args.max_steps):
                done = True
                break
            for g in opt.param_groups:
                g["lr"] = g["peak"] * lr_scale(run.step - run.warm_from, frac, args.warmup)
            # bfloat16 autocast: the matmuls run 1.5x faster on this CPU (AVX-512 BF16); the
            # softmaxes and losses stay in float32, and so do the weights.
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not args.no_bf16):
                batch = make_batch(recs, args.depth, bool(feature_layers))
                loss, parts = losses(draft, batch, args.depth, lookup, args)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            run.step += 1
            run.batch_index += 1
            if run.step % 10 == 0:
                acc = " ".join(f"{a1:.2f}/{a95:.2f}" for _, _, a1, a95 in parts)
                print(
                    f"step {run.step} ep {run.epoch} {elapsed:.1f}min "
                    f"lr {opt.param_groups[1]['lr']:.1e} loss {loss.item():.3f} "
                    f"reg {parts[0][0]:.3f} kl {parts[0][1]:.3f} acc(1.0/0.95) by step {acc}",
                    flush=True,
                )
            if run.step % args.eval_every == 0:
                checkpoint(draft, opt, held_eval, args, lookup, run, info)
        if not done:
            run.epoch, run.batch_index, run.epoch_rng = run.epoch + 1, 0, None
    checkpoint(draft, opt, held_eval, args, lookup, run, info)


def lr_scale(step: int, frac: float, warmup: int) -> float:
    """Linear warm-up over `warmup` steps, then cosine from the peak to a tenth of it."""
    warm = min(1.0, (step + 1) / warmup)
    return warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


class RunState:
    """Where a run stands, saved beside its checkpoints (OUT/state.pt) so that `--resume`
    continues it: the step, the epoch and the batch within it, the rng at the epoch's start,
    the optimiser, the minutes trained before, the eval log and the best score."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.step = self.epoch = self.batch_index = 0
        self.epoch_rng: object | None = None
        self.before = 0.0  # minutes trained in earlier sessions of this run
        self.t0 = time.time()
        self.log: list[dict] = []
        self.best = -1.0
        self.warm_from = 0  # the step the warm-up counts from (a resume without Adam's state)

    def minutes(self) -> float:
        return self.before + (time.time() - self.t0) / 60

    @classmethod
    def start(cls, args, draft, opt, verifier, rng) -> RunState:
        run = cls(args.out)
        if not args.resume:
            return run
        if not args.steps:
            raise SystemExit("--resume continues a step-budget schedule: give its --steps")
        saved = torch.load(args.out / "state.pt", weights_only=False)
        draft.load_state_dict(FeatureDraft.load(args.out / "last", verifier).state_dict())
        for name in ("step", "epoch", "batch_index", "epoch_rng", "before", "log", "best"):
            setattr(run, name, saved[name])
        if saved.get("optimiser") is not None:
            opt.load_state_dict(saved["optimiser"])
        else:
            # A compact checkpoint (training.compact_checkpoint) keeps no Adam moments: they
            # restart from zero, so the learning rate warms up again from this step.
            run.warm_from = run.step
            print("no optimiser state saved: Adam restarts, with a new warm-up", flush=True)
        torch.set_rng_state(saved["torch_rng"])
        print(f"resumed at step {run.step} (epoch {run.epoch}, {run.before:.1f} min)", flush=True)
        return run

    def save(self, opt) -> None:
        state = {
            "optimiser": opt.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "epoch_rng": self.epoch_rng,
            "before": self.minutes(),
            "log": self.log,
            "best": self.best,
            "torch_rng": torch.get_rng_state(),
        }
        tmp = self.out / "state.tmp"
        torch.save(state, tmp)
        tmp.rename(self.out / "state.pt")


def checkpoint(draft, opt, held_eval, args, lookup, run: RunState, info) -> None:
    ev = evaluate(draft, held_eval, args.depth, lookup, args.temperature)
    minutes = run.minutes()
    run.log.append({"step": run.step, "epoch": run.epoch, "minutes": minutes, "eval": ev})
    print(f"step {run.step} eval: {summary(ev)}", flush=True)
    score = (ev["1.0"]["tokens_per_call"] + ev["0.95"]["tokens_per_call"]) / 2
    meta = {**info, "steps": run.step, "epochs": run.epoch, "train_minutes": minutes, "eval": ev}
    draft.save(args.out / "last", info=meta)
    (args.out / "train_log.json").write_text(json.dumps({**meta, "log": run.log}, indent=1))
    if score > run.best:
        draft.save(args.out / "best", info=meta)
        print(f"  saved best (mean tokens per call {score:.3f})", flush=True)
        run.best = score
    run.save(opt)


if __name__ == "__main__":
    main()
