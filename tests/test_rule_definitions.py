"""Each relaxed rule does what its definition says (the χ² tests against pi live in
test_verify.py; this checks pi and a(n) against the formulas themselves)."""

from __future__ import annotations

import math

import pytest
import torch
from distributions import dirichlet

from cactus_core.maths.divergence import entropy, js_divergence, kl
from cactus_core.maths.emitted import expected_acceptance
from cactus_core.maths.limit import LIMIT_T_GRID, limit_sums, optimal_target
from cactus_core.maths.rules import make_rule


def rows(n: int, v: int, seed: int, conc: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    return dirichlet(v, (n,), seed=seed, conc=conc), dirichlet(v, (n,), seed=seed + 1, conc=conc)


def test_optimal_price_is_the_clip_at_one_price() -> None:
    p, q = rows(64, 40, seed=1)
    rule = make_rule("optimal-price", t=0.7)
    b, a = rule.position_stats(q, p)
    torch.testing.assert_close(a, b * math.exp(0.7))
    pi = rule.emitted(p, q)
    torch.testing.assert_close(pi.sum(-1), torch.ones(64, dtype=pi.dtype))
    torch.testing.assert_close(pi, (q * (p / q).clamp(b[:, None], a[:, None])).to(pi.dtype))
    # each row's pi is the most-accepting one within its own KL: optimal at that budget
    budget = kl(pi, q)
    torch.testing.assert_close(pi, optimal_target(p, q, budget), atol=1e-6, rtol=1e-5)


def test_optimal_price_zero_is_lossless_and_large_is_the_draft() -> None:
    p, q = rows(16, 30, seed=2)
    torch.testing.assert_close(make_rule("optimal-price", t=0.0).emitted(p, q), q)
    torch.testing.assert_close(make_rule("optimal-price", t=80.0).emitted(p, q), p)


@pytest.mark.parametrize("t", [0.1, 0.5, 1.0, 3.0])
def test_optimal_price_reaches_the_limit_at_its_own_mean_kl(t: float) -> None:
    """Pooled over positions, (mean KL, mean acceptance) of one price is a point of the limit
    curve, so the curve read at its mean KL gives its acceptance (the curve is piecewise linear
    between grid prices, which can only understate the limit)."""
    p, q = rows(200, 50, seed=3)
    rule = make_rule("optimal-price", t=t)
    pi = rule.emitted(p, q)
    mean_kl = float(kl(pi, q).mean())
    acc = float(expected_acceptance(rule, p, q).mean())
    assert acc == pytest.approx(float(torch.minimum(p, pi).sum(-1).mean()), rel=1e-6)
    limit = limit_sums(p, q).curve().at(mean_kl)
    assert acc == pytest.approx(limit, rel=1e-3)
    assert min(abs(t - g) for g in LIMIT_T_GRID) < 0.1  # the grid is dense where t lives


def test_cactus_adaptive_scales_delta_by_the_entropy() -> None:
    p, q = rows(32, 20, seed=4)
    rule = make_rule("cactus-adaptive", delta=0.8)
    (delta_t,) = rule.position_stats(q, p)
    torch.testing.assert_close(delta_t, 0.8 * entropy(q))
    n = torch.multinomial(p, 1, generator=torch.Generator().manual_seed(0))[:, 0]
    for i in range(4):
        plain = make_rule("cactus", delta=float(delta_t[i]))
        torch.testing.assert_close(
            rule.accept_probs(q[i], p[i], n[i]), plain.accept_probs(q[i], p[i], n[i])
        )
        torch.testing.assert_close(rule.emitted(p[i], q[i]), plain.emitted(p[i], q[i]))
    # a certain verifier (entropy 0) gets no budget: sps
    one_hot = torch.nn.functional.one_hot(torch.tensor([3]), 20).double()[0]
    torch.testing.assert_close(rule.emitted(p[0], one_hot), one_hot)


def test_cascade_defers_to_a_confident_draft() -> None:
    confident = torch.tensor([0.85, 0.1, 0.05], dtype=torch.float64)
    unsure = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    rule = make_rule("cascade", alpha=0.2)  # defer where max p ≥ 0.8
    torch.testing.assert_close(rule.emitted(confident, q), confident)
    torch.testing.assert_close(rule.emitted(unsure, q), q)
    assert float(rule.accept_probs(q, confident, torch.tensor(2))) == 1.0
    torch.testing.assert_close(
        rule.accept_probs(q, unsure, torch.tensor(0)), torch.tensor(0.4, dtype=torch.float64)
    )


def test_deferral_renormalises_the_draft_on_the_verifiers_support() -> None:
    p = torch.tensor([0.9, 0.06, 0.04], dtype=torch.float64)
    q = torch.tensor([0.0, 0.7, 0.3], dtype=torch.float64)
    pi = make_rule("cascade", alpha=0.5).emitted(p, q)
    torch.testing.assert_close(pi, torch.tensor([0.0, 0.6, 0.4], dtype=torch.float64))
    # the draft's mass entirely off q's support: no deferral possible
    p_off = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(make_rule("cascade", alpha=1.0).emitted(p_off, q), q)


def test_js_divergence_and_fuzzy_threshold() -> None:
    p, q = rows(8, 12, seed=5)
    m = 0.5 * (p + q)
    torch.testing.assert_close(js_divergence(p, q), 0.5 * kl(p, m) + 0.5 * kl(q, m))
    js = js_divergence(p, q)
    threshold = float(js.median())
    pi = make_rule("fuzzy", T=threshold).emitted(p, q)
    near = js <= threshold
    torch.testing.assert_close(pi[near], p[near])
    torch.testing.assert_close(pi[~near], q[~near])
    assert float(js_divergence(p, 1.0 * p).abs().max()) < 1e-12
    assert float(js.max()) <= math.log(2)


def test_relaxed_topk_accepts_exactly_its_set() -> None:
    q = torch.tensor([0.4, 0.3, 0.2, 0.08, 0.02], dtype=torch.float64)
    p = torch.full((5,), 0.2, dtype=torch.float64)
    rule = make_rule("relaxed-topk", delta_r=0.15, K=4)  # q ≥ 0.25 and in the top 4: {0, 1}
    a = rule.accept_probs_all(p, q)
    assert a.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    in_set = torch.tensor([1.0, 1.0, 0, 0, 0], dtype=torch.float64)
    torch.testing.assert_close(rule.emitted(p, q), p * in_set + 0.6 * q)
    # K bites before delta_r
    assert make_rule("relaxed-topk", delta_r=1.0, K=2).accept_probs_all(p, q).tolist() == [
        1.0,
        1.0,
        0.0,
        0.0,
        0.0,
    ]
    # delta_r = 0: only q's argmax
    assert make_rule("relaxed-topk", delta_r=0.0, K=5).accept_probs_all(p, q).tolist()[0] == 1.0
    assert sum(make_rule("relaxed-topk", delta_r=0.0, K=5).accept_probs_all(p, q).tolist()) == 1.0


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("optimal-price", {"t": 0.0}, {"t": 3.0}),
        ("cactus-adaptive", {"delta": 0.0}, {"delta": 2.0}),
        ("cascade", {"alpha": 0.0}, {"alpha": 0.9}),
        ("fuzzy", {"T": 0.0}, {"T": 0.5}),
        ("relaxed-topk", {"delta_r": 0.0}, {"delta_r": 0.5}),
    ],
)
def test_more_relaxed_settings_accept_more(name: str, low: dict, high: dict) -> None:
    p, q = rows(300, 30, seed=6, conc=0.3)
    lo = float(expected_acceptance(make_rule(name, **low), p, q).mean())
    hi = float(expected_acceptance(make_rule(name, **high), p, q).mean())
    assert hi > lo
    if name in ("optimal-price", "cactus-adaptive"):  # their lowest setting is sps
        sps = float(expected_acceptance(make_rule("sps"), p, q).mean())
        assert lo == pytest.approx(sps, abs=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_blocked_row_sums_match_the_plain_formulas(dtype: torch.dtype) -> None:
    """entropy and js_divergence work block by block over rows (with one reused
    buffer); they agree with the one-line formulas, zeros included, across block edges."""
    p, q = rows(40, 30_000, seed=7, conc=0.2)  # 1.2M entries: three blocks
    q[::3, :500] = 0.0
    q = q / q.sum(-1, keepdim=True)
    p, q = p.to(dtype), q.to(dtype)
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(entropy(q), torch.special.entr(q).sum(-1), **tol)
    m = 0.5 * (p + q)
    torch.testing.assert_close(js_divergence(p, q), 0.5 * kl(p, m) + 0.5 * kl(q, m), **tol)
    assert entropy(q).shape == (40,) and entropy(q[0]).shape == ()
