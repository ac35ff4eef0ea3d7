"""The Cactus family's emitted pi and KL from rows compacted to the draft's support
(`cactus_emitted.DraftSupport`): a draft whose head covers part of the vocabulary gives p = 0
on the rest, and those tokens act as one. The compact computation must give the full one's
pi, KL and cactus-budget's delta, and the brute-force O(V²) pi."""

from __future__ import annotations

import pytest
import torch

from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import (
    emitted_distribution,
    emitted_distribution_reference,
    emitted_kl,
)
from cactus_core.maths.rules import RULES, budget_delta, make_rule
from cactus_core.maths.rules import cactus_emitted as ce

FAMILY = [
    ("cactus", {"delta": 1.0}),
    ("cactus-exact", {"delta": 0.3}),
    ("cactus-adaptive", {"delta": 0.5}),
    ("cactus-budget", {"budget": 0.05}),
]


def _rows(v: int, support: int, rows: int = 5, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(3 * torch.randn(rows, v, generator=g, dtype=torch.float64), -1)
    p = torch.softmax(3 * torch.randn(rows, v, generator=g, dtype=torch.float64), -1)
    cols = torch.randperm(v, generator=g)[:support]
    mask = torch.zeros(v, dtype=torch.bool)
    mask[cols] = True
    p = torch.where(mask, p, 0.0)
    return p / p.sum(-1, keepdim=True), q


@pytest.fixture
def no_compaction(monkeypatch):
    def off() -> None:
        monkeypatch.setattr(ce.DraftSupport, "of", classmethod(lambda cls, p: None))

    return off


@pytest.mark.parametrize(("name", "params"), FAMILY, ids=[n for n, _ in FAMILY])
def test_compact_rows_give_the_full_rows_pi_and_kl(name, params, no_compaction) -> None:
    p, q = _rows(8192, 1500)
    rule = make_rule(name, **params)
    assert ce.DraftSupport.of(p) is not None
    pi, div = emitted_distribution(rule, p, q), emitted_kl(rule, p, q)
    no_compaction()
    full_pi = emitted_distribution(rule, p, q)
    assert torch.allclose(pi, full_pi, atol=1e-13, rtol=0)
    assert torch.allclose(div, kl(full_pi, q), atol=1e-12, rtol=1e-10)


def test_budget_delta_is_the_same_from_compact_rows(no_compaction) -> None:
    p, q = _rows(8192, 2000, seed=1)
    compact = budget_delta(p, q, 0.05)
    no_compaction()
    full = budget_delta(p * (1 + 1e-16), q, 0.05)  # other rows: no memo hit
    assert torch.allclose(compact, full, rtol=1e-3)


@pytest.mark.parametrize(("name", "params"), FAMILY, ids=[n for n, _ in FAMILY])
def test_compact_pi_equals_the_brute_force(name, params, monkeypatch) -> None:
    monkeypatch.setattr(ce, "_COMPACT_MIN", 1)
    p, q = _rows(300, 80, rows=1, seed=2)
    rule = make_rule(name, **params)
    assert ce.DraftSupport.of(p) is not None
    pi = emitted_distribution(rule, p[0], q[0])
    assert torch.allclose(pi, emitted_distribution_reference(rule, p[0], q[0]), atol=1e-12)


@pytest.mark.parametrize("name", list(RULES))
def test_every_rules_emitted_kl_is_the_kl_of_its_pi(name) -> None:
    p, q = _rows(6000, 2500, rows=3, seed=3)
    rule = make_rule(name)
    want = kl(emitted_distribution(rule, p, q), q)
    assert torch.allclose(emitted_kl(rule, p, q), want, atol=1e-10, rtol=1e-8)


def test_a_full_support_is_not_compacted() -> None:
    p, q = _rows(8192, 8192)
    assert ce.DraftSupport.of(p) is None
    assert ce.DraftSupport.of(q[:, :100]) is None  # too short to pay
