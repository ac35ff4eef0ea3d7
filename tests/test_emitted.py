"""The exact emitted distribution: fast against brute force, budgets, divergences."""

from __future__ import annotations

import pytest
import torch
from distributions import dirichlet

from cactus_core.maths.divergence import entropy, kl, total_variation
from cactus_core.maths.emitted import (
    emitted_distribution,
    emitted_distribution_reference,
    expected_acceptance,
)
from cactus_core.maths.limit import optimal_target
from cactus_core.maths.rules import RULE_NAMES, budget_delta, make_rule

PARAMS = {
    "sps": {},
    "cactus": {"delta": 0.4},
    "cactus-exact": {"delta": 0.4},
    "cactus-budget": {"budget": 0.03},
    "tas": {},
    "topk": {"k_top": 3},
    "interp": {"alpha": 0.3},
    "optimal": {"budget": 0.03},
    "block": {},
    "cactus-adaptive": {"delta": 0.4},
    "cascade": {"alpha": 0.5},
    "fuzzy": {"T": 0.3},
    "relaxed-topk": {"delta_r": 0.2, "K": 3},
    "optimal-price": {"t": 1.0},
    "sglang": {"threshold_acc": 0.3, "threshold_single": 0.6},
    "kl-judge": {"tau": 0.5},
    "fly": {"theta": 0.3, "W": 1},
    "learned-judge": {"threshold": 0.5},
}


@pytest.mark.parametrize("name", RULE_NAMES)
@pytest.mark.parametrize("vocab", [1, 2, 7, 60])
def test_fast_matches_brute_force_every_rule(name: str, vocab: int) -> None:
    p = dirichlet(vocab, (), seed=vocab)
    q = dirichlet(vocab, (), seed=vocab + 100)
    rule = make_rule(name, **PARAMS[name])
    pi = emitted_distribution(rule, p, q)
    torch.testing.assert_close(pi, emitted_distribution_reference(rule, p, q), rtol=0, atol=1e-9)
    assert abs(pi.sum().item() - 1) < 1e-9 and bool((pi >= 0).all())


@pytest.mark.parametrize("name", ["cactus", "cactus-exact"])
@pytest.mark.parametrize("vocab", [300, 2000])
def test_fast_cactus_matches_brute_force_large_vocab(name: str, vocab: int) -> None:
    # sparse-ish rows with exact zeros, like top-p truncated distributions
    p = dirichlet(vocab, (), seed=1, conc=0.1)
    q = dirichlet(vocab, (), seed=2, conc=0.1)
    q[q < 1e-6] = 0
    q = q / q.sum()
    for delta in (0.05, 1.0):
        rule = make_rule(name, delta=delta)
        fast = emitted_distribution(rule, p, q)
        torch.testing.assert_close(
            fast, emitted_distribution_reference(rule, p, q), rtol=0, atol=1e-6
        )


def test_cactus_budget_is_cactus_at_its_delta() -> None:
    p = dirichlet(400, (), seed=3)
    q = dirichlet(400, (), seed=4)
    delta = budget_delta(p, q, 0.02).item()
    pi = emitted_distribution(make_rule("cactus-budget", budget=0.02), p, q)
    ref = emitted_distribution_reference(make_rule("cactus", delta=delta), p, q)
    torch.testing.assert_close(pi, ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", ["cactus-budget", "optimal"])
@pytest.mark.parametrize("budget", [0.0, 1e-3, 0.02, 0.2, 2.0])
def test_budget_rules_keep_emitted_kl_within_budget(name: str, budget: float) -> None:
    p = dirichlet(80, (16,), seed=5, conc=0.3)
    q = dirichlet(80, (16,), seed=6, conc=0.3)
    pi = emitted_distribution(make_rule(name, budget=budget), p, q)
    assert bool((kl(pi, q) <= budget + 1e-9).all())
    if budget == 0.0:
        torch.testing.assert_close(pi, q)


def test_unconstrained_cactus_can_exceed_its_delta() -> None:
    """The design's fact: the emitted pi can sit far further from q than delta."""
    p = dirichlet(50, (64,), seed=7, conc=0.2)
    q = dirichlet(50, (64,), seed=8, conc=0.2)
    pi = emitted_distribution(make_rule("cactus-exact", delta=0.05), p, q)
    assert kl(pi, q).max() > 2 * 0.05


def test_optimal_accepts_most_at_equal_emitted_kl() -> None:
    others = [
        make_rule("sps"),
        *(make_rule("cactus", delta=d) for d in (0.05, 0.3, 1.0)),
        *(make_rule("cactus-exact", delta=d) for d in (0.05, 0.3)),
        make_rule("cactus-budget", budget=0.05),
        make_rule("tas"),
        make_rule("topk", k_top=3),
        *(make_rule("interp", alpha=a) for a in (0.2, 0.7)),
    ]
    p = dirichlet(40, (32,), seed=9)
    q = dirichlet(40, (32,), seed=10)
    for rule in others:
        pi = emitted_distribution(rule, p, q)
        budgets = kl(pi, q)
        acc = expected_acceptance(rule, p, q)
        best = optimal_target(p, q, budgets)  # per-position budgets, one call
        assert bool((kl(best, q) <= budgets + 1e-9).all())
        assert bool((torch.minimum(p, best).sum(-1) >= acc - 1e-9).all()), rule.label


def test_edge_cases() -> None:
    v = 6
    hot = torch.nn.functional.one_hot(torch.tensor(2), v).double()
    other = torch.nn.functional.one_hot(torch.tensor(4), v).double()
    flat = torch.full((v,), 1.0 / v, dtype=torch.float64)
    for name in RULE_NAMES:
        rule = make_rule(name, **PARAMS[name])
        # T = 0: one-hot p and q give pi = q for every rule (h is 0 off q's support)
        torch.testing.assert_close(emitted_distribution(rule, other, hot), hot)
        for p, q in ((hot, flat), (flat, hot), (hot, hot)):
            pi = emitted_distribution(rule, p, q)
            torch.testing.assert_close(
                pi, emitted_distribution_reference(rule, p, q), rtol=0, atol=1e-9
            )
        one = torch.ones(3, 1)
        assert emitted_distribution(rule, one, one).tolist() == [[1.0]] * 3
        assert emitted_distribution(rule, torch.ones(0, 4) / 4, torch.ones(0, 4) / 4).shape == (
            0,
            4,
        )


def test_emitted_rejects_bad_input() -> None:
    rule = make_rule("cactus")
    good = torch.tensor([0.5, 0.5])
    with pytest.raises(ValueError, match="NaN"):
        emitted_distribution(rule, torch.tensor([float("nan"), 1.0]), good)
    with pytest.raises(ValueError, match="negative"):
        emitted_distribution(rule, good, torch.tensor([-0.5, 1.5]))
    with pytest.raises(ValueError, match="sum to 1"):
        emitted_distribution(rule, good, torch.tensor([0.5, 0.6]))
    with pytest.raises(ValueError, match="shape"):
        emitted_distribution(rule, good, torch.tensor([0.2, 0.3, 0.5]))


def test_divergences() -> None:
    a = torch.tensor([0.5, 0.5, 0.0])
    b = torch.tensor([0.25, 0.25, 0.5])
    assert kl(a, b).item() == pytest.approx(torch.log(torch.tensor(2.0)).item())
    assert kl(b, a).item() == float("inf")
    assert kl(a, a).item() == 0.0
    assert total_variation(a, b).item() == pytest.approx(0.5)
    assert entropy(a).item() == pytest.approx(torch.log(torch.tensor(2.0)).item())
    p = dirichlet(30, (5,), seed=11)
    q = dirichlet(30, (5,), seed=12)
    torch.testing.assert_close(
        expected_acceptance(make_rule("sps"), p, q), 1 - total_variation(p, q)
    )
    opt = make_rule("optimal", budget=0.1)
    pi = emitted_distribution(opt, p, q)
    torch.testing.assert_close(expected_acceptance(opt, p, q), torch.minimum(p, pi).sum(-1))


@pytest.mark.parametrize("name", RULE_NAMES)
def test_accept_all_and_emitted_match_the_separate_calls(name: str) -> None:
    # the Playground's one-solve path must agree with a(n) and pi computed on their own
    rule = make_rule(name, **PARAMS[name])
    p, q = dirichlet(300, (3,), seed=11), dirichlet(300, (3,), seed=12)
    p, q = p.float(), q.float()
    accept_all, pi = rule.accept_probs_all_and_emitted(p, q)
    torch.testing.assert_close(accept_all, rule.accept_probs_all(p, q), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(pi, emitted_distribution(rule, p, q), atol=1e-6, rtol=1e-5)
