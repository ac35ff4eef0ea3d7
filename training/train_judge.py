"""Train the learned judge (AutoJudge's classifier) on mined mismatches and ship it.

Input: `training.mine_judge`'s file (features [N, 2H] of each mismatch, whether it changed the
answer). The classifier is AutoJudge's: a logistic regression on the standardised features,
with an L2 penalty chosen on a validation split held out by prompt (a prompt's mismatches
never sit on both sides), and the classes weighted to balance (important mismatches are few).
It predicts P(important); the `learned-judge` rule accepts an sps-rejected draft when that is
below its threshold. Reported on the validation prompts: ROC AUC, and at each threshold the
share of mismatches the judge would accept and the share of the important ones it would let
through (what the threshold trades).

    python -m training.train_judge --mined /work/data/judge/mined.pt \\
        --export cactus_core/assets/judge
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cactus_core.maths.rules.learned_judge import Judge

PENALTIES = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
THRESHOLDS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)


def split_by_prompt(meta: list[dict], share: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, validation) row indices, whole prompts to each side."""
    prompts = sorted({m["prompt"] for m in meta})
    gen = torch.Generator().manual_seed(seed)
    order = [prompts[i] for i in torch.randperm(len(prompts), generator=gen).tolist()]
    held = set(order[: max(1, int(len(order) * share))])
    train = [i for i, m in enumerate(meta) if m["prompt"] not in held]
    val = [i for i, m in enumerate(meta) if m["prompt"] in held]
    return train, val


def fit(x: torch.Tensor, y: torch.Tensor, penalty: float, steps: int = 300) -> torch.Tensor:
    """Weights [D + 1] (bias last) of a class-balanced L2 logistic regression, by L-BFGS."""
    w = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    pos = float(y.sum())
    weight = torch.where(y, 0.5 / max(pos, 1.0), 0.5 / max(len(y) - pos, 1.0))
    opt = torch.optim.LBFGS([w], max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = x @ w[:-1] + w[-1]
        loss = (weight * torch.nn.functional.binary_cross_entropy_with_logits(
            logits, y.double(), reduction="none"
        )).sum() + penalty * (w[:-1] ** 2).sum()  # fmt: skip
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach()


def auc(scores: torch.Tensor, y: torch.Tensor) -> float:
    """ROC AUC: the chance a random important mismatch scores above a random unimportant one
    (ties count half)."""
    pos, neg = scores[y], scores[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).double().mean()
    ties = (pos[:, None] == neg[None, :]).double().mean()
    return float(greater + 0.5 * ties)


def trade(prob: torch.Tensor, y: torch.Tensor) -> list[dict[str, float]]:
    """Per threshold: the share of mismatches accepted (P(important) < threshold) and the share
    of the important ones among those let through."""
    out = []
    for t in THRESHOLDS:
        take = prob < t
        out.append(
            {
                "threshold": t,
                "accepted": float(take.double().mean()),
                "important_let_through": float((take & y).double().sum() / max(int(y.sum()), 1)),
            }
        )
    return out


def model_card(report: dict, verifier: str) -> str:
    """The judge's model card: what it reads, what it was trained on, how well it separates."""
    rows = "\n".join(
        f"| {t['threshold']:g} | {t['accepted']:.1%} | {t['important_let_through']:.1%} |"
        for t in report["trade"]
    )
    return f"""# Learned judge for the embedded pair

The `learned-judge` rule's classifier (AutoJudge, Garipov et al., arXiv 2504.20039): a
logistic regression on the verifier's final-norm hidden states at a drafted token (the row that
predicted it and the row after reading it, 2 × {report["hidden_size"]} numbers), giving
P(important), the chance that putting the draft's token in place of the verifier's changes
whether the answer is right. `cactus_core/maths/rules/learned_judge.py` reads `judge.json`
(or the file `CACTUS_LEARNED_JUDGE` names).

- Verifier: {verifier}; draft: the embedded feature draft (mismatches are its rejections).
- Data: `training/judge_tasks.py`, task prompts with checkable answers (arithmetic, one-word
  facts, yes/no, word tasks), none of them in the built-in task set the sweeps score on. Each
  prompt is decoded greedily with sps (k 4); every rejected draft is a mismatch, labelled
  important when the verifier's greedy continuation from the draft's token passes the
  prompt's check differently from its own answer (`training/mine_judge.py`).
- {report["mismatches"]} mismatches, {report["important"]} important; trained on
  {report["train_mismatches"]}, validated on {report["validation_mismatches"]} from
  {report["validation_prompts"]} prompts held out whole. Classes weighted to balance; the L2
  penalty ({report["penalty"]:g}) chosen by validation ROC AUC.
- Validation ROC AUC: {report["validation_auc"]:.3f}.

What a threshold trades on the validation mismatches (the rule keeps a mismatch when
P(important) < threshold):

| threshold | mismatches kept | important ones let through |
|---|---|---|
{rows}

Limits: the labels come from T = 0 answers of short tasks; the rule applies the judge to sps's
rejections at any temperature, and on open-ended text nothing checks an answer. The emitted
law is estimated from a decode (marked estimated, with its interval, wherever it is shown).

Made by:

    python -m training.mine_judge --out /work/data/judge/mined.pt --threads 1 --max-new 40
    python -m training.train_judge --mined /work/data/judge/mined.pt \\
        --export cactus_core/assets/judge
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mined", type=Path, required=True)
    ap.add_argument("--export", type=Path, default=None, help="write the judge folder here")
    ap.add_argument("--val-share", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data = torch.load(args.mined, weights_only=False)
    x, y, meta = data["features"].double(), data["important"], data["meta"]
    train, val = split_by_prompt(meta, args.val_share, args.seed)
    mean = x[train].mean(0)
    scale = x[train].std(0).clamp_min(1e-6)
    z = (x - mean) / scale
    fits = {}
    for penalty in PENALTIES:
        w = fit(z[train], y[train], penalty)
        fits[penalty] = (w, auc(z[val] @ w[:-1] + w[-1], y[val]))
        print(f"L2 {penalty:g}: validation AUC {fits[penalty][1]:.3f}", flush=True)
    best = max(fits, key=lambda pen: fits[pen][1])
    w, val_auc = fits[best]
    prob = torch.sigmoid(z[val] @ w[:-1] + w[-1])
    report = {
        "mismatches": len(y),
        "important": int(y.sum()),
        "train_mismatches": len(train),
        "validation_mismatches": len(val),
        "validation_prompts": len({meta[i]["prompt"] for i in val}),
        "penalty": best,
        "validation_auc": val_auc,
        "trade": trade(prob, y[val]),
        "pair": data["pair"],
        "hidden_size": x.shape[1] // 2,
    }
    print(json.dumps(report, indent=1))
    if args.export is not None:
        args.export.mkdir(parents=True, exist_ok=True)
        # Folded into one linear map of the raw features: P(important) = sigmoid(x·a + b).
        a = w[:-1] / scale
        b = float(w[-1] - (mean * a).sum())
        verifier = data["pair"].split("|")[0].removeprefix("verifier=").split("#")[0]
        Judge(a.float(), b, verifier).save(args.export / "judge.json", report=report)
        (args.export / "README.md").write_text(model_card(report, verifier))


if __name__ == "__main__":
    main()
