"""The optimal-transport bound at a tree's node (maths.tree_optimum): the sorted-prefix minimum
equals the minimum over every token set on small vocabularies, one candidate gives sum min(p,
q), the exact RRS acceptance matches the walk on sampled candidates and never exceeds the bound,
and three candidates are refused."""

from __future__ import annotations

import itertools

import pytest
import torch

from cactus_core.maths.rules import make_rule
from cactus_core.maths.tree import sample_without_replacement, verify_tree_batch
from cactus_core.maths.tree_optimum import multidraft_optimum, rrs_acceptance

V = 6


def _rows(seed: int, n: int, spread: float) -> tuple[torch.Tensor, torch.Tensor]:
    """n pairs of random rows (p, q) [n, V]; a larger spread makes them peakier."""
    gen = torch.Generator().manual_seed(seed)
    p, q = (torch.randn(n, V, generator=gen, dtype=torch.float64) for _ in range(2))
    return torch.softmax(spread * p, -1), torch.softmax(spread * q, -1)


def _inside_without_replacement(p: torch.Tensor, subset: set[int]) -> float:
    """P(both of two draws without replacement land in subset), by enumeration."""
    total = 0.0
    for x, y in itertools.permutations(range(V), 2):
        if x in subset and y in subset and p[x] < 1:
            total += float(p[x] * p[y] / (1 - p[x]))
    return total


@pytest.mark.parametrize("spread", [0.5, 1.5, 4.0])
def test_the_prefix_minimum_is_the_minimum_over_every_set(spread):
    p, q = _rows(int(spread * 10), 12, spread)
    fast = multidraft_optimum(p, q, 2)
    for i in range(p.shape[0]):
        best = 1.0
        for size in range(V + 1):
            for subset in itertools.combinations(range(V), size):
                inside = _inside_without_replacement(p[i], set(subset))
                best = min(best, 1 + float(q[i, list(subset)].sum()) - inside)
        assert float(fast[i]) == pytest.approx(best, abs=1e-9)


def test_one_candidate_is_sps():
    p, q = _rows(1, 50, 2.0)
    torch.testing.assert_close(multidraft_optimum(p, q, 1), torch.minimum(p, q).sum(-1))
    torch.testing.assert_close(rrs_acceptance(p, q, 1), torch.minimum(p, q).sum(-1))


def test_rrs_acceptance_is_the_walks_and_below_the_bound():
    p, q = _rows(2, 8, 1.5)
    exact = rrs_acceptance(p, q, 2)
    assert bool((exact <= multidraft_optimum(p, q, 2) + 1e-12).all())
    gen = torch.Generator().manual_seed(3)
    draws = 40_000
    rows_p, rows_q = p.repeat_interleave(draws, 0), q.repeat_interleave(draws, 0)
    tokens = sample_without_replacement(rows_p, count=2, generator=gen)
    both = (rows_p[:, None].expand(-1, 3, V), rows_q[:, None].expand(-1, 3, V))
    res = verify_tree_batch(make_rule("sps"), tokens, [-1, -1], *both, generator=gen)
    sampled = (res.num_accepted > 0).double().view(-1, draws).mean(1)
    se = (exact * (1 - exact) / draws).sqrt()
    assert bool(((sampled - exact).abs() < 4 * se + 1e-9).all())


def test_one_token_drafts_and_three_candidates():
    p = torch.tensor([[1.0, 0, 0, 0, 0, 0]], dtype=torch.float64)
    q = torch.full((1, V), 1 / V, dtype=torch.float64)
    assert float(multidraft_optimum(p, q, 2)) == pytest.approx(1 / V)
    assert float(rrs_acceptance(p, q, 2)) == pytest.approx(1 / V)
    with pytest.raises(ValueError, match="1 or 2 candidates"):
        multidraft_optimum(p, q, 3)
