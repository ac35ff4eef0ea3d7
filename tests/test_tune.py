"""The refining tuner on a synthetic rule response: it converges to a value whose measured KL
interval fits the budget, and says plainly when the answer is at the top of the range or when
no value fits."""

from __future__ import annotations

import math

import pytest

from cactus_core.experiments.estimates.frontier import Estimate
from cactus_core.experiments.tuning.tune import TuneStep, refine


def power_law(a: float = 0.68, b: float = 0.35, width: float = 0.12, offset: float = 0.0):
    """run(value) for a rule whose mean KL is offset + a·value^b, measured with a ±width
    relative 95% interval (the embedded pair's cactus curve is close to 0.68·delta^0.35)."""
    calls: list[float] = []

    def run(value: float) -> TuneStep:
        calls.append(value)
        m = offset + a * value**b
        kl = Estimate(m, m * (1 - width), m * (1 + width), 24)
        one = Estimate(2.0, 1.9, 2.1, 24)
        return TuneStep(value, kl, one)

    return run, calls


@pytest.mark.parametrize("budget", [0.02, 0.05, 0.1, 0.3, 0.8])
def test_refines_to_a_value_whose_interval_fits(budget: float) -> None:
    run, calls = power_law()
    first = 0.0159  # an interpolation between delta 0 and 0.1 that overshoots at small budgets
    res = refine("cactus", budget, first, run, max_runs=6)
    assert res.status == "met", res.message
    assert res.value is not None and res.chosen is not None and res.chosen.source == "run"
    # the upper bound, with one more half-width for a re-measurement, fits
    assert res.measured_kl.hi + (res.measured_kl.hi - res.measured_kl.mean) <= budget
    # It uses the budget: the true largest fitting delta is (budget / (1.24 a))^(1 / b).
    best = (budget / (1.24 * 0.68)) ** (1 / 0.35)
    assert best / 1.3 <= res.value <= best
    assert len(calls) <= 6 and calls[0] == first
    assert str(res.value) in res.message or f"{res.value:g}" in res.message


def test_a_budget_the_whole_range_fits_is_an_edge_answer() -> None:
    run, calls = power_law()
    res = refine("cactus", 5.0, 3.0, run)
    assert res.status == "edge" and res.value == 3.0
    assert "top of the range" in res.message and calls == [3.0]


def test_a_budget_no_value_fits_says_it_cannot() -> None:
    run, calls = power_law(offset=0.5)  # never below 0.5 nats
    res = refine("cactus", 0.1, 0.01, run, max_runs=12)
    assert res.status == "cannot" and res.value is None
    assert "no δ fits" in res.message or "none of" in res.message
    assert min(calls) < 1e-4  # it went down the log scale before giving up
    with pytest.raises(ValueError, match="met the budget"):
        res.cli_flags()


def test_out_of_runs_keeps_the_best_fitting_value_and_cancel_stops() -> None:
    run, _ = power_law()
    res = refine("cactus", 0.3, 0.0001, run, max_runs=1)
    assert res.status == "runs" and res.value == 0.0001 and "may fit" in res.message
    asked = []
    res = refine("cactus", 0.3, 0.01, run, should_stop=lambda: bool(asked.append(1)) or True)
    assert res.status == "cancelled" and res.runs == [] and res.value is None


def test_linear_parameter_and_bad_input() -> None:
    calls = []

    def run(alpha: float) -> TuneStep:  # interp: KL grows like alpha^2
        calls.append(alpha)
        m = 2.0 * alpha**2
        return TuneStep(alpha, Estimate(m, 0.9 * m, 1.1 * m, 10), Estimate(1, 1, 1, 10))

    res = refine("interp", 0.1, 0.5, run, max_runs=8)
    assert res.status in ("met", "runs") and res.value is not None
    assert 1.2 * 2.0 * res.value**2 <= 0.1 and res.value > 0.15
    with pytest.raises(ValueError, match="tuner works on"):
        refine("tas", 0.1, 0.1, run)
    with pytest.raises(ValueError, match="budget"):
        refine("cactus", math.nan, 0.1, run)


def test_the_tuner_view_shows_every_run_and_the_edge() -> None:
    from cactus_core.app.frontier.tuner import range_note, refinement_chart, step_rows

    run, _ = power_law()
    res = refine("cactus", 0.1, 0.0159, run)
    rows = step_rows(res)
    assert [r["run"] for r in rows] == [str(i) for i in range(1, len(res.runs) + 1)]
    assert all(v is not None for r in rows for v in r.values())  # no raw "None" cells
    assert sum(r["chosen"] for r in rows) == 1 and range_note(res) is None
    fig = refinement_chart(res)
    assert fig.layout.xaxis.type == "log" and any(t.name == "budget" for t in fig.data)
    # the answer's label sits on its line: on a log axis an annotation's x is log10 of it
    (label,) = [a for a in fig.layout.annotations if a.text.startswith("answer")]
    assert label.x == pytest.approx(math.log10(res.value))
    edge = refine("cactus", 5.0, 3.0, run)
    assert "At the edge" in range_note(edge)


def test_speed_parts_add_up_to_the_measured_speedup() -> None:
    from types import SimpleNamespace

    from cactus_core.app.shared.metrics import speed_comparison
    from cactus_core.app.shared.speed import cost_parts, explanation

    spec = SimpleNamespace(rounds=10, new_tokens=30, verifier_calls=10, draft_calls=40,
                           wall_s=1.1, prefill_s=0.1, draft_s=0.2, verify_s=0.6, record_s=0.0,
                           tokens_per_call=3.0)  # fmt: skip
    base = SimpleNamespace(rounds=30, new_tokens=30, verifier_calls=30, draft_calls=0,
                           wall_s=1.6, prefill_s=0.1, draft_s=0.0, verify_s=1.4, record_s=0.0,
                           tokens_per_call=1.0)  # fmt: skip
    cmp = speed_comparison(spec, base, k=4)
    parts = cost_parts(cmp)
    step = 1.5 / 30  # one verifier-only token's decoding time
    assert parts.verify == pytest.approx(0.06 / step) and parts.draft == pytest.approx(0.02 / step)
    assert parts.other == pytest.approx(0.02 / step)
    # tokens per round ÷ the round's cost is the measured speedup, exactly
    assert parts.speedup == pytest.approx(cmp.speedup) == pytest.approx((30 / 1.0) / (30 / 1.5))
    assert "verify pass over 5 tokens" in explanation(parts)
