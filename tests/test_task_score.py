"""The task score: answers checked in the decoded text, the built-in task set, and a sweep's
rows carrying each setting's score with its Wilson interval."""

from __future__ import annotations

import math

import pytest

from cactus_core.experiments.quality.task_score import (
    TaskScore,
    check_answer,
    passes,
    task_score,
)
from cactus_core.experiments.quality.task_set import FAMILIES, TUNE_FILE
from cactus_core.experiments.sweeps.config import (
    SweepConfig,
    parse_answered_prompt_file,
    settings_from_grids,
)
from cactus_core.experiments.sweeps.run import run_sweep


@pytest.mark.parametrize(
    ("spec", "text", "ok"),
    [
        ("number=63", "100 − 37 = 63.", True),
        ("number=63", "100 minus 37 is 2.", False),
        ("number=63", "The answer is 63, since 100 - 37 = 63", True),
        ("number=2.5", "It is 2,5", True),
        ("number=7", "no digits here", False),
        ("word=Paris|paris", "The capital of France is Paris.", True),
        ("word=Paris", "Parisian food", False),
        ("yesno=no", "No, it is not. Yes, really.", True),
        ("yesno=no", "Yes. No.", False),
        ("yesno=yes", "I cannot say.", False),
    ],
)
def test_passes(spec: str, text: str, ok: bool) -> None:
    assert passes(spec, text) is ok


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("63", "kind=form"),
        ("colour=red", "unknown answer kind"),
        ("number=", "no accepted form"),
        ("number=sixty", "must be a number"),
        ("yesno=maybe", "yes or no"),
    ],
)
def test_bad_answer_specs(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_answer(spec)


def test_wilson_interval_of_a_score() -> None:
    s = TaskScore(15, 58)
    lo, hi = s.interval
    assert s.mean == pytest.approx(15 / 58)
    assert lo == pytest.approx(0.1635, abs=1e-4) and hi == pytest.approx(0.3838, abs=1e-4)
    assert all(math.isnan(x) for x in TaskScore(0, 0).interval)
    assert task_score(["number=4", "", "word=blue"], ["2+2=4", "x", "red"]) == TaskScore(1, 2)
    with pytest.raises(ValueError, match="answers for"):
        task_score(["number=4"], [])


def test_the_built_in_task_set_parses_with_an_answer_for_every_prompt() -> None:
    prompts, tasks, answers = parse_answered_prompt_file(TUNE_FILE.name, TUNE_FILE.read_bytes())
    assert len(prompts) == len(answers) == 324 and all(answers)
    assert set(tasks) == set(FAMILIES)
    for a in answers:
        check_answer(a)


def test_a_prompt_file_answer_is_checked() -> None:
    data = b'{"prompt": "2+2?", "answer": "number=4"}\n{"prompt": "hi"}\n'
    assert parse_answered_prompt_file("p.jsonl", data) == (
        ["2+2?", "hi"],
        ["", ""],
        ["number=4", ""],
    )
    with pytest.raises(ValueError, match="unknown answer kind"):
        parse_answered_prompt_file("p.jsonl", b'{"prompt": "x", "answer": "colour=red"}\n')


def test_a_sweep_scores_every_setting(tiny_pair) -> None:
    prompts, _, answers = parse_answered_prompt_file(TUNE_FILE.name, TUNE_FILE.read_bytes())
    config = SweepConfig(
        prompts=tuple(prompts[:4]),
        settings=tuple(settings_from_grids({"sps": [], "cactus": [1.0]})),
        max_new_tokens=8,
        chunk_size=2,
        answers=tuple(answers[:4]),
    )
    result = run_sweep(tiny_pair, config, None)
    for row in result.rows():
        assert row["task_prompts"] == 4
        assert row["task_score_lo"] <= row["task_score"] <= row["task_score_hi"]
        texts = [r.text for r in sorted(result.get(row["setting"]).prompts, key=lambda r: r.index)]
        assert row["task_score"] == task_score(answers[:4], texts).mean
    plain = run_sweep(tiny_pair, SweepConfig(prompts=config.prompts, settings=config.settings,
                                             max_new_tokens=8, chunk_size=2), None)  # fmt: skip
    assert all(r["task_prompts"] == 0 and math.isnan(r["task_score"]) for r in plain.rows())
