"""The CLI checks its inputs and output paths before any model loads (issue 15): a bad path or
value is one line on stderr and exit code 2, never a traceback after a long run."""

from __future__ import annotations

import math

import pytest

from cactus_core import cli
from cactus_core.experiments.bench import run_bench
from cactus_core.maths.rules import RULES


@pytest.fixture
def no_models(monkeypatch):
    """Fail the test if anything tries to load models: every check must come first."""

    def refuse(args):
        raise AssertionError("the models were loaded before the arguments were checked")

    monkeypatch.setattr(cli, "load_pair_from_args", refuse)


def _fails(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line
    return err


def _integer_rule() -> tuple[str, str]:
    return next((name, p.name) for name, cls in RULES.items() for p in cls.params_spec if p.integer)


def test_missing_or_folder_prompt_files_fail_before_loading(no_models, tmp_path, capsys):
    err = _fails(["sweep", "--prompts", str(tmp_path / "missing.jsonl")], capsys)
    assert "--prompts" in err and "cannot read" in err
    err = _fails(["sweep", "--prompts", str(tmp_path)], capsys)
    assert "is a folder" in err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["generate", "hi", "--trace", "{missing}/t.json"], "--trace"),
        (["generate", "hi", "--trace", "{folder}"], "--trace"),
        (["sweep", "--output", "{missing}/out.json"], "--output"),
        (["sweep", "--output", "{folder}"], "--output"),
        (["sweep", "--html", "{missing}/f.html"], "--html"),
        (["sweep", "--html", "{folder}"], "--html"),
        (["bench", "--out", "{missing}/b.json"], "--out"),
        (["bench", "--out", "{folder}"], "--out"),
    ],
)
def test_bad_output_paths_fail_before_any_work(no_models, tmp_path, capsys, argv, flag):
    argv = [a.format(missing=tmp_path / "no" / "such", folder=tmp_path) for a in argv]
    err = _fails(argv, capsys)
    assert flag in err and ("does not exist" in err or "is a folder" in err)


@pytest.mark.parametrize("c", ["-0.25", "-1", "nan", "inf"])
def test_bench_refuses_a_negative_step_cost_up_front(no_models, capsys, c):
    assert "--c" in _fails(["bench", "--c", c, "--no-hf"], capsys)


def test_run_bench_refuses_a_negative_step_cost(tiny_pair):
    for c in (-0.25, -1.0, math.nan):
        with pytest.raises(ValueError, match="must be >= 0"):
            run_bench(tiny_pair, ["hi"], max_new_tokens=2, c=c, rows=[])


@pytest.mark.parametrize("command", [["generate", "hi"], ["bench"], ["sweep"]])
def test_a_seed_past_torchs_range_is_a_one_line_error(no_models, capsys, command):
    err = _fails([*command, "--seed", str(2**70)], capsys)
    assert "seed" in err and str(2**70) in err


def test_a_seed_whose_later_rows_overflow_is_refused(no_models, capsys):
    err = _fails(["sweep", "--seed", str(2**63 - 2), "--n-prompts", "5"], capsys)
    assert "--seed" in err


def test_an_integer_rule_parameter_refuses_a_fraction(no_models, capsys):
    rule, param = _integer_rule()
    flag = "--" + param.replace("_", "-")
    with pytest.raises(SystemExit) as exc:  # argparse's own check, with its usage line
        cli.main(["generate", "hi", "--rule", rule, flag, "2.7"])
    assert exc.value.code == 2 and "invalid int value: '2.7'" in capsys.readouterr().err
    err = _fails(["sweep", "--rules", rule, "--grid", f"{rule}=2.7"], capsys)
    assert "whole number" in err
