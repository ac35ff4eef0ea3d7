"""End to end: vLLM (V1 engine, CPU, enforce_eager) with the plugin on the embedded verifier,
4 prompts x 32 tokens at T = 0.7, speculating with ngram and with the embedded 3-layer
subset-head draft.

Each engine runs in its own process (`python -m cactus_vllm.run`). The rules reach it three
ways: the environment (ngram: CACTUS_VLLM_RULE is δ = 1), the speculative config (draft
model: δ = 1) and each request's `extra_args` (the stock rows ask for `sps`, others for
δ = 0). Same prompt, same seed: only the rule differs between the rows of a batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PROMPTS = 4
TOKENS = 32
SETTINGS = [
    {"name": "stock", "rule": {"rule": "sps"}},
    {"name": "delta0", "rule": {"rule": "cactus", "delta": 0.0}},
    {"name": "delta1", "rule": None},  # the deployment's rule: cactus δ = 1
]
DELTA1 = {"rule": "cactus", "delta": 1.0}


@pytest.fixture(scope="module")
def folders() -> dict[str, str]:
    """The embedded pair as vLLM folders, made by the lab's own conversion (cactus_vllm.export
    in the lab's environment), or CACTUS_VLLM_VERIFIER / CACTUS_VLLM_DRAFT when set."""
    if os.environ.get("CACTUS_VLLM_VERIFIER") and os.environ.get("CACTUS_VLLM_DRAFT"):
        return {
            "verifier": os.environ["CACTUS_VLLM_VERIFIER"],
            "draft": os.environ["CACTUS_VLLM_DRAFT"],
        }
    lab_python = os.environ.get("CACTUS_LAB_PYTHON", str(REPO / ".venv" / "bin" / "python"))
    env = {**os.environ, "PYTHONPATH": str(REPO / "integrations" / "vllm")}
    out = subprocess.run(
        [lab_python, "-m", "cactus_vllm.export"],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def start_engine(folder: Path, spec: dict, env: dict[str, str]) -> subprocess.Popen:
    """`python -m cactus_vllm.run` for spec in its own process, pinned to one core."""
    (folder / "spec.json").write_text(json.dumps(spec))
    full_env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **env}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cactus_vllm.run",
            str(folder / "spec.json"),
            str(folder / "out.json"),
        ],
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "log.txt", "w"),
    )


def base_spec(folders, method: str) -> dict:
    from cactus_core.engine.loading.prompts import builtin_prompts

    return {
        "verifier": folders["verifier"],
        "draft": folders["draft"],
        "method": method,
        "k": 3,
        "temperature": 0.7,
        "top_p": 1.0,
        "max_tokens": TOKENS,
        "seed": 0,
        "texts": builtin_prompts()[:PROMPTS],
        "settings": SETTINGS,
        "max_num_seqs": 12,
    }


@pytest.fixture(scope="module")
def runs(folders, tmp_path_factory) -> dict[str, dict]:
    """Both engines at once, each vLLM process bound to its own core (vLLM binds one thread
    per worker; left to itself it would put both on core 0).

    ngram: the environment's rule is δ = 1; one batch of stock, δ = 0 and δ = 1 rows.
    draft model: the speculative config's rule is δ = 1; two batches of the same shape after
    the same seed, so they draw the same drafts: stock and δ = 1, then δ = 0 and δ = 1. Its
    KL is not measured here (each position costs a sort of the vocabulary on this CPU;
    test_plugin.py checks that path)."""
    cores = ["0", "1"] if (os.cpu_count() or 1) >= 2 else ["0", "0"]
    ngram = {**base_spec(folders, "ngram"), "calls": [["stock", "delta0", "delta1"]]}
    draft = {
        **base_spec(folders, "draft_model"),
        "calls": [["stock", "delta1"], ["delta0", "delta1"]],
        "deployment_rule": DELTA1,
    }
    jobs = {}
    for (name, spec, env), core in zip(
        [
            ("ngram", ngram, {"CACTUS_VLLM_RULE": json.dumps(DELTA1)}),
            ("draft", draft, {"CACTUS_VLLM_RULE": "", "CACTUS_VLLM_METRICS": "counts"}),
        ],
        cores,
        strict=True,
    ):
        folder = tmp_path_factory.mktemp(name)
        env = {**env, "VLLM_CPU_OMP_THREADS_BIND": core}
        jobs[name] = (folder, start_engine(folder, spec, env))
    out = {}
    for name, (folder, proc) in jobs.items():
        code = proc.wait(timeout=1200)
        assert code == 0, (folder / "log.txt").read_text()[-4000:]
        out[name] = json.loads((folder / "out.json").read_text())
    return out


@pytest.fixture(scope="module")
def ngram(runs) -> dict:
    return runs["ngram"]


@pytest.fixture(scope="module")
def draft(runs) -> dict:
    return runs["draft"]


def labelled(call: dict) -> dict[str, dict]:
    names = {"sps": "stock", "cactus δ=0": "delta0", "cactus δ=1": "delta1"}
    return {names[label]: m for label, m in call["metrics"].items()}


def check_patch_ran(result: dict) -> None:
    status = result["status"]
    assert status["rules (V1 sampler)"] == "patched"
    assert status["CPU expand fix"] == "patched"
    for call in result["calls"]:
        by_setting = labelled(call)
        assert set(by_setting) == set(call["settings"])
        assert all(m["rounds"] > 0 for m in by_setting.values())
        assert all(
            len(o) == TOKENS or o[-1] == 2 for outs in call["outputs"].values() for o in outs
        )


def check_counts_are_vllms(call: dict) -> None:
    """The plugin's per-position counts, summed over rules, are vLLM's own counters."""
    ours = call["metrics"].values()
    assert sum(m["rounds"] for m in ours) == call["vllm"]["num_drafts"]
    per_pos = call["vllm"]["num_accepted_tokens_per_pos"]
    summed = [
        sum(m["accepted"][j] if j < len(m["accepted"]) else 0 for m in ours)
        for j in range(len(per_pos))
    ]
    assert summed == per_pos


def test_ngram_patch_ran_and_counts_match_vllm(ngram):
    check_patch_ran(ngram)
    check_counts_are_vllms(ngram["calls"][0])


def test_ngram_delta_zero_equals_stock(ngram):
    outputs = ngram["calls"][0]["outputs"]
    assert outputs["delta0"] == outputs["stock"]


def test_ngram_acceptance_rises_with_delta(ngram):
    m = labelled(ngram["calls"][0])
    assert m["delta1"]["acceptance_rate"] > m["delta0"]["acceptance_rate"]
    assert m["delta1"]["mean_acceptance_length"] > m["stock"]["mean_acceptance_length"]
    assert m["stock"]["emitted_kl_per_token"] == 0 == m["delta0"]["emitted_kl_per_token"]
    assert m["delta1"]["emitted_kl_per_token"] > 0


def test_draft_model_patch_ran_and_counts_match_vllm(draft):
    check_patch_ran(draft)
    assert draft["status"]["subset-head draft model"] == "registered"
    for call in draft["calls"]:
        check_counts_are_vllms(call)


def test_draft_model_delta_zero_equals_stock(draft):
    first, second = draft["calls"]
    assert second["outputs"]["delta0"] == first["outputs"]["stock"]
    assert second["outputs"]["delta1"] == first["outputs"]["delta1"]  # the same drafts again


def test_draft_model_acceptance_rises_with_delta(draft):
    first, second = (labelled(c) for c in draft["calls"])
    assert first["delta1"]["acceptance_rate"] > first["stock"]["acceptance_rate"]
    assert second["delta1"]["acceptance_rate"] > second["delta0"]["acceptance_rate"]
