"""Does a setting's text get worse: the paired task-score difference covers the true
difference 95% of the time on simulated paired prompts, sees a drop that unpaired Wilson
intervals miss, and says what the prompt set can detect; loops and unfinished answers are
read from the text; a sweep's rows and CSV carry the columns, 0 for the baseline itself."""

from __future__ import annotations

import csv
import io
import math
import random

import pytest
from scipy import stats

from cactus_core.experiments.quality.paired import (
    Z80,
    Z975,
    loops,
    paired_difference,
    share,
    t_quantile,
)
from cactus_core.experiments.quality.task_score import task_score
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import Setting, SweepConfig
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.maths.sampling import SamplingSettings


def test_t_quantiles_match_scipys():
    for dof in (1, 2, 3, 4, 5, 8, 20, 100):
        assert t_quantile(Z975, dof) == pytest.approx(stats.t.ppf(0.975, dof), abs=3e-3)
        assert t_quantile(Z80, dof) == pytest.approx(stats.t.ppf(0.8, dof), abs=3e-3)


def simulated(n: int, base: float, drop: float, seed: int) -> tuple[list[float], list[float]]:
    """Paired prompts: each is easy or hard for both (prompt difficulty shared, as the same
    prompt and seed make it), and the setting loses a prompt the baseline got with chance
    `drop`; the true difference of means is −base·drop."""
    rng = random.Random(seed)
    a, b = [], []
    for _ in range(n):
        right = rng.random() < base
        b.append(float(right))
        a.append(float(right and rng.random() >= drop))
    return a, b


def test_the_interval_covers_the_true_difference_95_percent_of_the_time():
    n, base, drop, reps = 60, 0.5, 0.3, 2000
    truth = -base * drop
    covered = sum(
        paired_difference(*simulated(n, base, drop, seed)).contains(truth) for seed in range(reps)
    )
    # 95% nominal; the binomial spread of 2,000 runs is ±1%, and t on {−1, 0, 1} runs a bit low
    assert 0.92 <= covered / reps <= 0.975, covered / reps


def test_pairing_sees_a_drop_that_unpaired_intervals_hide():
    a, b = simulated(58, 0.4, 0.5, seed=7)
    diff = paired_difference(a, b)
    assert diff.hi < 0  # the drop is detected
    sa, sb = (
        task_score(["word=x"] * 58, ["x" if v else "y" for v in a]),
        task_score(["word=x"] * 58, ["x" if v else "y" for v in b]),
    )
    (alo, ahi), (blo, bhi) = sa.interval, sb.interval
    assert alo <= bhi and blo <= ahi  # the unpaired Wilson intervals overlap
    assert diff.mean == pytest.approx(sa.mean - sb.mean)


def test_a_setting_against_itself_is_zero_and_says_what_it_could_detect():
    same = [1.0, 0.0, 1.0, 1.0, 0.0] * 12
    diff = paired_difference(same, same)
    assert (diff.mean, diff.lo, diff.hi) == (0.0, 0.0, 0.0)
    # no disagreement seen: the rule of three bounds it, so it is not 0
    assert diff.detectable == pytest.approx(
        (t_quantile(Z975, 59) + t_quantile(Z80, 59)) * math.sqrt(3 / 60) / math.sqrt(60)
    )
    assert paired_difference([], []).n == 0 and math.isnan(paired_difference([], []).mean)
    with pytest.raises(ValueError, match="not paired"):
        paired_difference([1.0], [1.0, 0.0])


@pytest.mark.parametrize(
    ("text", "looped"),
    [
        ("I am sure. " * 8, True),  # a sentence again and again
        ("the the the the the the the the the the the the", True),
        ("one two three four five six seven eight nine ten eleven twelve", False),
        ("Cacti store water in their stems and have spines. " * 2, False),  # twice is no loop
        ("short", False),
    ],
)
def test_loops_are_a_tail_that_repeats_one_span(text, looped):
    assert loops(text) == looped


def test_share_has_wilson_intervals():
    rate = share([True, False, False, False])
    assert rate.estimate == 0.25 and 0 < rate.lo < 0.25 < rate.hi < 1
    assert math.isnan(share([]).estimate)


def test_a_sweeps_rows_and_csv_carry_the_paired_columns(tiny_pair, tmp_path):
    prompts = ("What is 2 + 2?", "Say yes.", "Name a colour.", "What is 3 + 4?")
    config = SweepConfig(
        prompts=prompts,
        settings=(Setting.of("sps"), Setting.of("cactus", delta=3.0)),
        sampling=SamplingSettings(k=3, temperature=0.7, seed=0),
        max_new_tokens=12,
        chunk_size=2,
        answers=("number=4", "yesno=yes", "", "number=7"),
    )
    result = run_sweep(tiny_pair, config, SweepCache(tmp_path))
    rows = {r["setting"]: r for r in result.rows()}
    sps = next(r for r in rows.values() if r["rule"] == "sps")
    assert (sps["task_score_diff"], sps["task_score_diff_lo"], sps["task_score_diff_hi"]) == (
        0.0,
        0.0,
        0.0,
    )
    cactus = next(r for r in rows.values() if r["rule"] == "cactus")
    assert cactus["task_score_diff"] == pytest.approx(cactus["task_score"] - sps["task_score"])
    assert cactus["task_score_against"] == "sps"
    for r in rows.values():
        tokens = [p.tokens for p in result.get(r["setting"]).prompts]
        assert r["eos_rate"] == pytest.approx(sum(t < 12 for t in tokens) / len(tokens))
        assert 0 <= r["loop_rate"] <= 1 - r["eos_rate"]
    header = next(csv.reader(io.StringIO(result.to_csv())))
    for column in ("task_score_diff", "task_score_diff_lo", "task_score_diff_hi", "loop_rate",
                   "eos_rate"):  # fmt: skip
        assert column in header
