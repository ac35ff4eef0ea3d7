"""The task set and the tuner that keeps quality.

The task set: its shipped files are what the generator makes from its seed, hold at least 400
checkable prompts in the measured families only (none near 0 or 1), with a held-out split that
shares no prompt with the tuning one. The tuner: on sweeps built from known per-prompt outcomes
it picks the setting with the most tokens per call among those within the KL budget whose
answers are not detectably worse and whose loops do not rise, says when the set cannot see the
drop asked about, and its held-out confirmation runs the chosen setting against sps."""

from __future__ import annotations

import json
import math
import random

import pytest

from cactus_core.experiments.quality import task_set as ts
from cactus_core.experiments.quality.task_score import check_answer
from cactus_core.experiments.quality.tune import KEEPS, confirm, quality_answer
from cactus_core.experiments.sweeps.config import BASELINE, Setting, SweepConfig
from cactus_core.experiments.sweeps.records import ChunkRecord, PromptRecord
from cactus_core.experiments.sweeps.run import SettingResult, SweepResult
from cactus_core.maths.sampling import SamplingSettings


def test_the_shipped_task_set_is_the_generators_output():
    tune, heldout = ts.task_set()
    assert ts.TUNE_FILE.read_text(encoding="utf-8") == ts.lines(tune)
    assert ts.HELDOUT_FILE.read_text(encoding="utf-8") == ts.lines(heldout)


def test_the_task_set_has_power_and_a_disjoint_held_out_split():
    tune, heldout = ts.task_set()
    assert len(tune) + len(heldout) >= 400
    assert not {r.prompt for r in tune} & {r.prompt for r in heldout}
    assert {r.family for r in tune} == {r.family for r in heldout} == set(ts.FAMILIES)
    for family in ts.FAMILIES:
        assert ts.MIN_ACCURACY <= ts.FAMILY_ACCURACY[family] <= ts.MAX_ACCURACY
    left_out = set(ts.CANDIDATES) - set(ts.FAMILIES)
    for family in left_out:  # measured, and outside the band
        acc = ts.FAMILY_ACCURACY[family]
        assert acc < ts.MIN_ACCURACY or acc > ts.MAX_ACCURACY
    for row in tune + heldout:
        check_answer(row.answer)
        assert json.loads(row.to_json())["task"] == row.family
    # interleaved: the first prompts of a file cover every family
    assert {r.family for r in tune[: len(ts.FAMILIES)]} == set(ts.FAMILIES)


def test_the_generator_is_deterministic_and_seeded():
    assert ts.draw(["sums"], seed=1) == ts.draw(["sums"], seed=1)
    assert ts.draw(["sums"], seed=1) != ts.draw(["sums"], seed=2)
    for row in ts.draw(["sums", "differences"]):
        a, op, b = row.prompt.split("?")[0].split()[-3:]
        value = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert row.answer == f"number={value}"


N = 120


def outcome(rng: random.Random, base: list[bool], drop: float) -> list[bool]:
    """Each prompt the baseline got right is lost with chance `drop`."""
    return [right and rng.random() >= drop for right in base]


def setting_result(setting: Setting, right: list[bool], kl: float, tpc: float,
                   looping: float = 0.0, seed: int = 0) -> SettingResult:  # fmt: skip
    rng = random.Random(seed)
    rows = []
    for i, ok in enumerate(right):
        loop = rng.random() < looping
        text = ("4" if ok else "5") + " so" * 13 * loop  # a loop after the answer
        tokens = 64 if loop else 20
        calls = max(1, round(tokens / tpc))
        rows.append(PromptRecord(index=i, text=text, tokens=tokens, verifier_calls=calls,
                                 decided=tokens, accepted=tokens // 2,
                                 emitted_kl_sum=kl * tokens, nll_sum=tokens, scored=0,
                                 scored_kl_sum=0.0, expected_accept_sum=0.0))  # fmt: skip
    return SettingResult(setting, [ChunkRecord(setting, rows, 1.0, None)])


def sweep(specs: dict[Setting, SettingResult]) -> SweepResult:
    settings = tuple(specs)
    config = SweepConfig(
        prompts=tuple(f"p{i}" for i in range(N)),
        settings=settings,
        sampling=SamplingSettings(k=4, temperature=0.7, seed=0),
        max_new_tokens=64,
        chunk_size=N,
        answers=("number=4",) * N,
    )
    base = setting_result(Setting.of(BASELINE), [True] * N, 0.0, 1.0)
    results = [specs[s] for s in settings]
    for r in results:
        r.baseline = base.chunks
    return SweepResult(config, "test", results, base)


def tune_sweep() -> SweepResult:
    rng = random.Random(3)
    base = [rng.random() < 0.5 for _ in range(N)]
    sps, d1 = Setting.of("sps"), Setting.of("cactus", delta=0.3)
    d2, d3 = Setting.of("cactus", delta=1.0), Setting.of("cactus", delta=3.0)
    return sweep({
        sps: setting_result(sps, base, 0.0, 1.9),
        d1: setting_result(d1, outcome(rng, base, 0.0), 0.2, 2.5),  # keeps every answer
        d2: setting_result(d2, outcome(rng, base, 0.6), 0.5, 3.2),  # loses 60% of the right ones
        d3: setting_result(d3, base, 0.8, 3.4, looping=0.5, seed=9),  # loops half the time
    })  # fmt: skip


def test_the_answer_is_the_fastest_setting_that_keeps_quality():
    result = tune_sweep()
    answer = quality_answer(result, kl_budget=1.0)
    verdicts = {c.setting.label: c.verdict for c in answer.candidates}
    assert answer.chosen is not None and answer.chosen.setting == Setting.of("cactus", delta=0.3)
    assert verdicts["cactus δ=0.3"] == KEEPS and verdicts["sps"] == KEEPS
    assert verdicts["cactus δ=1"].startswith("answers detectably worse")
    assert verdicts["cactus δ=3"].startswith("detectably more loops")
    assert answer.per_rule["cactus"].setting.value == pytest.approx(0.3)
    # a budget below δ = 0.3's KL leaves sps
    tight = quality_answer(result, kl_budget=0.1)
    assert tight.chosen is not None and tight.chosen.setting.rule == "sps"
    assert (
        "over the budget" in {c.setting.label: c.verdict for c in tight.candidates}["cactus δ=0.3"]
    )
    assert "cactus δ=0.3" in answer.message()


def test_it_says_when_the_set_cannot_see_the_drop_asked_about():
    result = tune_sweep()
    coarse = quality_answer(result, kl_budget=1.0, max_drop=0.01)
    assert coarse.underpowered and "may go unseen" in coarse.message()
    assert coarse.detectable > 0.01
    fine = quality_answer(result, kl_budget=1.0, max_drop=0.5)
    assert not fine.underpowered and "may go unseen" not in fine.message()
    with pytest.raises(ValueError, match="drop"):
        quality_answer(result, kl_budget=1.0, max_drop=0)
    with pytest.raises(ValueError, match="budget"):
        quality_answer(result, kl_budget=math.nan)


def test_the_held_out_confirmation_runs_the_answer_against_sps(tiny_pair, tmp_path):
    from cactus_core.experiments.sweeps.cache import SweepCache
    from cactus_core.experiments.sweeps.run import run_sweep

    prompts = ("What is 2 + 2?", "What is 3 + 4?", "Say yes.", "What is 1 + 1?")
    answers = ("number=4", "number=7", "yesno=yes", "number=2")
    config = SweepConfig(
        prompts=prompts,
        settings=(Setting.of("sps"), Setting.of("cactus", delta=0.1)),
        sampling=SamplingSettings(k=3, temperature=0.7, seed=0),
        max_new_tokens=8,
        chunk_size=4,
        answers=answers,
    )
    cache = SweepCache(tmp_path)
    tuned = run_sweep(tiny_pair, config, cache)
    answer = quality_answer(tuned, kl_budget=100.0, max_drop=0.5)
    assert answer.chosen is not None
    if answer.chosen.setting.rule == "sps":  # nothing to confirm: lossless
        assert confirm(tiny_pair, answer, config, (prompts, ("",) * 4, answers), cache) is answer
        return
    done = confirm(tiny_pair, answer, config, (prompts[::-1], ("",) * 4, answers[::-1]), cache)
    assert done.heldout_prompts == 4 and done.confirmed is not None
    assert done.confirmation is not None and done.confirmation.lo <= done.confirmation.hi
    assert "Held out (4 prompts" in done.message()
