"""Rules: the worked example, parameters, the shape of h, a(n) and r, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from distributions import dirichlet

from cactus_core.maths.divergence import kl
from cactus_core.maths.rules import RULE_NAMES, RULES, make_rule, rule_class

Q_EX = torch.tensor([0.30, 0.35, 0.35])  # decode, generate, output (the verifier)
P_EX = torch.tensor([0.05, 0.80, 0.15])  # the draft
N_EX = torch.tensor(1)  # "generate"


def test_worked_example() -> None:
    rule = make_rule("cactus", delta=0.21)
    h = rule.adjusted_target(Q_EX, P_EX, N_EX)
    assert [round(x, 3) for x in h.tolist()] == [0.157, 0.659, 0.184]
    assert round(rule.accept_probs(Q_EX, P_EX, N_EX).item(), 3) == 0.824
    assert round(kl(h, Q_EX).item(), 3) == 0.197
    assert make_rule("sps").accept_probs(Q_EX, P_EX, N_EX).item() == pytest.approx(0.4375)


def test_names_labels_and_params() -> None:
    assert RULE_NAMES == (
        "sps",
        "cactus",
        "cactus-exact",
        "cactus-budget",
        "cactus-adaptive",
        "tas",
        "topk",
        "relaxed-topk",
        "sglang",
        "interp",
        "cascade",
        "fuzzy",
        "kl-judge",
        "optimal",
        "optimal-price",
        "block",
        "fly",
        "learned-judge",
    )
    assert make_rule("cactus", delta=0.5).label == "cactus δ=0.5"
    assert make_rule("cactus", delta=0.5).params == {"delta": 0.5}
    assert make_rule("tas").params == {"epsilon": 0.09, "alpha": 0.3}
    assert make_rule("topk").params == {"k_top": 5}
    assert make_rule("sps").params == {}
    assert make_rule("relaxed-topk").params == {"delta_r": 0.1, "K": 10}
    assert make_rule("fuzzy", T=0.2).label == "fuzzy JS≤0.2"
    assert make_rule("optimal-price", t=0.5).params == {"t": 0.5}
    assert make_rule("kl-judge").params == {"tau": 0.5, "top1": 0.9}
    assert make_rule("fly").params == {"theta": 0.3, "W": 2}
    assert make_rule("fly", theta=0.5).label == "fly H₃≥0.5, W=2"
    assert make_rule("learned-judge").params == {"threshold": 0.3}
    assert make_rule("cactus", delta=1) == make_rule("cactus", delta=1.0)
    assert len({make_rule("cactus", delta=1), make_rule("cactus", delta=1.0)}) == 1
    assert rule_class("interp").params_spec[0].high == 1.0
    for name in RULE_NAMES:
        assert make_rule(name).label.startswith(name)


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("nope", {}, "allowed: sps, cactus"),
        ("cactus", {"beta": 1.0}, "unknown parameter.*allowed: delta"),
        ("sps", {"delta": 1.0}, "allowed: none"),
        ("cactus", {"delta": -0.1}, r"delta must be a number in \[0"),
        ("cactus-exact", {"delta": float("nan")}, "delta must be"),
        ("cactus-budget", {"budget": -1}, "budget must be"),
        ("optimal", {"budget": "0.1"}, "budget must be"),
        ("interp", {"alpha": 1.5}, r"alpha must be a number in \[0, 1\]"),
        ("tas", {"epsilon": 2.0}, "epsilon must be"),
        ("topk", {"k_top": 0}, "k_top must be an integer"),
        ("topk", {"k_top": 2.5}, "k_top must be an integer"),
        ("cactus", {"delta": True}, "delta must be"),
        ("optimal-price", {"t": -1.0}, "t must be"),
        ("cactus-adaptive", {"delta": -1.0}, "delta must be"),
        ("cascade", {"alpha": 1.5}, "alpha must be"),
        ("fuzzy", {"T": -0.1}, "T must be"),
        ("relaxed-topk", {"K": 0}, "K must be an integer"),
        ("relaxed-topk", {"delta_r": 2.0}, "delta_r must be"),
        ("block", {"delta": 1.0}, "allowed: none"),
        ("kl-judge", {"tau": -0.5}, "tau must be"),
        ("kl-judge", {"top1": 1.5}, "top1 must be"),
        ("fly", {"W": 0}, "W must be an integer"),
        ("fly", {"theta": -1.0}, "theta must be"),
    ],
)
def test_bad_rule_raises(name: str, params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_rule(name, **params)


def all_drafts(p: torch.Tensor, q: torch.Tensor):
    """One row per possible draft n: q, p [V, V] and n [V]."""
    v = p.shape[-1]
    return q.expand(v, v), p.expand(v, v), torch.arange(v)


@pytest.mark.parametrize("name", RULE_NAMES)
def test_h_a_and_r_fit_together(name: str) -> None:
    """a(n) = min(1, h_n / p_n); r is a distribution; accept_probs_all agrees with a(n)."""
    p = dirichlet(12, (), seed=1)
    q = dirichlet(12, (), seed=2)
    qs, ps, n = all_drafts(p, q)
    rule = make_rule(name)
    h = rule.adjusted_target(qs, ps, n)
    a = rule.accept_probs(qs, ps, n)
    r = rule.residual(qs, ps, n)
    hn = h.gather(-1, n.view(-1, 1)).squeeze(-1)
    if name == "relaxed-topk":
        # it recovers from q itself, so a rejected n can come back out: h^(n) = q there
        outside = a == 0
        torch.testing.assert_close(h[outside], q.expand(12, 12)[outside])
        torch.testing.assert_close(r[outside], q.expand(12, 12)[outside])
        assert bool(((a == 0) | (a == 1)).all())
        torch.testing.assert_close(rule.accept_probs_all(p, q), a, rtol=0, atol=0)
        return
    if name == "sglang":
        # a(n) reads q_n alone (never p), and h^(n) is the emitted token's law given n
        torch.testing.assert_close(a, torch.clamp(q, max=1.0), rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(hn, a, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(r, (q * (1 - torch.eye(12))) / (1 - q).unsqueeze(-1))
    else:
        torch.testing.assert_close(a, torch.clamp(hn / p, max=1.0), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(rule.accept_probs_all(p, q), a, rtol=1e-9, atol=1e-12)
    assert bool((r >= 0).all()) and torch.allclose(r.sum(-1), torch.ones(12, dtype=r.dtype))
    assert bool((h >= 0).all()) and torch.allclose(h.sum(-1), torch.ones(12, dtype=h.dtype))
    rejectable = a < 1
    assert bool((r[rejectable].gather(-1, n[rejectable].view(-1, 1)) == 0).all())


def test_cactus_h_structure_and_delta_zero() -> None:
    p = dirichlet(20, (), seed=3)
    q = dirichlet(20, (), seed=4)
    qs, ps, n = all_drafts(p, q)
    assert torch.equal(make_rule("cactus", delta=0.0).adjusted_target(qs, ps, n), qs)
    h = make_rule("cactus", delta=0.7).adjusted_target(qs, ps, n)
    hn = h.diagonal()
    c = (1 - hn) / (1 - q)
    off = ~torch.eye(20, dtype=torch.bool)
    torch.testing.assert_close(h[off], (c.view(-1, 1) * qs)[off])


def test_acceptance_non_decreasing_in_delta() -> None:
    p = dirichlet(50, (8,), seed=5)
    q = dirichlet(50, (8,), seed=6)
    for name in ("cactus", "cactus-exact"):
        prev = make_rule("sps").accept_probs_all(p, q)
        for delta in (0.0, 0.01, 0.1, 0.5, 1.0, 5.0):
            a = make_rule(name, delta=delta).accept_probs_all(p, q)
            assert bool((a >= prev - 1e-12).all())
            prev = a


@pytest.mark.parametrize("delta", [1e-4, 0.01, 0.1, 0.21, 1.0, 3.0])
def test_cactus_exact_keeps_kl_h_q_within_delta(delta: float) -> None:
    q = dirichlet(40, (), seed=7, conc=0.3)
    q = torch.cat([q * 0.98, torch.tensor([0.0, 1e-12, 0.02 - 1e-12], dtype=torch.float64)])
    p = dirichlet(43, (), seed=8)
    qs, ps, n = all_drafts(p, q)
    h = make_rule("cactus-exact", delta=delta).adjusted_target(qs, ps, n)
    assert bool((kl(h, qs) <= delta * (1 + 1e-6)).all())
    # it is the root, not just any point under the budget, unless h_n reached 1 or q_n = 0
    hn = h.diagonal()
    inner = (hn < 1) & (q > 0)
    assert bool((kl(h, qs)[inner] >= delta * (1 - 1e-6)).all())


def test_closed_form_can_overshoot_delta() -> None:
    """The design's fact: the Taylor form's KL(h ‖ q) exceeds delta once h_n > 0.5."""
    q = torch.tensor([0.83, 0.17], dtype=torch.float64)
    p = torch.tensor([0.99, 0.01], dtype=torch.float64)
    n = torch.tensor(0)
    h = make_rule("cactus", delta=0.1).adjusted_target(q, p, n)
    assert h[0] > 0.5 and kl(h, q) > 0.1 * 1.3
    assert kl(make_rule("cactus-exact", delta=0.1).adjusted_target(q, p, n), q) <= 0.1


def test_tas_and_topk_thresholds() -> None:
    q = torch.tensor([0.5, 0.3, 0.12, 0.05, 0.03])
    p = torch.full((5,), 0.2)
    tas = make_rule("tas", epsilon=0.09, alpha=0.3)
    # threshold min(0.09, 0.3·exp(−H(q))) = 0.09 here
    assert tas.accept_probs_all(p, q).tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    r = tas.residual(q, p, torch.tensor(3))
    assert r.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    topk = make_rule("topk", k_top=2)
    assert topk.accept_probs_all(p, q).tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(
        topk.residual(q, p, torch.tensor(4)), torch.tensor([0.5, 0.5, 0, 0, 0])
    )
    # h for threshold rules: the law of the emitted token given the draft
    assert topk.adjusted_target(q, p, torch.tensor(1)).tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]
    # topk requires q_n > 0 even when the k-th largest q is 0
    q0 = torch.tensor([1.0, 0.0, 0.0])
    assert make_rule("topk", k_top=3).accept_probs_all(torch.full((3,), 1 / 3), q0).tolist() == [
        1.0,
        0.0,
        0.0,
    ]


def test_optimal_h_is_the_clip() -> None:
    p = dirichlet(30, (), seed=9)
    q = dirichlet(30, (), seed=10)
    rule = make_rule("optimal", budget=0.05)
    h = rule.adjusted_target(q, p, torch.tensor(0))
    assert kl(h, q) <= 0.05 + 1e-9
    ratio = h / q
    lowered, raised = h < p - 1e-12, h > p + 1e-12
    assert torch.allclose(ratio[lowered], ratio[lowered].max().expand(int(lowered.sum())))
    assert torch.allclose(ratio[raised], ratio[raised].min().expand(int(raised.sum())))


@pytest.mark.parametrize("name", RULE_NAMES)
def test_rule_methods_reject_bad_input(name: str) -> None:
    rule = make_rule(name)
    p, q = P_EX.clone(), Q_EX.clone()
    with pytest.raises(ValueError, match="NaN"):
        rule.accept_probs(torch.tensor([math.nan, 0.5, 0.5]), p, N_EX)
    with pytest.raises(ValueError, match="negative"):
        rule.adjusted_target(q, torch.tensor([-0.1, 0.6, 0.5]), N_EX)
    with pytest.raises(ValueError, match="sum to 1"):
        rule.residual(q * 2, p, N_EX)
    with pytest.raises(ValueError, match="shape"):
        rule.accept_probs_all(p[:2], q)
    with pytest.raises(ValueError, match="shape"):
        rule.accept_probs(q, p, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="token ids"):
        rule.accept_probs(q, p, torch.tensor(3))


def test_cactus_exact_root_reaches_float64_rounding():
    """The root of KL(h_n ‖ q_n) = delta, checked against a 200-step bisection, for q near
    exp(−delta) too (the root near 1, where Newton used to stop 1.4e-4 short)."""
    from cactus_core.maths.rules import cactus_exact_h

    q = torch.cat(
        [
            torch.logspace(-12, 0, 2000, dtype=torch.float64)[:-1],
            torch.tensor([0.366, 0.3679, 0.1353, 0.5, 0.9], dtype=torch.float64),
        ]
    )
    for delta in (1e-4, 0.1, 1.0, 2.0, 5.0):
        lo, hi = q.clone(), torch.ones_like(q)
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            div = mid * torch.log(mid / q) + (1 - mid) * (torch.log1p(-mid) - torch.log1p(-q))
            lo, hi = torch.where(div > delta, lo, mid), torch.where(div > delta, mid, hi)
        root = torch.where(-torch.log(q) <= delta, torch.ones_like(q), lo)
        got = cactus_exact_h(q, delta)
        assert float((got - root).abs().max()) < 1e-12, delta
        inside = got < 1
        g, qq = got[inside], q[inside]
        div = g * torch.log(g / qq) + (1 - g) * (torch.log1p(-g) - torch.log1p(-qq))
        assert bool((div <= delta * (1 + 1e-12)).all())  # never over the budget (to rounding)


def test_every_round_level_rule_says_which_drafts_its_round_keeps() -> None:
    for name, cls in RULES.items():
        assert bool(cls.card.round_in_words) == cls.caps.round_level, name
