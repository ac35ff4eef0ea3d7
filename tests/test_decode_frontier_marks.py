"""The Decode page's compact frontier: the last run's × belongs to the run's rule (it goes when
another rule is picked), and the caption names every mark, the limit's dotted line too; a rule
rows cannot estimate (FLy, the learned judge) is ringed at its measured points; a chart names
every setting it leaves out."""

from __future__ import annotations

import json

import pytest
from test_app_decode import decode_page, generate

from cactus_core.app.frontier.figures import frontier_chart, not_drawn
from cactus_core.app.shared.reference import (
    compact_caption,
    compact_frontier,
    load_reference,
    marker,
    run_curve,
)
from cactus_core.maths.rules import rule_class


@pytest.fixture(scope="module")
def pair_dirs(tiny_pair_dirs) -> tuple[str, str]:
    return str(tiny_pair_dirs[0]), str(tiny_pair_dirs[1])


def frontier_traces(at) -> list[str]:
    chart = next(c for c in at.get("plotly_chart") if "dec_frontier" in c.proto.id)
    return [t.get("name") for t in json.loads(chart.proto.spec)["data"]]


def test_the_runs_mark_goes_with_its_rule(pair_dirs):
    at = generate(decode_page(pair_dirs), open_rounds=False)
    assert "this run" in frontier_traces(at)
    at.selectbox(key="dec_rule").set_value("tas").run()
    assert not at.exception
    assert "this run" not in frontier_traces(at)
    assert any(c.value == compact_caption(False, True) for c in at.caption)


def test_the_caption_names_the_dotted_limit():
    text = compact_caption(True, True)
    assert "dotted: the limit" in text and "×: your last run" in text and "dashed" in text


@pytest.mark.parametrize("rule", ["fly", "learned-judge"])
def test_a_rule_rows_cannot_estimate_sits_at_its_measured_points(rule):
    """FLy and the learned judge have no per-position curve (their pi depends on the whole
    round): the compact frontier's ring sits at a reference point's estimated KL and measured
    tokens per call, not at KL 0 on a per-position (sps) curve, and its caption says why."""
    part = load_reference().for_top_p(1.0)
    assert rule not in part.estimate.curves
    rows = [r for r in part.rule_rows(rule) if r.get("emitted_kl") is not None]
    spec = rule_class(rule).swept()
    for row in rows:
        kl, tpc = marker(part, rule, {spec.name: row["value"]})
        assert (kl, tpc) == (
            pytest.approx(row["emitted_kl"]),
            pytest.approx(row["tokens_per_call"]),
        )
    inside = sorted(rows, key=lambda r: r["value"])[:2]
    between = marker(part, rule, {spec.name: (inside[0]["value"] + inside[1]["value"]) / 2})
    lo, hi = sorted([inside[0]["emitted_kl"], inside[1]["emitted_kl"]])
    assert lo <= between[0] <= hi and between[0] > 0
    fig = compact_frontier(part, rule, {spec.name: rows[0]["value"]})
    ring = next(t for t in fig.data if t.name == "current setting")
    assert (ring.x[0], ring.y[0]) == (pytest.approx(rows[0]["emitted_kl"]),
                                      pytest.approx(rows[0]["tokens_per_call"]))  # fmt: skip
    assert not [t for t in fig.data if t.name == f"{rule} (estimated)"]
    assert "above the limit" in compact_caption(False, False, rule)
    with pytest.raises(ValueError, match="more than one position"):
        run_curve(None, rule, 4)


def test_no_view_drops_a_setting_without_saying_why():
    rows = [
        {"setting": "s", "rule": "sps", "label": "sps", "emitted_reverse_kl": 0.0,
         "tokens_per_call": 1.9},
        {"setting": "a", "rule": "cactus", "label": "cactus δ=1",
         "emitted_reverse_kl": float("inf"), "tokens_per_call": 3.0},
        {"setting": "b", "rule": "cactus", "label": "cactus δ=3",
         "emitted_reverse_kl": float("inf"), "tokens_per_call": 3.5},
        {"setting": "c", "rule": "tas", "label": "tas", "emitted_reverse_kl": None,
         "tokens_per_call": 2.0},
    ]  # fmt: skip
    note = not_drawn(rows, "tokens_per_call", "emitted_reverse_kl")
    assert "2 settings of cactus (infinite" in note and "tas (not recorded" in note
    assert "sps" not in note
    assert not_drawn(rows[:1], "tokens_per_call", "emitted_reverse_kl") is None
    drawn = frontier_chart(rows, "tokens_per_call", "emitted_reverse_kl")
    assert {t.meta for t in drawn.data if t.meta} == {"sps"}  # the others are the note's
