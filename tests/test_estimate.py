"""The estimated frontier: the round model, exactness on the rows, compact rows and traces."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cactus_core import estimate_frontier
from cactus_core.engine.decoder import SpeculativeDecoder
from cactus_core.experiments.estimate import (
    EstimatedFrontier,
    compact_rows,
    decided_per_token,
    rows_from_trace,
    tokens_per_call,
)
from cactus_core.maths.divergence import expected_acceptance
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULES


def _rows(n: int = 40, v: int = 300, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(3 * torch.randn(n, v, generator=g, dtype=torch.float64), -1)
    p = torch.softmax(q.log() + torch.randn(n, v, generator=g, dtype=torch.float64), -1)
    return p, q


@pytest.fixture(scope="module")
def frontier() -> EstimatedFrontier:
    p, q = _rows()
    return estimate_frontier(p, q, k=4)


def test_round_model() -> None:
    assert tokens_per_call(0.0, 4) == pytest.approx(1.0)
    assert tokens_per_call(1.0, 4) == pytest.approx(5.0)
    assert tokens_per_call(0.5, 4) == pytest.approx(1 + 0.5 + 0.25 + 0.125 + 0.0625)
    # decided positions per token: a round decides 1 + a + ... + a^(k-1) and emits one more term
    assert decided_per_token(0.5, 4) == pytest.approx(1.875 / 1.9375)
    assert decided_per_token(1.0, 4) == pytest.approx(0.8)


def test_every_rule_and_fifty_values(frontier: EstimatedFrontier) -> None:
    assert set(frontier.curves) == set(RULES)
    for name, curve in frontier.curves.items():
        spec = RULES[name].swept()
        if spec is None:
            assert curve.values.shape == (1,)
        elif not spec.integer:
            assert len(curve.values) >= 50, name
        for arr in (curve.acceptance, curve.kl_position, curve.tokens_per_call):
            assert np.all(np.isfinite(arr)), name
        # No rule beats the limit on the rows it was computed on (optimal-price sits on it, up
        # to the limit curve's interpolation between its grid points).
        assert np.all(curve.acceptance <= curve.limit_acceptance * (1 + 1e-4)), name


def test_exact_on_the_rows(frontier: EstimatedFrontier) -> None:
    p, q = _rows()
    sps = frontier.curves[LOSSLESS_RULE]
    assert sps.kl_position[0] == 0.0
    assert sps.acceptance[0] == pytest.approx(float(torch.minimum(p, q).sum(-1).mean()))
    cactus = frontier.curves[DEFAULT_RULE]
    i = len(cactus.values) // 2
    from cactus_core.maths.rules import make_rule

    rule = make_rule(DEFAULT_RULE, delta=float(cactus.values[i]))
    want = float(expected_acceptance(rule, p, q).mean())
    assert cactus.acceptance[i] == pytest.approx(want, rel=1e-6)
    # delta = 0 is lossless: the curve starts at sps
    assert cactus.values[0] == 0.0
    assert cactus.acceptance[0] == pytest.approx(sps.acceptance[0], abs=1e-9)
    assert cactus.at(float(cactus.values[i]), "tokens_per_call") == pytest.approx(
        cactus.tokens_per_call[i]
    )


def test_compact_rows_exact_when_nothing_is_cut() -> None:
    p, q = _rows(n=10, v=50)
    full = estimate_frontier(p, q, 4, rules=[DEFAULT_RULE, "tas"], count=5)
    pc, qc = compact_rows(p, q, top_m=50)
    small = estimate_frontier(pc, qc, 4, rules=[DEFAULT_RULE, "tas"], count=5)
    for name in full.curves:
        np.testing.assert_allclose(
            small.curves[name].acceptance, full.curves[name].acceptance, atol=1e-9
        )
        np.testing.assert_allclose(
            small.curves[name].kl_position, full.curves[name].kl_position, atol=1e-9
        )
    pc, qc = compact_rows(p, q, top_m=5, tail_buckets=3)
    assert pc.shape == (10, 13)
    torch.testing.assert_close(pc.sum(-1), torch.ones(10, dtype=torch.float64))


def test_round_trip_and_bad_input(frontier: EstimatedFrontier) -> None:
    again = EstimatedFrontier.from_dict(frontier.to_dict())
    np.testing.assert_allclose(
        again.curves[DEFAULT_RULE].tokens_per_call, frontier.curves[DEFAULT_RULE].tokens_per_call
    )
    p, q = _rows(n=3, v=10)
    with pytest.raises(ValueError, match="sum to 1"):
        estimate_frontier(p * 2, q, 4)
    with pytest.raises(ValueError, match="k must be"):
        estimate_frontier(p, q, 0)
    with pytest.raises(ValueError, match="unknown rule"):
        estimate_frontier(p, q, 4, rules=["nope"])


def test_from_a_decode_trace(tiny_pair) -> None:
    dec = SpeculativeDecoder(tiny_pair, DEFAULT_RULE, k=3, temperature=1.0, replay_top_m=8)
    out = dec.generate("Tell me about cacti.", max_new_tokens=16, seed=1)
    p, q = rows_from_trace(out.trace)
    decided = sum(min(r.k, len(r.emitted_ids), r.num_accepted + 1) for r in out.trace.rounds if r.k)
    assert p.shape[0] == decided
    torch.testing.assert_close(q.sum(-1), torch.ones(decided, dtype=torch.float64))
    est = estimate_frontier(p, q, 3, rules=[LOSSLESS_RULE, DEFAULT_RULE], count=4)
    assert math.isfinite(est.curves[DEFAULT_RULE].tokens_per_call[-1])
