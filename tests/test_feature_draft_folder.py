"""A damaged feature-draft folder is one ModelLoadError naming it, raised before anything is
built (a config asking for more parameters than the verifier has is refused from its numbers),
and the CLI prints it as one sentence."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from cactus_core.cli import main
from cactus_core.engine.loading.deployment import ModelLoadError
from cactus_core.engine.loading.feature_draft import HEAD_IDS_KEY, FeatureDraft
from cactus_core.engine.loading.models import with_feature_draft


@pytest.fixture(scope="module")
def saved(tiny_pair, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fd") / "good"
    FeatureDraft.tiny_for(tiny_pair.verifier, head_size=50, feature_layers=[0]).save(folder)
    return folder


def _edit_config(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        meta = json.loads((folder / "config.json").read_text())
        edit(meta)
        (folder / "config.json").write_text(json.dumps(meta))

    return apply


def _list_config(folder: Path) -> None:
    meta = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps([meta]))


def _set(path: str, value: object) -> Callable[[Path], None]:
    *outer, last = path.split(".")

    def edit(meta: dict) -> None:
        target = meta
        for key in outer:
            target = target[key]
        target[last] = value

    return _edit_config(edit)


def _head_ids(ids: list[int]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        tensors = load_file(str(folder / "model.safetensors"))
        tensors[HEAD_IDS_KEY] = torch.tensor(ids, dtype=torch.long)
        save_file(tensors, str(folder / "model.safetensors"))

    return apply


def _drop_tensor(folder: Path) -> None:
    tensors = load_file(str(folder / "model.safetensors"))
    tensors.pop("fc.weight")
    save_file(tensors, str(folder / "model.safetensors"))


DAMAGE = {
    "a list config": (_list_config, "not an object"),
    "no embed_scale": (_edit_config(lambda meta: meta.pop("embed_scale")), "embed_scale"),
    "no hidden size": (_edit_config(lambda m: m["llama"].pop("hidden_size")), "hidden_size"),
    "layers as a string": (_set("feature_layers", "0"), "feature_layers"),
    "a string layer count": (_set("llama.num_hidden_layers", "4"), "num_hidden_layers"),
    "400 layers": (_set("llama.num_hidden_layers", 400), "larger than its verifier"),
    "a huge MLP": (_set("llama.intermediate_size", 5_000_000), "larger than its verifier"),
    "a head id past the vocabulary": (_head_ids([3, 10**9]), "token ids in"),
    "a missing tensor": (_drop_tensor, "do not match its config.json"),
    "weights not safetensors": (
        lambda f: (f / "model.safetensors").write_bytes(b"garbage"),
        "not a readable safetensors",
    ),
    "no config": (lambda f: (f / "config.json").unlink(), "has no config.json"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_folder_is_one_model_load_error(case, saved, tiny_pair, tmp_path):
    folder = tmp_path / "fd"
    folder.mkdir()
    for f in saved.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    damage, message = DAMAGE[case]
    damage(folder)
    with pytest.raises(ModelLoadError, match=message) as err:
        with_feature_draft(tiny_pair, folder)
    assert str(folder) in str(err.value)


def test_the_good_folder_still_loads(saved, tiny_pair):
    pair = with_feature_draft(tiny_pair, saved)
    assert pair.feature_draft.head_ids.numel() == 50


def test_the_cli_prints_one_sentence(saved, tiny_pair_dirs, tmp_path, capsys):
    folder = tmp_path / "fd"
    folder.mkdir()
    for f in saved.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    _set("llama.num_hidden_layers", 400)(folder)
    verifier, draft = (str(d) for d in tiny_pair_dirs)
    argv = ["generate", "hi", "--verifier", verifier, "--draft", draft, "--feature-draft"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, str(folder), "--quiet"])
    assert exit_.value.code != 0
    out = capsys.readouterr().err
    assert "Traceback" not in out
    assert out.strip().splitlines()[-1].startswith(f"error: {folder / 'config.json'}: a draft of")
