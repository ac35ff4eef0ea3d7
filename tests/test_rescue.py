"""The smallest rescuing delta, checked against the rule's own h: Cactus at that delta accepts
the rejected draft with probability 1, at 0.99 × that delta it does not; q_n = 0 is never
rescued. Then the rescue curve and the rank histogram of a real run's rejected drafts."""

from __future__ import annotations

import math

import pytest
import torch

from cactus_core.app.shared.rescue import (
    Q_ZERO,
    RejectedDraft,
    rank_histogram,
    rejected_drafts,
    rescue_curve,
    rescue_summary,
    rescue_table,
    slider_top,
)
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.maths.rescue import NEVER, rescue_delta, rescued_share
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, make_rule


def cactus_accepts(q_n: float, p_n: float, delta: float) -> float:
    """a(n) of the default rule (Cactus) at delta, from its own whole-row protocol: a
    two-token row keeps q_n and p_n exact."""
    q = torch.tensor([q_n, 1.0 - q_n], dtype=torch.float64)
    p = torch.tensor([p_n, 1.0 - p_n], dtype=torch.float64)
    rule = make_rule(DEFAULT_RULE, **{make_rule(DEFAULT_RULE).swept().name: delta})
    return float(rule.accept_probs(q, p, torch.tensor(0)))


@pytest.mark.parametrize(
    "q_n, p_n",
    [(0.35, 0.80), (0.01, 0.9), (1e-6, 0.5), (0.5, 0.51), (0.2, 1.0), (0.9, 0.99)],
)
def test_rescue_delta_is_the_smallest_that_accepts_for_sure(q_n, p_n):
    delta = rescue_delta(q_n, p_n)
    assert delta > 0
    assert cactus_accepts(q_n, p_n, delta) == 1.0
    assert cactus_accepts(q_n, p_n, 0.99 * delta) < 1.0


def test_the_worked_example():
    # q_n = .35, p_n = .80: (p − q)² / (2q(1 − q)) = 0.2025 / 0.455
    assert rescue_delta(0.35, 0.80) == pytest.approx(0.2025 / 0.455, rel=1e-12)


def test_q_zero_is_never_rescued_and_q_above_p_needs_nothing():
    assert rescue_delta(0.0, 0.3) == NEVER
    assert cactus_accepts(0.0, 0.3, 1e6) == 0.0
    assert rescue_delta(0.4, 0.3) == 0.0
    assert rescue_delta(1.0, 0.3) == 0.0
    with pytest.raises(ValueError, match="q_n"):
        rescue_delta(-0.1, 0.3)
    with pytest.raises(ValueError, match="p_n"):
        rescue_delta(0.1, math.nan)


def test_rescued_share_is_a_rising_step():
    deltas = [0.1, 0.5, NEVER, 2.0]
    assert rescued_share(deltas, [0.0, 0.1, 1.0, 10.0]) == [0.0, 0.25, 0.5, 0.75]
    assert rescued_share([], [0.0, 1.0]) == [0.0, 0.0]


@pytest.fixture(scope="module")
def lossless_runs(tiny_pair):
    """Rejected drafts of real runs: full support, and top-p 0.5 (drafts outside q's nucleus)."""
    out = []
    for top_p in (1.0, 0.5):
        dec = SpeculativeDecoder(tiny_pair, LOSSLESS_RULE, k=4, temperature=0.8, top_p=top_p)
        out.append(dec.generate("Cacti", max_new_tokens=32, seed=1))
    return out


def test_every_rejected_draft_of_a_run_against_the_rules_h(lossless_runs):
    checked = never = 0
    for out in lossless_runs:
        drafts = rejected_drafts(out.trace.rounds)
        assert len(drafts) == out.stats.rejected_tokens
        for d in drafts:
            assert cactus_accepts(d.q_n, d.p_n, 0.0) < 1.0  # lossless did reject it
            if d.delta == NEVER:
                never += 1
                assert d.q_n == 0 and d.q_rank is None and d.delta_text == "never"
                assert cactus_accepts(d.q_n, d.p_n, 1e6) == 0.0
                continue
            assert cactus_accepts(d.q_n, d.p_n, d.delta) == 1.0
            assert cactus_accepts(d.q_n, d.p_n, 0.99 * d.delta) < 1.0
            checked += 1
    assert checked and never  # both kinds occurred


def test_curve_histogram_and_summary(lossless_runs):
    drafts = [d for out in lossless_runs for d in rejected_drafts(out.trace.rounds)]
    grid, shares = rescue_curve(drafts)
    assert grid == sorted(grid) and shares == sorted(shares)
    finite = [d.delta for d in drafts if d.delta != NEVER]
    assert grid[-1] == pytest.approx(slider_top())  # the curve spans the slider, no further
    within = [x for x in finite if x <= slider_top()]
    assert shares[-1] == pytest.approx(len(within) / len(drafts))
    labels, counts = rank_histogram(drafts)
    assert labels[-1] == Q_ZERO and sum(counts) == len(drafts)
    assert counts[-1] == sum(d.q_n == 0 for d in drafts)
    assert f"{len(drafts)} draft(s) rejected" in rescue_summary(drafts)
    assert rescue_summary([]) == "No draft was rejected."


def test_no_delta_past_the_slider_is_quoted():
    top = slider_top()
    drafts = [
        RejectedDraft(0, 0, "a", 0.5, 0.2, 2, 0.5 * top),
        RejectedDraft(1, 2, "b", 0.9, 0.001, 30, 300.0),
        RejectedDraft(2, 1, "c", 0.9, 0.0001, 40, 7000.0),
    ]
    rows = rescue_table(drafts)
    assert [r["where"] for r in rows] == ["row 1", "row 3", "row 2"]
    assert rows[1]["drafted token"] == "b"
    assert rows[0]["smallest rescuing delta"] == f"{0.5 * top:.3g}"
    assert rows[1]["smallest rescuing delta"] == f"> {top:g} (past the slider)"
    summary = rescue_summary(drafts)
    assert "300" not in summary and "7e+03" not in summary and "7000" not in summary
    assert f"1 pass for sure at some delta ≤ {top:g}" in summary
    assert "more than the slider offers" in summary
    assert "half of them by delta = " in rescue_summary(drafts[:1])
