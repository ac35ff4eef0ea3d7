"""What each of vLLM's paths hands the rules, checked against the installed vLLM 0.32.0: the
draft distribution p the plugin's kernels receive, what that makes of the exact pi, and the
coins (a seeded request repeats on every path).

| path | drafter | p the rules receive |
|---|---|---|
| V1 | draft model, greedy drafting (vLLM's default) | one-hot at the draft's argmax |
| V1 | draft model, `draft_sample_method: "probabilistic"` | softmax(draft logits / T) |
| V1 | ngram | one-hot at the drafted token |
| Model Runner V2 | draft model, greedy / probabilistic; ngram | the same three |

With a one-hot p at n a ratio rule accepts n with a(n) = min(1, h_n) and emits exactly h^(n),
so pi = h^(n*) with n* the draft's argmax, not the lab's pi for sampled drafts.
Model Runner V2's kernels need Triton; its wrapper is driven here with a stand-in for them.
"""

from __future__ import annotations

import types

import pytest
import torch
from cactus_vllm import dispatch, kernels, mrv2, request_rules
from cactus_vllm.rules import plan
from helpers import chi2_pvalue, dirichlet, metadata

from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import expected_acceptance
from cactus_core.maths.rules import make_rule

V = 8


@pytest.fixture(autouse=True)
def _no_metrics(monkeypatch):
    monkeypatch.setenv("CACTUS_VLLM_METRICS", "0")
    monkeypatch.delenv("CACTUS_VLLM_RULE", raising=False)


# -- what vLLM's drafters hand over ---------------------------------------------------------


def _sampling(temperature: torch.Tensor):
    return types.SimpleNamespace(
        all_greedy=False, all_random=True, temperature=temperature,
        top_k=torch.full_like(temperature, 2, dtype=torch.long), top_p=None,
    )  # fmt: skip


def test_v1_draft_model_hands_no_p_by_default_and_softmax_over_t_when_probabilistic():
    """vLLM's V1 draft-model proposer (SpecDecodeBaseProposer._sample_draft_tokens): with
    the default greedy drafting it drafts the argmax and returns no probabilities (the
    rejection sampler then treats the draft as one-hot); with "probabilistic" it samples and
    returns softmax(logits / T), ignoring top-k and top-p."""
    from vllm.config.speculative import SpeculativeConfig
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer as Proposer

    assert SpeculativeConfig.__dataclass_fields__["draft_sample_method"].default == "greedy"
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(1))
    temperature = torch.tensor([0.7, 1.0, 1.3])
    proposer = types.SimpleNamespace(
        _enable_probabilistic_draft_probs=False, use_heterogeneous_vocab=False,
        use_local_argmax_reduction=False, use_fp64_gumbel=False,
        model=types.SimpleNamespace(compute_logits=lambda h: h.clone()),
    )  # fmt: skip
    proposer._greedy_sample = lambda h: Proposer._greedy_sample(proposer, h)
    proposer._sample_from_logits = lambda x, m: Proposer._sample_from_logits(proposer, x, m)
    ids, probs = Proposer._sample_draft_tokens(proposer, logits, _sampling(temperature))
    assert probs is None and torch.equal(ids, logits.argmax(-1))
    proposer._enable_probabilistic_draft_probs = True
    ids, probs = Proposer._sample_draft_tokens(proposer, logits, _sampling(temperature))
    assert torch.allclose(probs, torch.softmax(logits / temperature[:, None], -1))
    assert (probs > 0).all()  # top-k 2 was not applied to p


def test_v1_ngram_hands_no_p():
    """The V1 runner takes draft probabilities only from a drafter with
    `take_last_draft_probs`; the ngram proposer has none, so its drafts reach the sampler
    without p (one-hot)."""
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

    assert not hasattr(NgramProposer, "take_last_draft_probs")


def test_model_runner_v2_greedy_draft_is_the_argmax():
    """Model Runner V2's draft model without draft logits (greedy, the default) drafts the
    argmax, and its kernels then read p as one-hot (`draft_log_prob = 0`)."""
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    logits = torch.randn(4, V, generator=torch.Generator().manual_seed(2))
    speculator = types.SimpleNamespace(
        use_local_argmax_reduction=False,
        compute_draft_logits=lambda h, step: h,
        _maybe_predict_acceptance=lambda *a: None,
    )
    drafted = DraftModelSpeculator.sample_draft(speculator, logits, *[None] * 5, None)
    assert torch.equal(drafted, logits.argmax(-1))


# -- what the plugin's kernels receive on each path -----------------------------------------


def _capture_p(monkeypatch) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    real = kernels.log_h_logits

    def log_h_logits(rule, logits, p, n):
        seen.append(p.clone())
        return real(rule, logits, p, n)

    monkeypatch.setattr(dispatch.kernels, "log_h_logits", log_h_logits)
    return seen


@pytest.mark.parametrize("with_probs", [True, False], ids=["draft probs", "none"])
def test_v1_kernels_receive_the_draft_probs_or_one_hot(vllm_sampler, monkeypatch, with_probs):
    seen = _capture_p(monkeypatch)
    p = dirichlet(V, 3, seed=3)
    n = torch.tensor([1, 4, 6])
    planned = plan(make_rule("cactus", delta=0.5))
    vllm_sampler.rejection_sample(
        n.int(), [3], 3, torch.tensor([3], dtype=torch.int32),
        p if with_probs else None, torch.log(dirichlet(V, 3, seed=4)),
        torch.zeros(1, 1, dtype=torch.int64), metadata(torch.ones(1), {0: planned}),
    )  # fmt: skip
    want = p if with_probs else torch.nn.functional.one_hot(n, V).float()
    assert len(seen) == 1 and torch.equal(seen[0], want)


def v2_inputs(reqs: int, q: torch.Tensor, n: torch.Tensor, draft_logits, seeds, step: int = 0):
    """Model Runner V2's rejection_sample arguments for `reqs` one-draft requests in slots
    0..reqs−1 (row 2i judges n[i], row 2i + 1 is its bonus row) at temperature 1."""
    draft_sampled = torch.zeros(2 * reqs, dtype=torch.int32)
    draft_sampled[1::2] = n.int()
    slots = torch.arange(reqs)
    return {
        "target_logits": torch.log(q).expand(2 * reqs, V).contiguous(),
        "draft_logits": draft_logits,
        "draft_sampled": draft_sampled,
        "cu_num_logits": torch.arange(0, 2 * reqs + 1, 2, dtype=torch.int32),
        "pos": torch.arange(2 * reqs) % 2 + 100 + step,
        "idx_mapping": slots,
        "expanded_idx_mapping": slots.repeat_interleave(2),
        "expanded_local_pos": torch.arange(2).repeat(reqs).int(),
        "temperature": torch.ones(reqs),
        "seed": seeds,
        "num_speculative_steps": 1,
    }


def v2_stock(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
             expanded_idx_mapping, expanded_local_pos, temperature, seed,
             num_speculative_steps, synthetic_conditional_rates=None, use_fp64=False,
             use_block_verification=False, contexts=None, watermarking=None,
             watermarking_skip_mask=None, watermark_key=None):  # fmt: skip
    """A stand-in for V2's Triton kernels: every request emits token 0 once."""
    reqs = idx_mapping.shape[0]
    sampled = torch.zeros(reqs, num_speculative_steps + 1, dtype=torch.int64)
    return sampled, torch.ones(reqs, dtype=torch.int32)


@pytest.mark.parametrize("with_logits", [True, False], ids=["draft logits", "none"])
def test_model_runner_v2_kernels_receive_softmax_over_t_or_one_hot(monkeypatch, with_logits):
    seen = _capture_p(monkeypatch)
    q, n = dirichlet(V, 1, seed=5)[0], torch.tensor([2, 5])
    draft_logits = torch.randn(2, 1, V, generator=torch.Generator().manual_seed(6))
    args = v2_inputs(2, q, n, draft_logits if with_logits else None, torch.tensor([1, 2]))
    args["temperature"] = torch.tensor([0.7, 1.3])
    monkeypatch.setattr(
        request_rules, "SLOT_RULES", dict.fromkeys(range(2), plan(make_rule("cactus", delta=1)))
    )
    mrv2.wrap(v2_stock)(**args)
    if with_logits:
        want = torch.softmax(draft_logits[:, 0] / args["temperature"][:, None], -1)
    else:
        want = torch.nn.functional.one_hot(n, V).float()
    assert len(seen) == 1 and torch.allclose(seen[0], want)


# -- what a one-hot draft does to pi ---------------------------------------------------------


WORKED = [make_rule("sps"), make_rule("cactus", delta=0.21), make_rule("cactus-exact", delta=0.21)]


@pytest.mark.parametrize("rule", WORKED, ids=lambda r: r.label)
def test_a_one_hot_draft_emits_h_of_the_drafted_token(rule):
    """The worked example (DESIGN.md): q = (.30, .35, .35), p = (.05, .80, .15). Greedy
    drafting drafts n* = "generate" (p's argmax) and hands no p: the rule accepts it with
    min(1, h_n*) and emits h^(n*) itself; cactus-exact's KL(pi ‖ q) is then exactly delta."""
    q = torch.tensor([0.30, 0.35, 0.35], dtype=torch.float64)
    p = torch.tensor([0.05, 0.80, 0.15], dtype=torch.float64)
    one_hot = torch.nn.functional.one_hot(p.argmax(), 3).double()
    h = rule.adjusted_target(q[None], one_hot[None], p.argmax()[None])[0]
    pi = rule.emitted(one_hot, q)
    assert torch.allclose(pi, h, atol=1e-9)
    assert float(expected_acceptance(rule, one_hot, q)) == pytest.approx(min(1.0, float(h[1])))
    greedy, sampled = (float(expected_acceptance(rule, x, q)) for x in (one_hot, p))
    want = {"sps": (0.35, 0.55), "cactus δ=0.21": (0.659, 0.859)}.get(rule.label)
    if want is not None:
        assert (greedy, sampled) == pytest.approx(want, abs=1e-3)
    if rule.name == "cactus-exact":
        assert float(kl(pi, q)) == pytest.approx(0.21, abs=1e-6)


def test_v1_greedy_drafting_follows_h_of_the_argmax(vllm_sampler):
    """vLLM's V1 kernels on a draft model's greedy drafts (n = argmax p, no draft probs):
    the emitted token follows h^(n) (χ²) and acceptance is h_n, where the lab's pi for drafts
    sampled from p is another distribution."""
    rule = make_rule("cactus", delta=0.5)
    p, q = dirichlet(V, 1, seed=7)[0], dirichlet(V, 1, seed=8)[0]
    n_star = p.argmax()
    rows = 12_000
    torch.manual_seed(9)
    out = vllm_sampler.rejection_sample(
        torch.full((rows,), int(n_star), dtype=torch.int32), [1] * rows, 1,
        torch.arange(1, rows + 1, dtype=torch.int32), None,
        torch.log(q).expand(rows, V).contiguous(), torch.zeros(rows, 1, dtype=torch.int64),
        metadata(torch.ones(rows), dict.fromkeys(range(rows), plan(rule))),
    )  # fmt: skip
    one_hot = torch.nn.functional.one_hot(n_star, V).double()
    h = rule.adjusted_target(q.double()[None], one_hot[None], n_star[None])[0]
    counts = torch.bincount(out[:, 0].long(), minlength=V)
    assert chi2_pvalue(counts, h) > 1e-4
    accepted = float((out[:, 1] != -1).double().mean())
    assert abs(accepted - float(h[n_star])) < 4.5 * (0.25 / rows) ** 0.5
    sampled_pi = rule.emitted(p.double(), q.double())
    assert (sampled_pi - h).abs().sum() > 0.1  # the lab's pi for sampled drafts differs


# -- coins ----------------------------------------------------------------------------------


def _v2_pointwise(seeds: torch.Tensor, step: int = 0, reqs: int = 64) -> torch.Tensor:
    """The first emitted token of `reqs` topk requests through V2's wrapper."""
    p, q = dirichlet(V, 1, seed=10)[0], dirichlet(V, 1, seed=11)[0]
    n = torch.multinomial(p, reqs, replacement=True, generator=torch.Generator().manual_seed(12))
    args = v2_inputs(reqs, q, n, torch.log(p).expand(reqs, 1, V).contiguous(), seeds, step)
    sampled, num_sampled = mrv2.wrap(v2_stock)(**args)
    return torch.cat([sampled, num_sampled[:, None].long()], -1)


def test_model_runner_v2_seeded_requests_repeat(monkeypatch):
    """V2's pointwise rules draw each request's coins from its seed and position, as V2's
    own kernels do: the same seeds give the same tokens whatever torch's global generator
    holds; another seed or the next step's position gives other coins."""
    reqs = 64
    monkeypatch.setattr(
        request_rules, "SLOT_RULES", dict.fromkeys(range(reqs), plan(make_rule("topk", k_top=3)))
    )
    seeds = torch.randint(-(2**62), 2**62, (reqs,), generator=torch.Generator().manual_seed(13))
    torch.manual_seed(1)
    first = _v2_pointwise(seeds)
    torch.manual_seed(2)
    assert torch.equal(_v2_pointwise(seeds), first)
    other = seeds.clone()
    other[::2] += 1
    again = _v2_pointwise(other)
    assert torch.equal(again[1::2], first[1::2])  # unchanged seeds, unchanged tokens
    assert not torch.equal(again[::2], first[::2])
    assert not torch.equal(_v2_pointwise(seeds, step=1), first)


def test_model_runner_v2_seeded_coins_follow_pi(monkeypatch):
    """Requests with distinct seeds are independent draws: the first emitted token of 12,000
    topk requests follows the rule's exact pi (χ²)."""
    reqs = 12_000
    rule = make_rule("topk", k_top=3)
    monkeypatch.setattr(request_rules, "SLOT_RULES", dict.fromkeys(range(reqs), plan(rule)))
    seeds = torch.randint(-(2**62), 2**62, (reqs,), generator=torch.Generator().manual_seed(14))
    out = _v2_pointwise(seeds, reqs=reqs)
    p, q = dirichlet(V, 1, seed=10)[0], dirichlet(V, 1, seed=11)[0]
    pi = rule.emitted(p.double(), q.double())
    assert chi2_pvalue(torch.bincount(out[:, 0], minlength=V), pi) > 1e-4


def test_v1_seeded_requests_repeat(vllm_sampler):
    """V1's pointwise rules draw from each request's own generator (its seed)."""
    p, q = dirichlet(V, 1, seed=15)[0], dirichlet(V, 1, seed=16)[0]
    reqs = 64
    n = torch.multinomial(p, reqs, replacement=True, generator=torch.Generator().manual_seed(17))
    planned = dict.fromkeys(range(reqs), plan(make_rule("topk", k_top=3)))

    def run(global_seed: int) -> torch.Tensor:
        torch.manual_seed(global_seed)
        generators = {i: torch.Generator().manual_seed(100 + i) for i in range(reqs)}
        return vllm_sampler.rejection_sample(
            n.int(), [1] * reqs, 1, torch.arange(1, reqs + 1, dtype=torch.int32),
            p.expand(reqs, V).contiguous(), torch.log(q).expand(reqs, V).contiguous(),
            torch.zeros(reqs, 1, dtype=torch.int64),
            metadata(torch.ones(reqs), planned, generators),
        )  # fmt: skip

    assert torch.equal(run(1), run(2))
