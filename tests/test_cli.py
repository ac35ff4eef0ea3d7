"""`python -m cactus_core generate|bench` on the tiny pair (the model loader is swapped out)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cactus_core import cli
from cactus_core.engine.decoding.generation import acceptance_by_position
from cactus_core.engine.decoding.trace import Trace
from cactus_core.experiments.bench import (
    HF_ASSISTED,
    VERIFIER_ONLY,
    default_rows,
    paired_ratio,
    run_bench,
)
from cactus_core.maths.rules import RULE_NAMES


@pytest.fixture
def use_tiny(monkeypatch, tiny_pair):
    monkeypatch.setattr(cli, "load_pair_from_args", lambda args: tiny_pair)
    return tiny_pair


def test_generate_prints_text_and_stats(use_tiny, capsys, tmp_path):
    path = tmp_path / "t.json"
    argv = ["generate", "Hi there", "--rule", "cactus", "--delta", "0.5", "--k", "3"]
    assert cli.main([*argv, "--max-new-tokens", "12", "--trace", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "cactus δ=0.5, k=3" in out and "tokens per call" in out
    assert err.strip()  # the streamed text
    trace = Trace.from_json(path)
    assert trace.meta["rule_params"] == {"delta": 0.5}
    assert trace.rounds and trace.rounds[0].positions


def test_generate_json_output(use_tiny, capsys):
    assert cli.main(["generate", "Hi", "--json", "--quiet", "--max-new-tokens", "5"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["token_ids"]) <= 5
    assert {"tokens_per_call", "acceptance_rate", "mean_emitted_kl"} <= set(data["stats"])


def test_generate_autoregressive_and_greedy(use_tiny, capsys):
    argv = ["generate", "Hi", "--json", "--quiet", "--max-new-tokens", "8", "--temperature", "0"]
    cli.main([*argv, "--autoregressive"])
    plain = json.loads(capsys.readouterr().out)
    cli.main([*argv, "--rule", "tas"])
    spec = json.loads(capsys.readouterr().out)
    assert plain["token_ids"] == spec["token_ids"]
    assert plain["stats"]["tokens_per_call"] == 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["generate", "Hi", "--rule", "sps", "--delta", "1"], "does not take --delta"),
        (["generate", "Hi", "--rule", "cactus", "--delta", "-1"], "delta"),
        (["generate", "Hi", "--k", "0"], "k must be"),
        (["generate", "Hi", "--top-p", "0"], "top_p"),
        (["generate", "", "--quiet"], "empty"),
        (["bench", "--prompts", "0"], "--prompts"),
        (["bench", "--rows", "nope"], "unknown rows"),
    ],
)
def test_bad_arguments_exit_with_a_clear_message(use_tiny, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_rows_and_table(use_tiny, capsys, tmp_path):
    out = tmp_path / "bench.json"
    argv = ["bench", "--prompts", "2", "--max-new-tokens", "6", "--top-p", "1.0", "0.9"]
    assert cli.main([*argv, "--rows", VERIFIER_ONLY, "sps", "cactus δ=1", HF_ASSISTED,
                     "--out", str(out)]) == 0  # fmt: skip
    text = capsys.readouterr()
    assert "### top-p 0.9" in text.out and "| sps |" in text.out
    assert "prompt 2/2" in text.err  # progress
    report = json.loads(out.read_text())
    assert report["command"].startswith("python -m cactus_core bench --prompts 2")
    rows = report["tables"]["1.0"]
    assert [r["row"] for r in rows] == [VERIFIER_ONLY, "sps", "cactus δ=1", HF_ASSISTED]
    assert rows[0]["tokens_per_call"] == 1.0 and rows[0]["modelled_speedup"] == 1.0
    assert rows[2]["mean_emitted_kl"] >= 0 and rows[1]["mean_emitted_kl"] == 0.0
    assert all(len(r["prompt_tokens_per_s"]) == 2 for r in rows)
    assert f"sps ÷ {HF_ASSISTED}, tokens/s:" in text.out
    # Where the speculative rows' rounds stop, and what their draft and verify steps cost.
    assert "| acceptance at 1 | acceptance at 2 |" in text.out
    sps = rows[1]
    assert len(sps["acceptance_by_position"]) == 4  # k = 4
    assert 0 <= sps["acceptance_by_position"][0] <= 1
    assert sps["draft_ms_per_round"] > 0 and sps["verify_ms_per_round"] > 0
    assert rows[0]["acceptance_by_position"] == [] and rows[0]["draft_ms_per_round"] is None


def test_acceptance_by_position_is_conditional_on_reaching_the_position():
    # 10 rounds: 4 accepted nothing, 3 one draft, 2 two, 1 all three.
    assert acceptance_by_position([4, 3, 2, 1]) == [6 / 10, 3 / 6, 1 / 3]
    assert acceptance_by_position([5, 0, 0]) == [0.0, None]
    assert acceptance_by_position([]) == []


def test_paired_ratio_pools_and_takes_the_median_per_prompt():
    rows = [
        {"row": "sps", "tokens_per_s": 6.0, "prompt_tokens_per_s": [4.0, 6.0, 9.0]},
        {"row": HF_ASSISTED, "tokens_per_s": 4.0, "prompt_tokens_per_s": [2.0, 6.0, 6.0]},
    ]
    assert paired_ratio(rows, "sps", HF_ASSISTED) == {"pooled": 1.5, "median": 1.5}
    assert paired_ratio(rows, "sps", VERIFIER_ONLY) is None


def test_default_rows_cover_the_benchmark():
    labels = [r.label for r in default_rows(with_trace_row=True)]
    assert labels[:2] == [VERIFIER_ONLY, "sps"]
    assert {"cactus δ=0.25", "cactus δ=0.5", "cactus δ=1", "cactus δ=2"} <= set(labels)
    assert {"tas ε=0.09, α=0.3", "topk k_top=5", "interp α=0.5", HF_ASSISTED} <= set(labels)
    assert {"cactus-exact δ=0.1", "cactus-budget KL≤0.1", "optimal KL≤0.1"} <= set(labels)
    # verifier-only, sps, cactus at 4 deltas, every other rule, the traced row, assisted
    assert len(labels) == 2 + 4 + (len(RULE_NAMES) - 2) + 2


def test_run_bench_speedup_is_relative_to_verifier_only(tiny_pair):
    rows = [r for r in default_rows(with_hf=False) if r.label in (VERIFIER_ONLY, "sps")]
    res = run_bench(tiny_pair, ["Hi", "Yo"], max_new_tokens=5, rows=rows)
    assert res[0]["speedup_median"] == pytest.approx(1.0)
    assert res[1]["speedup_median"] > 0


def test_module_entry_point_help():
    done = subprocess.run(
        [sys.executable, "-m", "cactus_core", "--help"], capture_output=True, text=True, check=True
    )
    assert "generate" in done.stdout and "bench" in done.stdout


def test_the_feature_draft_flag_reaches_load_pair(monkeypatch):
    from cactus_core.engine.loading import models

    seen = {}

    def fake_load_pair(**kwargs):
        seen.update(kwargs)
        raise ValueError("stop here")

    monkeypatch.setattr(models, "load_pair", fake_load_pair)
    args = cli.build_parser().parse_args(
        ["generate", "hi", "--feature-draft", "cactus_core/assets/feature_draft"]
    )
    with pytest.raises(ValueError, match="stop here"):
        cli.load_pair_from_args(args)
    assert seen["feature_draft"] == "cactus_core/assets/feature_draft"


def test_without_model_flags_the_cli_loads_the_default_embedded_pair(capsys):
    from cactus_core.cli.models import pair_kwargs_from_args
    from cactus_core.engine.loading.embedded_drafts import FEATURE_DRAFT_DIR, native_bfloat16

    def kwargs(*flags: str) -> dict:
        return pair_kwargs_from_args(cli.build_parser().parse_args(["generate", "hi", *flags]))

    plain = {"verifier": None, "draft": None, "device": "cpu"}
    # The default is the app's: the feature draft, in this CPU's faster dtype.
    fast = "bfloat16" if native_bfloat16() else "float32"
    assert kwargs("--device", "cpu") == {**plain, "feature_draft": FEATURE_DRAFT_DIR, "dtype": fast}
    assert kwargs("--device", "cpu", "--embedded-draft", "feature") == kwargs("--device", "cpu")
    for dtype in ("bfloat16", "float32"):
        assert kwargs("--device", "cpu", "--embedded-draft", f"feature-{dtype}") == {
            **plain, "feature_draft": FEATURE_DRAFT_DIR, "dtype": dtype
        }  # fmt: skip
    # The reference sweep's command measures the reference's pair on any CPU.
    ref = cli.build_parser().parse_args(["sweep", "--reference", "--device", "cpu"])
    assert pair_kwargs_from_args(ref)["dtype"] == "bfloat16"
    assert kwargs("--device", "cpu", "--embedded-draft", "3-layer") == {
        **plain, "feature_draft": None, "dtype": "float32"
    }  # fmt: skip
    assert kwargs("--device", "cpu", "--dtype", "float32")["dtype"] == "float32"
    # A typed pair is loaded as typed: no draft of the embedded pair is added to it.
    assert kwargs("--verifier", "v")["feature_draft"] is None
    assert kwargs("--verifier", "v")["dtype"] is None
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "hi", "--verifier", "v", "--embedded-draft", "feature"])
    assert (
        exc.value.code == 2
        and "--embedded-draft picks the embedded pair's draft" in capsys.readouterr().err
    )
