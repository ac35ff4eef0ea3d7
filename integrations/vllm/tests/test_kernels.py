"""vLLM's own V1 `rejection_sample`, patched by the plugin, against the lab's exact emitted
distribution pi, on vLLM's CPU kernels.

Each test hands `rejection_sample` many one-draft requests of one (p, q) pair and compares
the emitted token with pi (χ²) and the acceptance with Σ p(n)·a(n), for drafts with
probabilities (a draft model's) and without (one-hot: ngram's).
"""

from __future__ import annotations

import pytest
import torch
from cactus_vllm.rules import LOG_H, POINTWISE, STOCK, plan
from helpers import chi2_pvalue, dirichlet, metadata

from cactus_core.maths.emitted import expected_acceptance
from cactus_core.maths.rules import make_rule

V = 8
ROWS = 12_000
RULES = [
    ("sps", {}),
    ("cactus", {"delta": 0.5}),
    ("cactus-exact", {"delta": 0.3}),
    ("cactus-budget", {"budget": 0.05}),
    ("cactus-adaptive", {"delta": 0.5}),
    ("tas", {}),
    ("topk", {"k_top": 3}),
    ("relaxed-topk", {"K": 3, "delta_r": 0.2}),
    ("interp", {"alpha": 0.5}),
    ("cascade", {"alpha": 0.3}),
    ("fuzzy", {"T": 0.3}),
    ("optimal", {"budget": 0.1}),
    ("optimal-price", {"t": 1.0}),
]


@pytest.fixture(autouse=True)
def _no_metrics(monkeypatch):
    monkeypatch.setenv("CACTUS_VLLM_METRICS", "0")  # counted in test_engine.py
    monkeypatch.delenv("CACTUS_VLLM_RULE", raising=False)


def one_position(sampler, planned, p, q, n, draft_probs, temperature=None):
    """rejection_sample over ROWS one-draft requests -> its output [ROWS, 2]."""
    rows = n.shape[0]
    temperature = torch.ones(rows) if temperature is None else temperature
    return sampler.rejection_sample(
        n.int(),
        [1] * rows,
        1,
        torch.arange(1, rows + 1, dtype=torch.int32),
        draft_probs,
        torch.log(q).expand(rows, V).contiguous(),
        torch.zeros(rows, 1, dtype=torch.int64),
        metadata(temperature, {i: planned for i in range(rows)} if planned else None),
    )


def check_law(out, pi, accept, label):
    emitted = out[:, 0].long()
    counts = torch.bincount(emitted, minlength=V)
    pvalue = chi2_pvalue(counts, pi)
    assert pvalue > 1e-4, f"{label}: emitted tokens differ from the exact pi (p = {pvalue:.2e})"
    accepted = (out[:, 1] != -1).double().mean()
    sd = (accept * (1 - accept) / out.shape[0]) ** 0.5 + 1e-9
    assert abs(accepted - accept) < 4.5 * sd, f"{label}: acceptance {accepted} vs {accept}"


@pytest.mark.parametrize(("name", "params"), RULES, ids=[r[0] for r in RULES])
def test_drafts_with_probabilities_follow_pi(vllm_sampler, name, params):
    rule = make_rule(name, **params)
    p, q = dirichlet(V, 1, seed=1)[0], dirichlet(V, 1, seed=2)[0]
    n = torch.multinomial(p, ROWS, replacement=True, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(4)
    out = one_position(vllm_sampler, plan(rule), p, q, n, p.expand(ROWS, V).contiguous())
    pi = rule.emitted(p.double(), q.double())
    check_law(out, pi, float(expected_acceptance(rule, p.double(), q.double())), name)


@pytest.mark.parametrize(("name", "params"), RULES, ids=[r[0] for r in RULES])
def test_one_hot_drafts_follow_pi(vllm_sampler, name, params):
    """ngram's case: no draft probabilities, p is one-hot at the drafted token."""
    rule = make_rule(name, **params)
    q = dirichlet(V, 1, seed=5)[0]
    drafted = int(q.argsort(descending=True)[2])  # neither q's mode nor its tail
    p = torch.nn.functional.one_hot(torch.tensor(drafted), V).float()
    n = torch.full((ROWS,), drafted)
    torch.manual_seed(6)
    out = one_position(vllm_sampler, plan(rule), p, q, n, None)
    pi = rule.emitted(p.double(), q.double())
    check_law(out, pi, float(expected_acceptance(rule, p.double(), q.double())), name)


def test_paths():
    """Which path each rule takes: the Cactus family through log h, thresholds in torch."""
    assert plan(make_rule("cactus", delta=0.0)).path == STOCK
    assert plan(make_rule("sps")).path == STOCK
    assert plan(make_rule("cactus", delta=0.1)).path == LOG_H
    assert plan(make_rule("cactus-budget", budget=0.1)).path == LOG_H
    assert plan(make_rule("topk")).path == POINTWISE


@pytest.mark.parametrize("with_probs", [True, False])
def test_delta_zero_is_the_stock_call(vllm_sampler, with_probs):
    """δ = 0 (and no rule at all) gives vLLM's own output, token for token, on the same coins."""
    p, q = dirichlet(V, 1, seed=7)[0], dirichlet(V, 1, seed=8)[0]
    n = torch.multinomial(p, 2000, replacement=True, generator=torch.Generator().manual_seed(9))
    probs = p.expand(2000, V).contiguous() if with_probs else None
    outs = []
    for planned in (None, plan(make_rule("cactus", delta=0.0)), plan(make_rule("sps"))):
        torch.manual_seed(10)
        outs.append(one_position(vllm_sampler, planned, p, q, n, probs))
    torch.manual_seed(10)
    stock = vllm_sampler.rejection_sample.__wrapped__
    meta = metadata(torch.ones(2000))
    logits = torch.log(q).expand(2000, V).contiguous()
    cu = torch.arange(1, 2001, dtype=torch.int32)
    bonus = torch.zeros(2000, 1, dtype=torch.int64)
    outs.append(stock(n.int(), [1] * 2000, 1, cu, probs, logits, bonus, meta))
    for out in outs[1:]:
        assert torch.equal(out, outs[0])


def test_greedy_rows_and_padded_drafts_are_untouched(vllm_sampler):
    """Under δ = 1 for every request: greedy rows and padded drafts (−1) come out exactly as
    vLLM's own call gives them on the same coins (the rule changes only the other rows), and
    greedy rows are exact match with q's argmax."""
    q = dirichlet(V, 1, seed=11)[0]
    rows = 8000
    n = torch.full((rows,), int(q.argsort()[3]))
    n[rows // 2 :] = -1
    temperature = torch.ones(rows)
    temperature[: rows // 4] = 0.0  # greedy
    torch.manual_seed(12)
    out = one_position(
        vllm_sampler, plan(make_rule("cactus", delta=1.0)), q, q, n, None, temperature
    )
    torch.manual_seed(12)
    stock = one_position(vllm_sampler, None, q, q, n, None, temperature)
    greedy, random, padded = (
        slice(0, rows // 4),
        slice(rows // 4, rows // 2),
        slice(rows // 2, None),
    )
    assert torch.equal(out[greedy], stock[greedy]) and torch.equal(out[padded], stock[padded])
    assert bool((out[greedy, 0] == int(q.argmax())).all())
    assert (out[random, 1] != -1).sum() > (stock[random, 1] != -1).sum()  # δ = 1 accepts more


def test_requests_with_different_rules_share_a_batch(vllm_sampler):
    """One batch: half the requests under cactus δ = 0.5 (log h), half under topk (torch),
    with three drafts each; the first emitted token of each half follows its own pi."""
    p, q = dirichlet(V, 1, seed=13)[0], dirichlet(V, 1, seed=14)[0]
    rules = [make_rule("cactus", delta=0.5), make_rule("topk", k_top=3)]
    reqs, k = 12_000, 3
    n = torch.multinomial(
        p, reqs * k, replacement=True, generator=torch.Generator().manual_seed(15)
    )
    planned = {i: plan(rules[i % 2]) for i in range(reqs)}
    torch.manual_seed(16)
    out = vllm_sampler.rejection_sample(
        n.int(),
        [k] * reqs,
        k,
        torch.arange(k, reqs * k + 1, k, dtype=torch.int32),
        p.expand(reqs * k, V).contiguous(),
        torch.log(q).expand(reqs * k, V).contiguous(),
        torch.full((reqs, 1), 7, dtype=torch.int64),
        metadata(torch.ones(reqs), planned),
    )
    for half, rule in enumerate(rules):
        rows = out[half::2]
        emitted = rows[:, 0].long()
        pi = rule.emitted(p.double(), q.double())
        assert chi2_pvalue(torch.bincount(emitted, minlength=V), pi) > 1e-4, rule.name
        full = (rows != -1).sum(-1) == k + 1
        assert bool((rows[full, k] == 7).all())  # every draft passed: vLLM's bonus token
        assert bool(((rows != -1).sum(-1) >= 1).all())
