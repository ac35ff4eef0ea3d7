"""Which lossless multi-candidate verification to use at a tree's node: acceptance compared.

At one node with m candidates, the chance that one of them is accepted (the rest of the tree
then continues from it), on the synthetic rows of `bench_synthetic_efficiency` (256 positions,
V = 2,000, drafts that track q with unit noise at temperatures 0.5–2), for

- rrs-wor: recursive rejection sampling with candidates drawn without replacement
  (`maths.tree.verify_tree_batch`, what the lab uses), Monte Carlo;
- rrs-iid: candidates drawn i.i.d. from p, each judged min(1, r_i/p) against the residual with
  p itself never renormalised (SpecInfer's multi-step speculative sampling, arXiv 2305.09781),
  Monte Carlo;
- k-seq: SpecTr's K-SEQ for i.i.d. candidates (arXiv 2310.15141), exact: accept candidate i with
  min(1, q/(rho·p)), with the smallest rho ≥ 1 whose residual stays a distribution,
  acceptance 1 − (1 − beta)^m, beta = sum min(p, q/rho).

All three are lossless, so what separates them is this number. i.i.d. candidates repeat
tokens, and a repeat is a wasted node of the tree (the verifier scores nodes, not draws): the
distinct column is the expected number of distinct tokens among m i.i.d. draws.

`--real` takes the rows from the embedded pair instead: the verifier samples 48 tokens (T 0.7)
after each of the last 4 chat prompts, and p (the 3-layer draft) and q (the verifier) at those
positions, at T 0.7, are kept on the 1,024 tokens of largest max(p, q) and renormalised.

Prints one line per m with the mean over positions, and the paired difference of the two
Monte Carlo methods with its standard error.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_tree_verification.py [--real]
"""

from __future__ import annotations

import torch

from benchmarks.bench_synthetic_efficiency import synthetic_rows
from cactus_core.maths.rules import make_rule
from cactus_core.maths.sampling import inverse_cdf_
from cactus_core.maths.tree import sample_without_replacement, verify_tree_batch

DRAWS = 400  # trees per position
CHUNK = 8  # positions per batch


def rrs_without_replacement(p: torch.Tensor, q: torch.Tensor, m: int, gen) -> torch.Tensor:
    """Per position [n]: the fraction of DRAWS stars of m children with one accepted."""
    out = []
    rule = make_rule("sps")
    for i in range(0, p.shape[0], CHUNK):
        pc, qc = p[i : i + CHUNK], q[i : i + CHUNK]  # [c, V]
        c, v = pc.shape
        rows_p = pc.repeat_interleave(DRAWS, 0)  # [c·D, V]
        rows_q = qc.repeat_interleave(DRAWS, 0)
        tokens = sample_without_replacement(rows_p, count=m, generator=gen)  # [c·D, m]
        both = (rows_p[:, None].expand(-1, m + 1, v), rows_q[:, None].expand(-1, m + 1, v))
        res = verify_tree_batch(rule, tokens, [-1] * m, *both, generator=gen, validate=False)
        out.append((res.num_accepted > 0).double().view(c, DRAWS).mean(1))
    return torch.cat(out)


def rrs_iid(p: torch.Tensor, q: torch.Tensor, m: int, gen) -> torch.Tensor:
    """Per position [n]: i.i.d. candidates, min(1, r_i(c)/p(c)), r_{i+1} = (r_i − p)+ normalised."""
    out = []
    for i in range(0, p.shape[0], CHUNK):
        rows_p = p[i : i + CHUNK].repeat_interleave(DRAWS, 0)  # [B, V]
        r = q[i : i + CHUNK].repeat_interleave(DRAWS, 0)
        b = rows_p.shape[0]
        accepted = torch.zeros(b, dtype=torch.bool)
        for _ in range(m):
            coins = torch.rand(b, generator=gen, dtype=torch.float64)
            c = inverse_cdf_(rows_p.clone(), coins)[:, None]  # [B, 1]
            a = (r.gather(1, c) / rows_p.gather(1, c)).clamp_max(1.0)[:, 0]
            accepted |= torch.rand(b, generator=gen, dtype=torch.float64) < a
            w = (r - rows_p).clamp_min(0.0)
            total = w.sum(-1, keepdim=True)
            r = torch.where(total > 0, w / total.clamp_min(1e-300), r)
        out.append(accepted.double().view(-1, DRAWS).mean(1))
    return torch.cat(out)


def k_seq(p: torch.Tensor, q: torch.Tensor, m: int) -> torch.Tensor:
    """Per position [n]: SpecTr's K-SEQ acceptance 1 − (1 − beta)^m at the smallest feasible
    rho in [1, m] (feasible: 1 − (1 − beta)^m ≤ rho·beta, by bisection)."""

    def gap(rho: torch.Tensor) -> torch.Tensor:
        beta = torch.minimum(p, q / rho[:, None]).sum(-1)
        return rho * beta - (1 - (1 - beta) ** m)

    lo = torch.ones(p.shape[0], dtype=p.dtype)
    hi = torch.full_like(lo, float(m))
    ok = gap(lo) >= 0
    for _ in range(60):
        mid = (lo + hi) / 2
        good = gap(mid) >= 0
        hi = torch.where(good, mid, hi)
        lo = torch.where(good, lo, mid)
    rho = torch.where(ok, torch.ones_like(hi), hi)
    beta = torch.minimum(p, q / rho[:, None]).sum(-1)
    return 1 - (1 - beta) ** m


def real_rows(prompts: int = 4, tokens: int = 48, keep: int = 1024):
    """(p, q) [n, keep] from the embedded pair at T 0.7 (module docstring)."""
    import json
    from pathlib import Path

    from cactus_core.engine.loading.models import load_pair
    from cactus_core.maths.sampling import logits_to_probs

    pair = load_pair()
    lines = Path("cactus_core/data/chat_prompts.jsonl").read_text().splitlines()[-prompts:]
    ps, qs = [], []
    torch.manual_seed(0)
    with torch.inference_mode():
        for line in lines:
            ids = torch.tensor([pair.encode_prompt(json.loads(line)["prompt"])])
            out = pair.verifier.generate(
                ids, do_sample=True, temperature=0.7, top_p=1.0, top_k=0, max_new_tokens=tokens
            )
            cut = slice(ids.shape[1] - 1, out.shape[1] - 1)  # rows predicting the new tokens
            vocab = pair.draft.config.vocab_size
            for model, acc in ((pair.draft, ps), (pair.verifier, qs)):
                logits = model(out).logits[0, cut, :vocab].double()
                acc.append(logits_to_probs(logits, 0.7))
    p, q = torch.cat(ps), torch.cat(qs)
    top = torch.maximum(p, q).topk(keep, -1).indices
    p, q = p.gather(1, top), q.gather(1, top)
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def main() -> None:
    import sys

    torch.set_num_threads(1)
    p, q = real_rows() if "--real" in sys.argv else synthetic_rows()
    gen = torch.Generator().manual_seed(0)
    print(f"{p.shape[0]} positions, V = {p.shape[1]}, {DRAWS} draws per position")
    for m in (1, 2, 3, 4):
        wor = rrs_without_replacement(p, q, m, gen)
        iid = rrs_iid(p, q, m, gen)
        kseq = k_seq(p, q, m)
        distinct = float((1 - (1 - p) ** m).sum(-1).mean())

        diff = wor - iid
        se = float(diff.std()) / diff.numel() ** 0.5
        print(
            f"m={m}: rrs-wor {wor.mean():.4f} | rrs-iid {iid.mean():.4f} | k-seq {kseq.mean():.4f}"
            f" | distinct of m i.i.d. {distinct:.2f}"
            f" | wor − iid {float(diff.mean()):+.4f} ± {se:.4f} (paired standard error)"
        )


if __name__ == "__main__":
    main()
