"""Feature-draft configs whose Llama fields transformers refuses late, or not at all until a
forward pass (an unknown activation, rope scaling that is not an object, an unknown rope type),
are one ModelLoadError naming the folder and the field, and one line from the CLI, not a
traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cactus_core.cli import main
from cactus_core.engine.loading.deployment import ModelLoadError
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.loading.models import with_feature_draft


@pytest.fixture(scope="module")
def saved(tiny_pair, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fd") / "good"
    FeatureDraft.tiny_for(tiny_pair.verifier, head_size=50, feature_layers=[0]).save(folder)
    return folder


BAD_LLAMA = {
    "an unknown activation": ({"hidden_act": "unknown"}, "llama.hidden_act"),
    "an activation of another kind": ({"hidden_act": 3}, "llama.hidden_act"),
    "rope scaling a string": ({"rope_scaling": "x"}, "llama.rope_scaling"),
    "an unknown rope type": ({"rope_scaling": {"rope_type": "nope", "factor": 2.0}}, "rope"),
    "an unknown rope type in its parameters": (
        {"rope_parameters": {"rope_theta": 10000.0, "rope_type": "nope"}},
        "llama.rope_parameters.rope_type",
    ),
    "rope parameters a list": ({"rope_parameters": [1]}, "llama.rope_parameters"),
    "a rope theta of text": (
        {"rope_parameters": {"rope_theta": "big", "rope_type": "default"}},
        "llama.rope_parameters.rope_theta",
    ),
    "a rope type with no factor": ({"rope_scaling": {"rope_type": "linear"}}, "rope"),
}


def _copy_with(saved: Path, folder: Path, llama: dict) -> Path:
    folder.mkdir()
    for f in saved.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    meta = json.loads((folder / "config.json").read_text())
    meta["llama"].update(llama)
    (folder / "config.json").write_text(json.dumps(meta))
    return folder


@pytest.mark.parametrize("case", list(BAD_LLAMA))
def test_a_llama_field_transformers_refuses_is_one_model_load_error(
    case, saved, tiny_pair, tmp_path
):
    llama, named = BAD_LLAMA[case]
    folder = _copy_with(saved, tmp_path / "fd", llama)
    with pytest.raises(ModelLoadError, match=named) as err:
        with_feature_draft(tiny_pair, folder)
    assert str(folder) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "case", ["an unknown activation", "rope scaling a string", "an unknown rope type"]
)
def test_the_cli_says_it_in_one_line(case, saved, tiny_pair_dirs, tmp_path, capsys):
    folder = _copy_with(saved, tmp_path / "fd", BAD_LLAMA[case][0])
    verifier, draft = (str(d) for d in tiny_pair_dirs)
    argv = ["generate", "hi", "--verifier", verifier, "--draft", draft, "--feature-draft"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, str(folder), "--quiet"])
    assert exit_.value.code != 0
    out = capsys.readouterr().err
    assert "Traceback" not in out
    assert out.strip().splitlines()[-1].startswith(f"error: {folder / 'config.json'}: llama.")


def test_the_shipped_draft_s_settings_still_load(saved, tiny_pair, tmp_path):
    folder = _copy_with(
        saved,
        tmp_path / "fd",
        {"hidden_act": "gelu", "rope_parameters": {"rope_theta": 500.0, "rope_type": "default"}},
    )
    assert with_feature_draft(tiny_pair, folder).feature_draft is not None
