"""One speedup, one definition (`experiments.estimates.speedup`), the same number everywhere: for
one
run (a speculative and a verifier-only decode of the same prompt), the race's measured speedup,
the k tuner's prediction at the run's k, the Frontier's speedup chart and the tuner's table all
show the same number when the costs are the ones that run measured. And the definition's
edges: the prefill, one-time work and the recording stay outside the clocks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cactus_core.app.decode.race import Lane, Race, RaceRound
from cactus_core.app.frontier.figures import predicted_speedup_chart
from cactus_core.app.frontier.tuner import step_rows
from cactus_core.app.shared.speed import cost_parts
from cactus_core.engine.decoding.generation import GenerationStats
from cactus_core.experiments.estimates.frontier import Estimate
from cactus_core.experiments.estimates.speedup import (
    Spread,
    decoding_seconds,
    measured,
    predicted,
    spread,
)
from cactus_core.experiments.sweeps.config import BASELINE
from cactus_core.experiments.tuning.k_tuner import PairCosts, predict_k
from cactus_core.experiments.tuning.refine import TuneResult, TuneStep

K = 4


def the_run() -> tuple[GenerationStats, GenerationStats]:
    """A speculative run of 20 full rounds at k = 4 (60 tokens) and its verifier-only twin."""
    accepted = (15, 12, 8, 5)  # drafts accepted at positions 1..4: 40 in 20 rounds
    spec = GenerationStats(
        new_tokens=60, rounds=20, verifier_calls=20, draft_calls=80, drafted_tokens=80,
        decided_tokens=20 + 15 + 12 + 8, accepted_tokens=sum(accepted),
        accepted_histogram=[5, 3, 4, 3, 5], position_reached=[20, 15, 12, 8],
        position_accepted=list(accepted), wall_s=2.3, prefill_s=0.2, record_s=0.1,
        verify_s=1.2, draft_s=0.6, batch_new_tokens=60,
    )  # fmt: skip
    base = GenerationStats(new_tokens=60, rounds=60, verifier_calls=60, wall_s=3.3,
                           prefill_s=0.3, verify_s=2.7, batch_new_tokens=60)  # fmt: skip
    return spec, base


def costs_of(spec: GenerationStats, base: GenerationStats) -> PairCosts:
    """The k tuner's costs as this run measured them: its round at k = 4 and its step."""
    ms = 1000.0
    v1 = base.verify_s / base.new_tokens * ms
    v5 = spec.verify_s / spec.rounds * ms
    draft = spec.draft_s / spec.rounds / K * ms
    rest = decoding_seconds(spec) / spec.rounds * ms - v5 - K * draft
    return PairCosts(
        identity="this run", device="cpu", threads=1,
        verify_ms=tuple(v1 + (v5 - v1) * (w - 1) / K for w in range(1, 14)),
        draft_ms=draft, round_overhead_ms=rest,
        plain_overhead_ms=decoding_seconds(base) / base.new_tokens * ms - v1,
    )  # fmt: skip


def row_of(spec: GenerationStats) -> dict:
    """The run as a sweep row (one prompt)."""
    tpc = spec.tokens_per_call
    return {
        "setting": "cactus:delta=0.1", "label": "cactus δ=0.1", "rule": "cactus",
        "param": "delta", "value": 0.1, "prompts": 1, "emitted_kl": 0.02,
        "emitted_kl_lo": 0.02, "emitted_kl_hi": 0.02, "tokens_per_call": tpc,
        "tokens_per_call_lo": tpc, "tokens_per_call_hi": tpc,
        "acceptance_rate": spec.acceptance_rate,
        "acceptance_by_position": spec.positions.conditional(),
        "position_reached": list(spec.position_reached),
        "position_accepted": list(spec.position_accepted),
    }  # fmt: skip


def finished_race(spec: GenerationStats, base: GenerationStats) -> Race:
    def lane(name: str, stats: GenerationStats) -> Lane:
        done = SimpleNamespace(output=SimpleNamespace(stats=stats))
        return Lane(name, name, done, done=True)  # type: ignore[arg-type]

    return Race(lane("speculative", spec), lane("verifier only", base), K)


def test_the_race_the_k_tuner_the_frontier_and_the_tuner_table_agree():
    spec, base = the_run()
    costs = costs_of(spec, base)
    race = finished_race(spec, base).comparison().speedup
    assert race == pytest.approx((60 / 2.0) / (60 / 3.0)) == pytest.approx(1.5)

    counts = spec.positions
    k_tuner = predict_k(counts.conditional(), costs, reached=counts.reached).at(K)[1]

    baseline = {**row_of(spec), "setting": BASELINE, "label": BASELINE, "rule": BASELINE}
    fig = predicted_speedup_chart([baseline, row_of(spec)], costs, K)
    frontier = next(t for t in fig.data if t.name == "cactus").y[0]

    step = TuneStep(0.1, Estimate(0.02, 0.02, 0.02, 1), Estimate(3.0, 3.0, 3.0, 1), "run",
                    tuple(counts.conditional()), counts.reached)  # fmt: skip
    res = TuneResult("cactus", "delta", 0.1, 0.05, "met", "", 0.1, [step], {"k": K})
    table = step_rows(res, costs)[0]["predicted speedup"]

    assert k_tuner == pytest.approx(race) and frontier == pytest.approx(race)
    assert table == f"{race:.2f}×"


def test_the_definition_leaves_out_the_prefill_and_the_recording():
    spec, base = the_run()
    assert decoding_seconds(spec) == pytest.approx(2.0)
    # a slower prefill changes neither side's decoding rate
    slow = GenerationStats(**{**vars(spec), "wall_s": 4.3, "prefill_s": 2.2})
    assert measured(slow, base) == pytest.approx(measured(spec, base))
    assert predicted(3.0, 0.1, 0.05) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="costs"):
        predicted(3.0, 0.0, 0.05)


def test_the_spread_pairs_stretches_of_the_race():
    # rounds of 0.1 s against steps of 0.05 s, then the machine slows both down twice over
    # from 0.6 s on: each stretch pairs rounds and steps of the same moments, so every stretch
    # still gives 1.5× and the spread stays that one value
    rounds = [(0.1 * (i + 1), 0.1) for i in range(6)]
    rounds += [(0.6 + 0.2 * (i + 1), 0.2) for i in range(4)]
    steps = [(0.05 * (i + 1), 0.05) for i in range(12)]
    steps += [(0.6 + 0.1 * (i + 1), 0.1) for i in range(8)]
    got = spread(3.0, rounds, steps)
    assert got is not None and got.parts == 5
    assert (got.low, got.high) == (pytest.approx(1.5), pytest.approx(1.5))
    assert not got.covers(1.0)
    assert spread(3.0, rounds[:3], steps) is None  # too short for two stretches


def test_the_headline_compares_equal_work():
    """The verifier-only lane stops after 40 tokens; the speculative lane writes on alone, and
    a load that comes then slows its last rounds fivefold. The headline compares the same 39
    tokens (the last speculative round the other lane got past), so the late rounds cannot
    drag it from 1.5× (old: whole runs, 0.46× against stretches of 0.48–0.79× in one run)."""
    wide = Spread(0.48, 0.79, 5).including(0.46)
    assert wide == Spread(0.46, 0.79, 5) and wide.covers(0.46)
    race = finished_race(*the_run())
    # rounds of 0.1 s writing 3 tokens while the other lane runs, then 0.5 s alone
    ends = [0.1 * (i + 1) for i in range(14)] + [1.4 + 0.5 * (i + 1) for i in range(20)]
    race.speculative.rounds = [
        RaceRound(i, t, t - (ends[i - 1] if i else 0.0), t, ("x",) * 3, 2, 4)
        for i, t in enumerate(ends)
    ]
    race.verifier_only.rounds = [
        RaceRound(i, 0.05 * (i + 1), 0.05, 0.05 * (i + 1), ("x",), 0, 0) for i in range(40)
    ]
    cmp = race.comparison()
    assert (cmp.tokens, cmp.rounds) == (39, 13)
    assert cmp.speedup == pytest.approx(1.95 / 1.3) == pytest.approx(1.5)
    assert cmp.spread is not None and cmp.spread.low == pytest.approx(1.5)
    assert cmp.spread.high == pytest.approx(1.5)
    assert "over the same 39 tokens" in cmp.verdict()
    parts = cost_parts(cmp)
    assert parts is not None and parts.speedup == pytest.approx(cmp.speedup)
