"""The estimated frontier: the round model, exactness on the rows, compact rows and traces."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cactus_core import estimate_frontier
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.experiments.estimates.curves import (
    EstimatedFrontier,
    compact_rows,
    decided_per_token,
    estimable,
    from_own_runs,
    held_out,
    own_runs_at,
    pool_curves,
    rows_from_trace,
    tokens_per_call,
)
from cactus_core.maths.emitted import expected_acceptance
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
    # rows give no curve of a rule whose pi depends on the whole round (FLy, the learned judge)
    assert set(frontier.curves) == {n for n in RULES if estimable(n)}
    assert {n for n in RULES if not estimable(n)} == {"fly", "learned-judge"}
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


def _own(seeds: tuple[int, ...], rule: str = DEFAULT_RULE) -> list:
    """One curve per row set, as if each came from a run of `rule` at its own value."""
    values = (0.1, 0.5, 2.0)
    return [
        (values[i], estimate_frontier(*_rows(seed=s), k=4, rules=[rule]).curves[rule])
        for i, s in enumerate(seeds)
    ]


def test_own_runs_are_on_policy_at_their_values_and_blend_between() -> None:
    runs = _own((1, 2))
    (v0, c0), (v1, c1) = runs
    curve = from_own_runs(runs, k=4)
    fields = ("acceptance", "kl_position", "limit_acceptance")
    for f in fields:
        # At a run's own value, that run's curve alone; beyond the runs, the nearest one.
        assert curve.at(v0, f) == pytest.approx(c0.at(v0, f), rel=1e-6)
        assert curve.at(v1, f) == pytest.approx(c1.at(v1, f), rel=1e-6)
        assert own_runs_at(runs, 0.01)[f] == pytest.approx(c0.at(0.01, f))
        assert own_runs_at(runs, 3.0)[f] == pytest.approx(c1.at(3.0, f))
        # Between them, weighted by nearness on the parameter's (log) scale.
        mid = math.sqrt(v0 * v1)
        want = 0.5 * c0.at(mid, f) + 0.5 * c1.at(mid, f)
        assert own_runs_at(runs, mid)[f] == pytest.approx(want)
        near = math.exp(0.75 * math.log(v0) + 0.25 * math.log(v1))
        want = 0.75 * c0.at(near, f) + 0.25 * c1.at(near, f)
        assert own_runs_at(runs, near)[f] == pytest.approx(want)
    # The modelled fields follow from the blended acceptance, not from blending them.
    np.testing.assert_allclose(curve.tokens_per_call, tokens_per_call(curve.acceptance, 4))
    np.testing.assert_allclose(
        curve.kl_token, curve.kl_position * decided_per_token(curve.acceptance, 4)
    )


def test_held_out_leaves_the_run_out() -> None:
    runs = _own((1, 2, 3))
    out = held_out(runs, 1, k=4)
    want = own_runs_at([runs[0], runs[2]], runs[1][0])
    for f, v in want.items():
        assert out[f] == pytest.approx(v)
    assert out["tokens_per_call"] == pytest.approx(float(tokens_per_call(out["acceptance"], 4)))
    # An end run is read off its neighbour's curve.
    assert held_out(runs, 0, k=4)["acceptance"] == pytest.approx(
        runs[1][1].at(runs[0][0], "acceptance")
    )
    with pytest.raises(ValueError, match="one run"):
        held_out(runs[:1], 0, k=4)


def test_a_rule_without_a_parameter_is_its_one_run() -> None:
    p, q = _rows(seed=4)
    curve = estimate_frontier(p, q, k=4, rules=[LOSSLESS_RULE]).curves[LOSSLESS_RULE]
    back = from_own_runs([(None, curve)], k=4)
    np.testing.assert_allclose(back.acceptance, curve.acceptance)
    np.testing.assert_allclose(back.tokens_per_call, curve.tokens_per_call)


def test_pooled_chunks_are_the_curve_on_all_their_positions() -> None:
    p, q = _rows(n=40, seed=5)
    whole = estimate_frontier(p, q, k=4, rules=[DEFAULT_RULE]).curves[DEFAULT_RULE]
    parts = [
        estimate_frontier(p[a:b], q[a:b], k=4, rules=[DEFAULT_RULE]).curves[DEFAULT_RULE]
        for a, b in ((0, 10), (10, 40))
    ]
    pooled = pool_curves(parts, [10, 30], k=4)
    np.testing.assert_allclose(pooled.acceptance, whole.acceptance, rtol=1e-10)
    np.testing.assert_allclose(pooled.kl_position, whole.kl_position, rtol=1e-10)
    np.testing.assert_allclose(pooled.tokens_per_call, whole.tokens_per_call, rtol=1e-10)
    with pytest.raises(ValueError):
        pool_curves(parts, [1.0], k=4)


def test_a_rounding_leftover_is_no_tail() -> None:
    """p and q disjoint (a truncated q, a draft elsewhere): every draft is rejected and topk
    spreads its residual over q's passing tokens. A float32 row's leftover mass (~1e-9) must
    not become a tail token that passes and takes a third of the residual."""
    p = torch.zeros(1, 50, dtype=torch.float32)
    q = torch.zeros(1, 50, dtype=torch.float32)
    p[0, [1, 3]] = torch.tensor([0.1128, 0.8872])
    q[0, [0, 2]] = torch.tensor([0.0104, 0.9896])
    pc, qc = compact_rows(p, q, top_m=8)
    assert float(pc[0, -1]) == 0.0 and float(qc[0, -1]) == 0.0
    for name in ("topk", "cascade"):
        full = estimate_frontier(p.double(), q.double(), 4, rules=[name], count=3).curves[name]
        small = estimate_frontier(pc, qc, 4, rules=[name], count=3).curves[name]
        np.testing.assert_allclose(small.kl_position, full.kl_position, rtol=1e-6)
