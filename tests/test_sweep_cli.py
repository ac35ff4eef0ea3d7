"""`python -m cactus_core sweep` on the tiny pair saved to folders: JSON and CSV output, the
progress bar, the cache across invocations, the tuner flag and prompt-file errors."""

from __future__ import annotations

import csv
import io
import json

import pytest

from cactus_core.cli import main


@pytest.fixture(scope="module")
def folders(tiny_pair_dirs):
    return ["--verifier", str(tiny_pair_dirs[0]), "--draft", str(tiny_pair_dirs[1])]


def _args(folders, cache, *extra):
    return [
        "sweep", *folders, "--rules", "cactus", "--grid", "cactus=0,1", "--n-prompts", "2",
        "--max-new-tokens", "6", "--chunk-size", "2", "--cache-dir", str(cache), *extra,
    ]  # fmt: skip


def test_sweep_json_then_cached_csv(folders, tmp_path, capsys):
    out = tmp_path / "sweep.json"
    html = tmp_path / "frontier.html"
    args = ["--output", str(out), "--tune-kl", "0.3", "--html", str(html)]
    assert main(_args(folders, tmp_path / "c", *args)) == 0
    # tokens per call and acceptance against the limit (a report holds no speedup)
    assert html.read_text().count("plotly-graph-div") == 2
    err = capsys.readouterr().err
    assert "[" in err and "3/3 chunks" in err and "3 chunks computed" in err
    body = json.loads(out.read_text())
    settings = ["verifier-only", "cactus:delta=0", "cactus:delta=1"]
    assert [r["setting"] for r in body["rows"]] == settings
    assert body["config"]["max_new_tokens"] == 6 and body["prompts"] == 2
    assert body["tuned"]["cli_flags"].startswith("--rule cactus --delta ")
    assert body["tuned"]["measured_emitted_kl"]["mean"] <= 0.3

    assert main(_args(folders, tmp_path / "c", "--format", "csv")) == 0
    captured = capsys.readouterr()
    assert "0 chunks computed" in captured.err
    rows = list(csv.DictReader(io.StringIO(captured.out)))
    assert [r["setting"] for r in rows] == settings
    assert float(rows[2]["tokens_per_call"]) >= 1.0


def test_sweep_prompt_file_errors_name_the_line(folders, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": oops}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(_args(folders, tmp_path / "c", "--prompts", str(bad)))
    assert exc.value.code == 2
    assert "line 2: not valid JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(_args(folders, tmp_path / "c", "--grid", "cactus=0,x"))
    assert "'x' is not a number" in capsys.readouterr().err


def test_sweep_task_set_scores_every_setting(folders, tmp_path, capsys):
    out = tmp_path / "task.json"
    assert main(_args(folders, tmp_path / "c", "--task-set", "--output", str(out))) == 0
    rows = json.loads(out.read_text())["rows"]
    assert all(r["task_prompts"] == 2 for r in rows)
    assert all(r["task_score_lo"] <= r["task_score"] <= r["task_score_hi"] for r in rows)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(_args(folders, tmp_path / "c", "--task-set", "--prompts", str(out)))
    assert "--task-set is a prompt file of its own" in capsys.readouterr().err


def test_sweep_keep_quality_answers_and_confirms_on_the_held_out_split(folders, tmp_path, capsys):
    out = tmp_path / "q.json"
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text('{"prompt": "What is 5 times 3?", "answer": "number=15"}\n'
                       '{"prompt": "Is 12 less than 30?", "answer": "yesno=yes"}\n')  # fmt: skip
    extra = ["--task-set", "--rules", "cactus,sps", "--tune-kl", "100", "--keep-quality",
             "--max-drop", "0.5", "--confirm-on", str(heldout), "--output", str(out)]  # fmt: skip
    assert main(_args(folders, tmp_path / "c", *extra)) == 0
    body = json.loads(out.read_text())["quality_tuned"]
    assert body["kl_budget"] == 100 and body["max_drop"] == 0.5
    assert body["answer"]["verdict"] == "keeps quality"
    assert {c["label"] for c in body["candidates"]} >= {"sps", "cactus δ=0", "cactus δ=1"}
    err = capsys.readouterr().err
    assert "keeping quality: " in err
    if body["answer"]["label"] != "sps":  # lossless needs no confirmation run
        assert body["heldout_prompts"] == 2 and body["confirmed"] in (True, False)
        assert "Held out (2 prompts" in body["message"]
    # two prompts cannot see a 0.5 drop: the answer says so
    assert body["underpowered"] and "may go unseen" in body["message"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--keep-quality"], "--keep-quality needs --tune-kl"),
        (["--tune-kl", "1", "--keep-quality"], "needs prompts with answers"),
        (["--max-drop", "0.1"], "go with --keep-quality"),
        (
            ["--task-set", "--tune-kl", "1", "--keep-quality", "--confirm-on", "/nope.jsonl"],
            "--confirm-on '/nope.jsonl': cannot read it",
        ),
    ],
)
def test_keep_quality_flags_are_checked_before_the_sweep(folders, tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit):
        main(_args(folders, tmp_path / "c", *extra))
    assert message in capsys.readouterr().err
