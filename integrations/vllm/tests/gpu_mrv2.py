"""The plugin on GPU vLLM's Model Runner V2: its Triton `rejection_sample` against the lab's
exact pi, as test_kernels.py checks V1's on the CPU. Needs CUDA and vLLM's CUDA build with the
plugin installed; benchmarks/gpu.sh runs it (`python integrations/vllm/tests/gpu_mrv2.py`).

Each check hands the patched function R one-draft requests of one (p, q) pair (each request
in its own slot with its own seed, temperature 1) and compares the emitted token with pi (χ²)
and the acceptance with Σ p(n)·a(n), with draft logits (a draft model's) and without
(one-hot: ngram's). δ = 0 must give the stock output token for token (V2's coins are a
function of each request's seed and position, so the same seeds give the same coins), and a
seeded request must repeat under a log-h rule (V2's own coins) and a pointwise one (the
plugin's, drawn from the same seed and position) whatever torch's global generator holds.
Prints one line per check and exits 1 if any failed.
"""

from __future__ import annotations

import sys

import torch
from helpers import chi2_pvalue, dirichlet

from cactus_core.maths.emitted import expected_acceptance
from cactus_core.maths.rules import make_rule

V, R = 64, 40_000
RULES = [
    ("sps", {}),
    ("cactus", {"delta": 0.5}),
    ("cactus-budget", {"budget": 0.05}),
    ("tas", {}),
    ("topk", {"k_top": 3}),
    ("interp", {"alpha": 0.5}),
]


def inputs(p: torch.Tensor, q: torch.Tensor, with_logits: bool, seed: int) -> dict:
    """Model Runner V2's rejection_sample arguments for R requests of one draft each."""
    dev = "cuda"
    g = torch.Generator().manual_seed(seed)
    n = torch.multinomial(p, R, replacement=True, generator=g)
    draft_sampled = torch.zeros(2 * R, dtype=torch.int32)
    draft_sampled[1::2] = n.int()  # row 2i judges the token fed at row 2i + 1
    slots = torch.arange(R)
    return {
        "target_logits": torch.log(q).expand(2 * R, V).contiguous().to(dev),
        "draft_logits": torch.log(p).expand(R, 1, V).contiguous().to(dev) if with_logits else None,
        "draft_sampled": draft_sampled.to(dev),
        "cu_num_logits": torch.arange(0, 2 * R + 1, 2, dtype=torch.int32, device=dev),
        "pos": torch.full((2 * R,), 100, dtype=torch.int64).to(dev)
        + torch.arange(2 * R).to(dev) % 2,
        "idx_mapping": slots.to(dev),
        "expanded_idx_mapping": slots.repeat_interleave(2).to(dev),
        "expanded_local_pos": torch.arange(2).repeat(R).int().to(dev),
        "temperature": torch.ones(R, dtype=torch.float32, device=dev),
        "seed": torch.randint(0, 2**62, (R,), generator=g).to(dev),
        "num_speculative_steps": 1,
    }


def check(sample, name: str, params: dict, with_logits: bool) -> bool:
    from cactus_vllm import request_rules
    from cactus_vllm.rules import plan

    rule = make_rule(name, **params)
    p, q = dirichlet(V, 1, seed=1)[0], dirichlet(V, 1, seed=2)[0]
    if not with_logits:  # ngram: the draft is one fixed token
        p = torch.nn.functional.one_hot(q.argsort(descending=True)[2], V).float()
    args = inputs(p, q, with_logits, seed=3)
    request_rules.SLOT_RULES.clear()
    request_rules.SLOT_RULES.update(dict.fromkeys(range(R), plan(rule)))
    sampled, num_sampled = sample(**args)
    emitted = sampled[:, 0].long().cpu()
    pi = rule.emitted(p.double(), q.double())
    pvalue = chi2_pvalue(torch.bincount(emitted, minlength=V), pi)
    accept = float(expected_acceptance(rule, p.double(), q.double()))
    measured = float((num_sampled.cpu() == 2).double().mean())
    sd = (accept * (1 - accept) / R) ** 0.5 + 1e-9
    ok = pvalue > 1e-4 and abs(measured - accept) < 4.5 * sd
    kind = "draft logits" if with_logits else "one-hot"
    print(f"{'ok  ' if ok else 'FAIL'} {rule.label:<24} {kind:<12} χ² p = {pvalue:.3g}, "
          f"acceptance {measured:.4f} (exact {accept:.4f})")  # fmt: skip
    return ok


def delta_zero_is_stock(sample) -> bool:
    from cactus_vllm import request_rules
    from cactus_vllm.rules import plan

    p, q = dirichlet(V, 1, seed=4)[0], dirichlet(V, 1, seed=5)[0]
    args = inputs(p, q, True, seed=6)
    request_rules.SLOT_RULES.clear()
    stock = sample.__wrapped__(**args)
    request_rules.SLOT_RULES.update(dict.fromkeys(range(R), plan(make_rule("cactus", delta=0.0))))
    ours = sample(**args)
    ok = all(torch.equal(a, b) for a, b in zip(stock, ours, strict=True))
    print(f"{'ok  ' if ok else 'FAIL'} cactus δ=0 equals the stock call token for token")
    return ok


def seeded_requests_repeat(sample) -> bool:
    from cactus_vllm import request_rules
    from cactus_vllm.rules import plan

    p, q = dirichlet(V, 1, seed=7)[0], dirichlet(V, 1, seed=8)[0]
    args = inputs(p, q, True, seed=9)
    ok = True
    for rule in (make_rule("cactus", delta=0.5), make_rule("topk", k_top=3)):
        request_rules.SLOT_RULES.clear()
        request_rules.SLOT_RULES.update(dict.fromkeys(range(R), plan(rule)))
        outs = []
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            fresh = {k: v.clone() if torch.is_tensor(v) else v for k, v in args.items()}
            outs.append(sample(**fresh))
        same = all(torch.equal(a, b) for a, b in zip(*outs, strict=True))
        print(f"{'ok  ' if same else 'FAIL'} {rule.label}: seeded requests repeat")
        ok &= same
    return ok


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    from cactus_vllm import plugin
    from vllm.v1.worker.gpu.spec_decode import rejection_sampler

    if not plugin.status():  # on the path but not pip-installed: no entry point to load
        print("cactus_vllm is not installed as a plugin here; registering it directly")
        plugin.register()
    status = plugin.status()
    print("cactus_vllm:", status)
    sample = rejection_sampler.rejection_sample
    if status.get("rules (Model Runner V2 sampler)") != "patched":
        print("FAIL the Model Runner V2 sampler is not patched")
        return 1
    results = [delta_zero_is_stock(sample), seeded_requests_repeat(sample)]
    for name, params in RULES:
        for with_logits in (True, False):
            results.append(check(sample, name, params, with_logits))
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
