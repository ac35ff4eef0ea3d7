"""The app's Plotly figure builders: right traces, right numbers, clear errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cactus_core.app.shared import figures


def test_distribution_bars_one_trace_per_series_in_fixed_colours():
    fig = figures.distribution_bars(
        ["decode", "generate", "output"],
        {
            "p": [0.05, 0.8, 0.15],
            "q": torch.tensor([0.3, 0.35, 0.35]),
            "h": np.array([0.2, 0.6, 0.2]),
        },
        title="t",
        highlight=1,
    )
    assert [t.name for t in fig.data] == ["p (draft)", "q (verifier)", "h (rule's target)"]
    assert fig.data[0].marker.color == figures.SERIES_COLOURS["p"]
    assert fig.data[1].marker.color == figures.SERIES_COLOURS["q"]
    assert list(fig.data[0].y) == pytest.approx([0.05, 0.8, 0.15])
    assert fig.layout.barmode == "group"
    assert fig.layout.annotations[0].x == "generate"


def test_distribution_bars_keeps_repeated_and_whitespace_tokens_apart():
    fig = figures.distribution_bars([" a", " a", "\n"], {"q": [0.2, 0.3, 0.5]})
    assert list(fig.data[0].x) == ["␣a", "␣a (2)", "↵"]


@pytest.mark.parametrize(
    ("series", "message"),
    [
        ({"p": [0.5, 0.5, 0.0]}, "2 labels"),
        ({}, "at least one series"),
        ({"p": [0.5, float("nan")]}, "NaN"),
    ],
)
def test_distribution_bars_rejects_bad_input(series, message):
    with pytest.raises(ValueError, match=message):
        figures.distribution_bars(["a", "b"], series)


def test_distribution_bars_rejects_highlight_out_of_range():
    with pytest.raises(ValueError, match="highlight"):
        figures.distribution_bars(["a", "b"], {"p": [0.5, 0.5]}, highlight=2)


def test_acceptance_by_token_one_trace_per_rule():
    fig = figures.acceptance_by_token(
        ["a", "b"], {"sps": [0.4, 1.0], "cactus δ=0.5": [0.8, 1.0]}, drafted=0
    )
    assert [t.name for t in fig.data] == ["sps", "cactus δ=0.5"]
    assert list(fig.layout.yaxis.range) == [0, 1.05]
    assert len(fig.layout.shapes) == 1


def test_rule_summary_plots_infinite_kl_at_the_top_and_labels_it():
    fig = figures.rule_summary(["sps", "tas"], [0.4, 0.9], [0.0, math.inf])
    bars, kl = fig.data
    assert list(bars.y) == pytest.approx([0.4, 0.9])
    assert [c[1] for c in kl.customdata] == ["0.0000", "inf"]
    assert all(math.isfinite(v) for v in kl.y)
    assert kl.yaxis == "y2"
    # each rule's bar and diamond stand side by side under its name, never on one spot
    assert list(fig.layout.xaxis.ticktext) == ["sps", "tas"]
    for b, d, tick in zip(bars.x, kl.x, fig.layout.xaxis.tickvals, strict=True):
        assert b < tick < d and d - b >= bars.width - 1e-9


def test_rule_summary_rejects_ragged_input():
    with pytest.raises(ValueError, match="differ in length"):
        figures.rule_summary(["sps"], [0.4, 0.5], [0.0])


@pytest.mark.parametrize(("a", "u", "fate"), [(0.8, 0.3, "accepted"), (0.3, 0.8, "rejected")])
def test_coin_figure_colour_follows_the_decision(a, u, fate):
    fig = figures.coin_figure(a, u)
    assert fig.data[0].marker.color == figures.FATE_COLOURS[fate]
    assert list(fig.data[1].x) == [u]
    assert f"u = {u:.3f}" in fig.layout.title.text


def test_coin_figure_rejects_probabilities_outside_unit_interval():
    with pytest.raises(ValueError, match="accept_prob"):
        figures.coin_figure(1.5, 0.2)


def test_taylor_gap_draws_the_diagonal_and_both_forms():
    d = [0.0, 0.5, 1.0]
    fig = figures.taylor_gap(d, [0.0, 0.6, 1.3], [0.0, 0.5, 1.0], current_delta=0.5)
    assert fig.data[0].name == "KL = delta"
    assert list(fig.data[0].y) == d
    assert list(fig.data[1].y) == pytest.approx([0.0, 0.6, 1.3])


def test_round_timeline_emitted_above_zero_rejected_below():
    fig = figures.round_timeline([2, 4], [4, 4], [False, True])
    by_name = {t.name: list(t.y) for t in fig.data}
    assert by_name["accepted draft"] == [2, 4]
    assert by_name["recovered"] == [1, 0]
    assert by_name["bonus"] == [0, 1]
    assert by_name["rejected draft"] == [-1, 0]


def test_round_timeline_rejects_more_accepted_than_drafted():
    with pytest.raises(ValueError, match="outside"):
        figures.round_timeline([5], [4], [True])
