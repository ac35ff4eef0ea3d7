"""The limit: pi* = clip(p, B·q, A·q), the one-price curve and the best acceptance at a KL."""

from __future__ import annotations

import pytest
import torch
from distributions import dirichlet

from cactus_core.maths.divergence import kl, total_variation
from cactus_core.maths.emitted import emitted_distribution, expected_acceptance
from cactus_core.maths.limit import limit_sums, optimal_params, optimal_target
from cactus_core.maths.rules import make_rule


def test_optimal_target_ends_and_budget() -> None:
    p = dirichlet(50, (10,), seed=1)
    q = dirichlet(50, (10,), seed=2)
    torch.testing.assert_close(optimal_target(p, q, 0.0), q)
    full = kl(p, q).max().item()
    torch.testing.assert_close(optimal_target(p, q, full + 1e-6), p)
    for budget in (1e-4, 0.01, 0.1, 0.5):
        pi = optimal_target(p, q, budget)
        div = kl(pi, q)
        assert bool((div <= budget + 1e-9).all())
        binding = kl(p, q) > budget
        assert bool((div[binding] >= budget * (1 - 1e-6)).all())  # the budget is used up


def test_optimal_params_structure() -> None:
    p = dirichlet(30, (4,), seed=3)
    q = dirichlet(30, (4,), seed=4)
    lower, upper = optimal_params(p, q, 0.05)
    assert bool((lower <= 1).all()) and bool((upper >= 1).all())
    # q with zeros where p has mass: pi* must drop that mass (finite KL)
    q2 = q.clone()
    q2[:, :3] = 0
    q2 = q2 / q2.sum(-1, keepdim=True)
    pi = optimal_target(p, q2, 0.05)
    assert bool((pi[:, :3] == 0).all()) and bool((kl(pi, q2) <= 0.05 + 1e-9).all())


def test_limit_curve_shape() -> None:
    p = dirichlet(40, (64,), seed=5)
    q = dirichlet(40, (64,), seed=6)
    curve = limit_sums(p, q).curve()
    acc, div = curve.mean_acceptance, curve.mean_kl
    assert bool((acc[1:] >= acc[:-1] - 1e-12).all())  # larger t, more KL, more acceptance
    assert bool((div[1:] >= div[:-1] - 1e-12).all())
    sps = (1 - total_variation(p, q)).mean().item()
    assert acc[0] == pytest.approx(sps, abs=1e-9) and div[0] < 1e-12  # t = 0 is pi = q
    assert acc[-1] > sps + 0.05


def test_limit_bounds_every_rule_at_its_mean_kl() -> None:
    p = dirichlet(60, (48,), seed=7)
    q = dirichlet(60, (48,), seed=8)
    curve = limit_sums(p, q).curve()
    sps = (1 - total_variation(p, q)).mean().item()
    assert curve.at(0.0) == pytest.approx(sps, abs=2e-3)
    for rule in (
        make_rule("cactus", delta=0.1),
        make_rule("cactus", delta=1.0),
        make_rule("cactus-exact", delta=0.3),
        make_rule("interp", alpha=0.5),
        make_rule("optimal", budget=0.05),
        make_rule("tas"),
    ):
        mean_kl = kl(emitted_distribution(rule, p, q), q).mean().item()
        acc = expected_acceptance(rule, p, q).mean().item()
        assert curve.at(mean_kl) >= acc - 1e-3, rule.label


def test_one_price_beats_equal_split() -> None:
    """Sharing one mean-KL budget across positions does at least as well as splitting it."""
    p = dirichlet(30, (8,), seed=9)
    q = dirichlet(30, (8,), seed=10)
    budget = 0.05
    split = torch.minimum(p, optimal_target(p, q, budget)).sum(-1).mean().item()
    assert limit_sums(p, q).curve().at(budget) >= split - 1e-3


def test_limit_rejects_bad_input() -> None:
    p = dirichlet(5, (2,), seed=1)
    with pytest.raises(ValueError, match="must both be"):
        limit_sums(p, p[:, :4])
    with pytest.raises(ValueError, match="at least one"):
        limit_sums(p[:0], p[:0]).curve()
    with pytest.raises(ValueError, match="budget"):
        optimal_target(p, p, -0.5)
