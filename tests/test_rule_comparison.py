"""The every-rule comparison: budgets pick the right winner, and the figure has every rule."""

from __future__ import annotations

import math

from cactus_core.app.playground.comparison_figure import rule_comparison_figure
from cactus_core.experiments.estimates.rule_comparison import (
    best_at_budgets,
    by_rule,
    comparison_markdown,
    efficiency_markdown,
    matched_kl_markdown,
    rule_points,
    tokens_at_kl,
)

ROWS = [
    {"rule": "sps", "label": "sps", "emitted_kl": 0.0, "tokens_per_call": 1.40},
    {"rule": "block", "label": "block", "emitted_kl": 0.0, "tokens_per_call": 1.42},
    {"rule": "cactus", "label": "cactus δ=0.3", "emitted_kl": 0.02, "tokens_per_call": 1.6},
    {"rule": "cactus", "label": "cactus δ=1", "emitted_kl": 0.08, "tokens_per_call": 1.9},
    {"rule": "interp", "label": "interp α=0.5", "emitted_kl": 0.05, "tokens_per_call": 1.7},
    {"rule": "tas", "label": "tas ε=0.01", "emitted_kl": math.nan, "tokens_per_call": 2.0},
    {"rule": "topk", "label": "topk k_top=1", "emitted_kl": None, "tokens_per_call": 2.0},
    {"rule": "verifier-only", "label": "verifier-only", "emitted_kl": 0.0, "tokens_per_call": 1.0},
]


def test_the_winner_at_each_budget_is_the_best_point_inside_it() -> None:
    points = rule_points(ROWS)
    assert len(points) == 5  # the baseline and the rows without a KL are left out
    winners = {w.budget: w for w in best_at_budgets(points, (0.0, 0.03, 0.06, 1.0))}
    assert winners[0.0].best.label == "block" and winners[0.0].runner_up.label == "sps"
    assert winners[0.03].best.label == "cactus δ=0.3"
    assert winners[0.06].best.label == "interp α=0.5"
    assert winners[0.06].best_per_rule["cactus"] == 1.6
    assert winners[1.0].best.label == "cactus δ=1"
    assert winners[1.0].runner_up.rule == "interp"  # the best point of another rule
    table = comparison_markdown(list(winners.values()))
    assert "| 0.03 | cactus δ=0.3 |" in table and table.count("\n") == 6


def test_figure_has_one_trace_per_rule_and_panel() -> None:
    points = rule_points(ROWS)
    fig = rule_comparison_figure({"top-p 1": points, "top-p 0.95": points})
    names = [t.name for t in fig.data]
    assert names.count("cactus") == 2 and len(fig.data) == 2 * len(by_rule(points))
    cactus = next(t for t in fig.data if t.name == "cactus")
    assert list(cactus.y) == [1.6, 1.9]  # in order of KL
    assert min(min(t.x) for t in fig.data) > 0  # lossless points sit on the log axis


def test_matched_kl_interpolates_on_the_other_rules_curve() -> None:
    points = rule_points(ROWS)
    cactus = by_rule(points)["cactus"]
    assert tokens_at_kl(cactus, 0.05) == 1.75
    assert math.isnan(tokens_at_kl(cactus, 0.5))
    table = matched_kl_markdown(points, "interp", "cactus")
    assert "| interp α=0.5 | 0.0500 | 1.700 |" in table and "| 1.750 |" in table


def test_efficiency_table_sets_acceptance_against_the_limit() -> None:
    row = {
        "rule": "optimal-price",
        "label": "optimal-price t=1",
        "scored_kl": 0.05,
        "acceptance_rate": 0.396,
        "acceptance_rate_lo": 0.37,
        "acceptance_rate_hi": 0.42,
        "expected_acceptance": 0.4,
        "limit_acceptance": 0.4,
        "efficiency": 1.0,
    }
    table = efficiency_markdown([row, {**row, "rule": "tas"}], ["optimal-price"])
    assert table.count("\n") == 3  # header, rule, one row
    assert "| 0.4000 | 0.4000 | 1.0000 | 0.990 |" in table
