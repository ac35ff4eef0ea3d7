"""The k tuner against a synthetic pair whose per-position acceptance and costs are known:
rounds are simulated position by position, timed by the cost model, and the prediction made
from a k = 4 run's counts must match what runs at other k give."""

from __future__ import annotations

import numpy as np
import pytest

from cactus_core.experiments.tuning.k_tuner import PairCosts, expected_tokens, predict_k

TRUE_RATES = [0.82, 0.74, 0.70, 0.66] + [0.66] * 8  # constant past 4, so extrapolation holds
COSTS = PairCosts(
    identity="synthetic",
    device="cpu",
    threads=1,
    verify_ms=tuple(10.0 + 0.8 * (w - 1) for w in range(1, 14)),
    draft_ms=1.5,
    round_overhead_ms=0.7,
    plain_overhead_ms=0.4,
    draft_round_ms=2.0,
)


def simulate(k: int, rounds: int, seed: int) -> tuple[list[int], list[int], float, int]:
    """(reached per position, accepted per position, wall ms, tokens) of `rounds` rounds."""
    rng = np.random.default_rng(seed)
    acc = rng.random((rounds, k)) < np.asarray(TRUE_RATES[:k])  # [rounds, k]
    m = np.where(acc.all(1), k, np.argmin(acc, 1))  # accepted drafts per round
    reached = [int((m >= j).sum()) for j in range(k)]  # position j + 1 reached iff m >= j
    accepted = [int((m >= j + 1).sum()) for j in range(k)]
    tokens = int((m + 1).sum())
    wall = rounds * COSTS.round_ms(k)
    return reached, accepted, wall, tokens


def test_prediction_from_a_k4_run_matches_runs_at_other_k() -> None:
    reached, accepted, _, _ = simulate(4, 40_000, seed=0)
    rates = [a / r for a, r in zip(accepted, reached, strict=True)]
    pred = predict_k(rates, COSTS, reached=reached)
    assert pred.measured_positions == 4 and reached[3] >= 50  # the last position alone
    assert not pred.extrapolated(4) and pred.extrapolated(5)
    assert "extrapolated" in pred.how()
    for k in (2, 3, 4, 6, 8):
        _, _, wall, tokens = simulate(k, 40_000, seed=k)
        rounds = 40_000
        measured_tpc = tokens / rounds
        measured_speedup = (tokens / wall) / (1 / COSTS.plain_ms)
        tpc, speedup = pred.at(k)
        assert tpc == pytest.approx(measured_tpc, rel=0.02), k
        assert speedup == pytest.approx(measured_speedup, rel=0.02), k
    # The true optimum under these rates and costs, by brute force over k.
    truth = [expected_tokens(TRUE_RATES, k) * COSTS.plain_ms / COSTS.round_ms(k) for k in pred.ks]
    assert pred.best_k == pred.ks[int(np.argmax(truth))]


def test_a_rarely_reached_last_position_is_pooled_with_those_before() -> None:
    pred = predict_k([0.8, 0.7, 1.0], COSTS, reached=[100, 80, 2])
    # 2 drafts at position 3 are too few: it pools with position 2 (56 + 2 of 82)
    assert pred.rates[3] == pytest.approx((0.7 * 80 + 1.0 * 2) / 82)
    assert pred.rates[:3] == (0.8, 0.7, 1.0)


def test_pooled_rates_and_bad_input() -> None:
    pred = predict_k([0.7], COSTS, pooled=True)
    assert all(pred.extrapolated(k) for k in pred.ks) and "pooled" in pred.how()
    # the geometric model: (1 - a^(k+1)) / (1 - a)
    assert pred.at(3)[0] == pytest.approx((1 - 0.7**4) / 0.3)
    with pytest.raises(ValueError, match="no measured"):
        predict_k([None, 0.5], COSTS)
    assert COSTS.verify(20) == pytest.approx(10.0 + 0.8 * 19)
    assert PairCosts.from_dict(COSTS.to_dict()) == COSTS


def test_costs_are_medians_of_interleaved_samples_with_the_draft_split() -> None:
    """Samples with known costs and a load burst in one of them: the medians ignore the burst,
    and the draft's time per round against k = 1..12 splits into f + k·d."""
    from types import SimpleNamespace

    from cactus_core.experiments.tuning.k_tuner import CostSample, combine_costs

    f, d, o, o1 = 4.0, 1.5, 0.7, 0.4
    v = tuple(10.0 + 0.8 * (w - 1) for w in range(1, 14))
    ks = range(1, 13)

    def sample(load: float) -> CostSample:
        return CostSample(
            verify_ms=tuple(load * x for x in v),
            draft_round_ms=tuple(load * (f + k * d) for k in ks),
            rest_ms=tuple(o * load for _ in ks),
            plain_rest_ms=o1 * load,
        )

    pair = SimpleNamespace(identity="synthetic", device="cpu")
    costs = combine_costs(pair, [sample(1.0), sample(2.5), sample(1.0)])
    assert costs.verify_ms == pytest.approx(v) and costs.samples == 3
    assert costs.draft_ms == pytest.approx(d) and costs.draft_round_ms == pytest.approx(f)
    assert (costs.round_overhead_ms, costs.plain_overhead_ms) == pytest.approx((o, o1))
    # T(k) = v(k + 1) + f + k·d + o, and the speedup's ratio uses v(1) + o_1
    assert costs.round_ms(6) == pytest.approx(v[6] + f + 6 * d + o)
    assert costs.plain_ms == pytest.approx(v[0] + o1)
    # a cache written before f was measured is not read (the costs are measured again)
    old = {**COSTS.to_dict(), "format": 1}
    with pytest.raises(ValueError, match="format"):
        PairCosts.from_dict(old)


def test_the_draft_s_per_round_part_moves_the_best_k() -> None:
    """f is paid once a round whatever k is, so a large f favours a longer draft than the same
    draft time charged per step would."""
    from dataclasses import replace

    per_step = replace(COSTS, draft_ms=3.0, draft_round_ms=0.0)
    per_round = replace(COSTS, draft_ms=0.5, draft_round_ms=10.0)
    a = predict_k(TRUE_RATES[:4], per_step, reached=[1000] * 4)
    b = predict_k(TRUE_RATES[:4], per_round, reached=[1000] * 4)
    assert b.best_k > a.best_k
    k = 4
    assert b.at(k)[1] == pytest.approx(
        expected_tokens(TRUE_RATES, k) * per_round.plain_ms / (COSTS.verify(5) + 10 + 2 + 0.7)
    )


def test_verifier_costs_are_made_non_decreasing_in_the_width() -> None:
    from cactus_core.experiments.tuning.k_tuner import monotone

    assert monotone([1.0, 2.0, 3.0]) == (1.0, 2.0, 3.0)
    # a dip is pooled with what it undercuts: least squares under the order
    assert monotone([1.0, 5.0, 3.0, 4.0]) == pytest.approx((1.0, 4.0, 4.0, 4.0))
    assert monotone([2.0, 1.0]) == pytest.approx((1.5, 1.5))


def test_k_chart_gives_each_setting_one_colour_its_star_included() -> None:
    from cactus_core.app.shared.k_panel import k_chart
    from cactus_core.app.shared.rule_style import rule_colour

    preds = {
        label: predict_k([rate], COSTS, pooled=True)
        for label, rate in (("cactus δ=0.1", 0.5), ("cactus δ=1", 0.7))
    }
    fig = k_chart(preds)
    colours = {}
    for trace in fig.data:
        label = next(x for x in preds if trace.name.startswith(x))
        colour = trace.marker.color if "best k" in trace.name else trace.line.color
        colours.setdefault(label, set()).add(colour)
    assert all(len(c) == 1 for c in colours.values())  # a series and its star agree
    assert colours["cactus δ=0.1"] != colours["cactus δ=1"]  # two settings of one rule differ
    # settings of different rules take their rules' colours, as on every other chart
    fig = k_chart({"sps": preds["cactus δ=0.1"], "cactus δ=1": preds["cactus δ=1"]})
    assert fig.data[0].line.color == rule_colour("sps")


def test_k_summary_and_the_settings_a_chart_opens_with() -> None:
    from cactus_core.app.shared.k_panel import default_k_settings, k_summary

    pooled = predict_k([0.48], COSTS, pooled=True)
    measured = predict_k([0.8, 0.7, 0.6, 0.5], COSTS)
    text = k_summary({"sps": pooled, "cactus δ=0.1": measured})
    assert text.startswith(f"Best k: sps {pooled.best_k}; cactus δ=0.1 {measured.best_k}.")
    assert text.count("No per-position counts") == 1 and "0.480" in text
    rows = [
        {"label": "verifier-only", "rule": "verifier-only", "value": None},
        {"label": "sps", "rule": "sps", "value": None},
        {"label": "cactus δ=0.1", "rule": "cactus", "value": 0.1},
        {"label": "cactus δ=3", "rule": "cactus", "value": 3.0},
        {"label": "cactus δ=0.01", "rule": "cactus", "value": 0.01},  # appended later
    ]
    assert default_k_settings(rows, "cactus δ=0.1") == ["sps", "cactus δ=0.1", "cactus δ=3"]
