"""The shipped quality reference: its three sweeps open, decode the same settings at the same
sampling, are the ones its commands make (same prompts, settings and budgets), hold the
calibration (verifier-only against sps, the same law, keeps 0 in its interval), and answer the
quality-constrained question with a held-out confirmation and no model."""

from __future__ import annotations

import shlex

import pytest

from cactus_core.cli import build_parser
from cactus_core.cli.sweep import sweep_config_from_args
from cactus_core.experiments.quality.reference import (
    PARTS,
    QUALITY_REFERENCE_COMMANDS,
    load_quality_reference,
)
from cactus_core.experiments.sweeps.config import BASELINE


@pytest.fixture(scope="module")
def ref():
    return load_quality_reference()


def _rows(result) -> dict[str, dict]:
    return {r["label"]: r for r in result.rows()}


@pytest.mark.parametrize("part", PARTS)
def test_each_part_is_what_its_command_makes(ref, part):
    argv = shlex.split(QUALITY_REFERENCE_COMMANDS[part])[3:]  # after python -m cactus_core
    config = sweep_config_from_args(build_parser().parse_args(argv))
    shipped = getattr(ref, part).config
    assert shipped.prompts == config.prompts
    assert shipped.settings == config.settings
    assert shipped.sampling == config.sampling
    assert shipped.max_new_tokens == config.max_new_tokens
    assert shipped.answers == config.answers


def test_the_three_sweeps_decode_the_same_settings(ref):
    ids = [s.setting.id for s in ref.tune.settings]
    assert [s.setting.id for s in ref.heldout.settings] == ids
    assert [s.setting.id for s in ref.long.settings] == ids
    assert ref.tune.model_identity == ref.heldout.model_identity == ref.long.model_identity
    assert len(ref.tune.config.prompts) + len(ref.heldout.config.prompts) >= 400


def test_the_calibration_holds_and_delta_3_is_detectably_worse_on_the_held_out_split(ref):
    for result in (ref.tune, ref.heldout):
        rows = _rows(result)
        base = rows[BASELINE]  # verifier-only against sps: the same law on other coins
        assert base["task_score_diff_lo"] <= 0 <= base["task_score_diff_hi"]
    held = _rows(ref.heldout)  # prompts no test was written for, never tuned on
    zero = held["cactus δ=0"]
    assert zero["task_score_diff_lo"] <= 0 <= zero["task_score_diff_hi"]
    assert held["cactus δ=3"]["task_score_diff_hi"] < 0


def test_the_reference_answers_and_confirms_without_a_model(ref):
    answer = ref.answer(kl_budget=0.5)
    assert answer.chosen is not None and answer.chosen.keeps
    assert answer.chosen.emitted_kl <= 0.5
    others = [c for c in answer.candidates if c.keeps]
    assert answer.chosen.tokens_per_call == max(c.tokens_per_call for c in others)
    if answer.chosen.setting.rule != "sps":
        assert answer.confirmation is not None
        assert answer.heldout_prompts == len(ref.heldout.config.prompts)
        assert "Held out" in answer.message()
    assert ref.caption().startswith("Shipped quality reference")
