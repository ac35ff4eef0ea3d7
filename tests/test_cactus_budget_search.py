"""cactus-budget's per-position search: every delta it returns fits the budget exactly, sits
within 0.01% of the edge (the next delta up does not fit), takes a handful of exact emitted
distributions rather than a bisection's 18, and a position asked about again is not solved
again."""

from __future__ import annotations

import math

import pytest
import torch

import cactus_core.maths.rules.cactus as cactus
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.row_memo import RowMemo
from cactus_core.maths.rules import budget_delta, make_rule


def _rows(n: int, v: int, seed: int, noise: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, v, generator=g, dtype=torch.float64) * 2.5
    q = torch.softmax(z / 0.7, -1)
    p = torch.softmax((z + noise * torch.randn(n, v, generator=g, dtype=torch.float64)) / 0.7, -1)
    return p, q


def _kl_at(p, q, delta: torch.Tensor) -> torch.Tensor:
    return torch.stack(
        [
            kl(emitted_distribution(make_rule("cactus", delta=float(d)), p[i], q[i]), q[i])
            for i, d in enumerate(delta.tolist())
        ]
    )


@pytest.fixture
def evaluations(monkeypatch) -> list[int]:
    count = [0]
    inner = cactus.pi_in_rho_order

    def counted(*args, **kwargs):
        count[0] += 1
        return inner(*args, **kwargs)

    monkeypatch.setattr(cactus, "pi_in_rho_order", counted)
    return count


@pytest.mark.parametrize(
    "v, seed, noise, budget",
    [(4096, 0, 1.0, 0.01), (4096, 1, 1.0, 0.1), (4096, 2, 0.5, 0.3), (300, 3, 3.0, 1.0)],
)
def test_the_delta_fits_and_sits_at_the_edge(v, seed, noise, budget, evaluations):
    p, q = _rows(6, v, seed, noise)
    delta = budget_delta(p, q, budget)
    assert evaluations[0] <= 10  # a bisection over [1e-9, 1e9] to 6e-4 took 18
    inner = (delta > 0) & (delta < 1e9)
    assert bool(inner.any())
    assert bool((_kl_at(p, q, delta) <= budget).all())
    over = _kl_at(p[inner], q[inner], delta[inner] * math.exp(2e-4))
    assert bool((over > budget).all()), "a delta 0.02% larger still fits: not at the edge"


def test_a_position_asked_again_is_not_solved_again(evaluations):
    p, q = (x.float() for x in _rows(4, 2048, seed=5))  # the decoder's float32 rows
    first = budget_delta(p, q, 0.05)
    solved = evaluations[0]
    # the decoder's later asks: a decided prefix of the rows, as they are or in float64
    again = budget_delta(p[:2].double(), q[:2].double(), 0.05)
    assert evaluations[0] == solved
    torch.testing.assert_close(again, first[:2].to(again.dtype))
    # the emitted distribution of the same rows reuses it too
    pi = emitted_distribution(make_rule("cactus-budget", budget=0.05), p, q)
    assert evaluations[0] == solved  # no new search
    assert bool((kl(pi.double(), q.double()) <= 0.05 + 1e-6).all())


def test_the_memo_matches_rows_exactly():
    memo = RowMemo(size=4)
    calls = []

    def fn(p, q):
        calls.append(p.shape[0])
        return p[:, 0] + q[:, 1]

    p = torch.tensor([[0.5, 0.5], [0.25, 0.75]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)  # equal row sums
    assert memo("k", p, q, fn).tolist() == [1.0, 0.75]
    assert memo("k", p.flip(0), q, fn).tolist() == [0.75, 1.0] and calls == [2]
    assert memo("other key", p, q, fn).tolist() == [1.0, 0.75] and calls == [2, 2]
    for i in range(6):  # past its size the oldest rows are forgotten
        memo("k", torch.tensor([[0.1 * i, 1 - 0.1 * i]]), torch.tensor([[1.0, 0.0]]), fn)
    memo("k", p, q, fn)
    assert calls[-1] == 2
