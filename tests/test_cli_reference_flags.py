"""`sweep --reference` refuses the flags it would ignore, overwrites the shipped file only with
--force (or writes --output), and `--threads` stays within the machine's CPUs; each refusal
is one sentence, before any model loads."""

from __future__ import annotations

import os

import pytest

from cactus_core import cli
from cactus_core.experiments.sweeps import reference as ref


def _refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--temperature", "1.0"], "--temperature"),
        (["--top-p", "0.9", "--k", "2"], "--top-p, --k"),
        (["--rules", "sps"], "--rules"),
        (["--max-new-tokens", "8"], "--max-new-tokens"),
        (["--prompts", "mine.txt"], "--prompts"),
    ],
)
def test_reference_refuses_the_flags_it_would_ignore(flags, named, capsys, tmp_path):
    out = str(tmp_path / "ref.json.gz")
    err = _refused(["sweep", "--reference", "--output", out, *flags], capsys)
    assert "--reference fixes the rules" in err and named in err


def test_reference_needs_output_or_force_to_write(capsys, monkeypatch):
    stamp = ref.REFERENCE_FILE.stat().st_mtime_ns
    monkeypatch.setattr(cli, "load_pair_from_args", lambda args: pytest.fail("loaded a pair"))
    err = _refused(["sweep", "--reference", "--n-prompts", "1"], capsys)
    assert "--output PATH" in err and "--force" in err
    assert ref.REFERENCE_FILE.stat().st_mtime_ns == stamp


def test_reference_records_the_command_and_whether_the_pair_is_embedded(
    tiny_pair, tmp_path, monkeypatch
):
    seen = {}

    def build(pair, prompts, command, cache, progress, embedded):
        seen.update(command=command, embedded=embedded)
        return {"format": ref.FORMAT}

    monkeypatch.setattr(cli, "load_pair_from_args", lambda args: tiny_pair)
    monkeypatch.setattr(ref, "build_reference", build)
    out = tmp_path / "ref.json.gz"
    argv = ["sweep", "--reference", "--verifier", "some/model", "--n-prompts", "2"]
    assert cli.main([*argv, "--output", str(out), "--cache-dir", str(tmp_path)]) == 0
    assert seen["embedded"] is False
    assert seen["command"].startswith(ref.REFERENCE_COMMAND)
    assert "--verifier some/model" in seen["command"] and "--n-prompts 2" in seen["command"]


def test_threads_stay_within_the_cpus(capsys):
    cores = len(os.sched_getaffinity(0))
    err = _refused(["generate", "hi", "--threads", "100000"], capsys)
    assert err == f"error: --threads must be in [1, {cores}] (this machine's CPUs), got 100000"
    assert "--threads must be in" in _refused(["generate", "hi", "--threads", "0"], capsys)
