"""`sweep --reference` refuses what it would ignore (and once recorded in the file's command as
if it had applied): tree drafting, a sweep file, the Ray backend, --n-prompts with
--missing-only; it overwrites the shipped file only with --force, whatever path names it; and
the file it writes has a new file's mode, not a temporary file's 0600."""

from __future__ import annotations

import os
import stat

import pytest
from test_cli_reference_flags import _refused

from cactus_core import cli
from cactus_core.experiments.sweeps import reference as ref


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    """Every refusal comes before a model loads."""
    monkeypatch.setattr(cli, "load_pair_from_args", lambda args: pytest.fail("loaded a pair"))


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--tree"], "--tree"),
        (["--tree-nodes", "12", "--tree-depth", "3"], "--tree-nodes, --tree-depth"),
        (["--export", "x.json"], "--export"),
        (["--backend", "ray", "--workers", "4"], "--backend, --workers"),
        (["--ray-address", "auto"], "--ray-address"),
    ],
)
def test_reference_refuses_drafting_exports_and_backends_it_would_ignore(
    flags, named, capsys, tmp_path
):
    out = str(tmp_path / "ref.json.gz")
    err = _refused(["sweep", "--reference", "--output", out, *flags], capsys)
    assert "--reference fixes the rules" in err and f"leave out {named} (" in err


def test_missing_only_keeps_the_files_prompts(capsys, tmp_path):
    out = str(tmp_path / "ref.json.gz")
    err = _refused(
        ["sweep", "--reference", "--missing-only", "--n-prompts", "3", "--output", out], capsys
    )
    assert "--missing-only keeps the prompts" in err and "--n-prompts" in err


@pytest.mark.parametrize("spelling", ["plain", "relative", "through a link"])
def test_the_shipped_file_is_overwritten_only_with_force(spelling, capsys, tmp_path, monkeypatch):
    stamp = ref.REFERENCE_FILE.stat().st_mtime_ns
    path = str(ref.REFERENCE_FILE)
    if spelling == "relative":
        monkeypatch.chdir(ref.REFERENCE_FILE.parent.parent)
        path = os.path.join(".", "data", "..", "data", ref.REFERENCE_FILE.name)
    elif spelling == "through a link":
        link = tmp_path / "ref.json.gz"
        link.symlink_to(ref.REFERENCE_FILE)
        path = str(link)
    err = _refused(["sweep", "--reference", "--n-prompts", "1", "--output", path], capsys)
    assert "would overwrite the shipped reference file" in err and "--force" in err
    assert ref.REFERENCE_FILE.stat().st_mtime_ns == stamp


def test_the_written_file_has_a_new_files_mode(tmp_path):
    old = os.umask(0o022)
    try:
        path = ref.write_reference({"format": ref.FORMAT}, tmp_path / "ref.json.gz")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["ref.json.gz"]  # no temporary file left
