"""AppTest of the Decode page's compact frontier: shown before anything is generated, the
marker follows the parameter with no decoding, and a run adds its point and its own curve."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_app_decode import decode_page, generate

from cactus_core.app.shared.reference import compact_frontier, marker
from cactus_core.experiments.sweeps.reference import load_reference
from cactus_core.experiments.tuning.tune import first_guess
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, rule_class


@pytest.fixture(scope="module")
def pair_dirs(tiny_pair_dirs) -> tuple[str, str]:
    return str(tiny_pair_dirs[0]), str(tiny_pair_dirs[1])


def _traces(at) -> dict[str, dict]:
    chart = next(c for c in at.get("plotly_chart") if "dec_frontier" in c.proto.id)
    return {t.get("name"): t for t in json.loads(chart.proto.spec)["data"]}


def test_marker_moves_with_delta_and_a_run_adds_its_point(pair_dirs, monkeypatch, tmp_path):
    log = tmp_path / "timing.jsonl"
    monkeypatch.setenv("CACTUS_LAB_TIMING_LOG", str(log))
    at = decode_page(pair_dirs)
    traces = _traces(at)
    assert {"limit", "current setting", f"{DEFAULT_RULE} (estimated)"} <= set(traces)
    assert f"{LOSSLESS_RULE} (measured)" in traces
    before = traces["current setting"]["x"][0], traces["current setting"]["y"][0]
    assert "this run" not in traces  # nothing generated yet

    at.select_slider(key=f"dec_{DEFAULT_RULE}_delta").set_value(2.5).run()
    assert not at.exception
    after = _traces(at)["current setting"]
    assert (after["x"][0], after["y"][0]) != before
    assert at.session_state["dec_state"].runs == 0  # the move decoded nothing
    assert log.read_text().count("decode_marker") >= 2

    generate(at, open_rounds=False)
    traces = _traces(at)
    assert "this run" in traces and "this run's positions (estimated)" in traces


def test_marker_and_budget_answer_on_the_shipped_reference():
    part = load_reference().for_top_p(1.0)
    assert part is not None
    low = marker(part, DEFAULT_RULE, {"delta": 0.0})
    high = marker(part, DEFAULT_RULE, {"delta": 3.0})
    assert low[0] <= high[0] and low[1] <= high[1] + 1e-9
    fig = compact_frontier(part, DEFAULT_RULE, {"delta": 1.0})
    assert any(t.name == "current setting" for t in fig.data)
    ans = first_guess(part, DEFAULT_RULE, 0.05)
    assert ans.param == "delta" and ans.value >= 0 and ans.source == "estimated curve"
    assert ans.kl <= 0.05 + 1e-9 and not ans.at_top
    assert first_guess(part, DEFAULT_RULE, 50.0).at_top  # the whole range fits: at the edge
    with pytest.raises(ValueError, match="no parameter"):
        first_guess(part, LOSSLESS_RULE, 0.05)


@pytest.mark.parametrize("top_p", [1.0, 0.95])
def test_the_log_slider_moves_the_marker_over_the_whole_axis(top_p):
    """Every value of the δ slider (Param.log_steps, what the Decode page's select_slider
    offers) placed on the reference: from its first value to its last the marker crosses the
    whole estimated curve, each arrow key moves it visibly and none jumps far. A linear
    slider in steps of 0.01 put half the axis into its first tenth; 42 steps a decade moved δ
    by 0.0001 per arrow key at the low end."""
    part = load_reference().for_top_p(top_p)
    param = rule_class(DEFAULT_RULE).swept()
    steps = param.log_steps
    assert steps[0] == 0.0 and steps[-1] == param.ui[1] and 30 < len(steps) < 50
    ratios = np.diff(np.log(steps[1:]))
    assert ratios.max() < 0.126 * math.log(10)  # each step at most an eighth of a decade
    assert ratios.min() > 0.07 * math.log(10)  # and at least a fourteenth
    xs = np.array([marker(part, DEFAULT_RULE, {param.name: v})[0] for v in steps])
    kl = part.estimate.curves[DEFAULT_RULE].kl_token
    span = np.nanmax(kl) - np.nanmin(kl)
    assert xs[0] == pytest.approx(np.nanmin(kl), abs=1e-9)
    assert xs[-1] == pytest.approx(np.nanmax(kl), abs=1e-9)
    assert np.all(np.diff(xs) >= -1e-12)  # more delta, more KL
    assert np.diff(xs).max() <= 0.08 * span
    # every fifth of the slider moves the marker, the first fifth included
    assert min(np.ptp(part) for part in np.array_split(xs, 5)) >= 0.015 * span
