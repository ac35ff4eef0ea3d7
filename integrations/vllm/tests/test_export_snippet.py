"""The lab's "Use this setting" vLLM blocks for the embedded pair, run exactly as the panel
writes them, from a folder outside the repository: the install block (the plugin from the
checkout's absolute path, the embedded pair's folders through the lab's own export) in a fresh
venv over this one's packages, then the offline Python block as a file in the same shell.
It must load the plugin, decode with probabilistic drafting under the exported rule, and print
an answer. The blocks are built by the lab's Python (CACTUS_LAB_PYTHON, as make test-vllm sets
it), since the lab's app code does not import in vLLM's environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))  # the lab's helper for running pasted snippets

from pasted import overlay_venv, run_pasted  # noqa: E402

BUILD = """
import json
from cactus_core.app.shared.engine_export import export_blocks
from cactus_core.app.shared.export_setting import decode_export
from cactus_core.app.shared.settings import AppSettings
from cactus_core.maths.rules import make_rule
from cactus_core.maths.sampling import SamplingSettings

settings = AppSettings(sampling=SamplingSettings(temperature=0.7, top_p=0.95, k=3))
setting = decode_export(settings, make_rule("cactus", delta=0.5), None)
vllm = next(e for e in export_blocks(setting) if e.engine == "vLLM")
print(json.dumps({b.title: b.code for b in vllm.blocks}))
"""


def exported_blocks() -> dict[str, str]:
    lab_python = os.environ.get("CACTUS_LAB_PYTHON", str(REPO / ".venv" / "bin" / "python"))
    out = subprocess.run(
        [lab_python, "-c", BUILD], cwd=REPO, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_vllm_snippet_runs_as_pasted(tmp_path):
    blocks = exported_blocks()
    assert str(REPO / "integrations" / "vllm") in blocks["Install"]
    assert "'draft_sample_method': 'probabilistic'" in blocks["Offline (Python)"]
    bin_dir = overlay_venv(tmp_path, sys.executable)
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "snippet.py").write_text(blocks["Offline (Python)"])
    metrics = work / "metrics.json"
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",  # the CPU note's setting, small for the test machine
        "HF_HUB_OFFLINE": "1",
        "CACTUS_VLLM_METRICS_FILE": str(metrics),
        "CACTUS_VLLM_METRICS": "counts",
    }
    ran = run_pasted(blocks["Install"] + "\npython snippet.py", work, bin_dir, env=env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-6000:]
    assert len(ran.stdout.split()) >= 5, ran.stdout  # the answer
    tallies = json.loads(metrics.read_text())["rules"]
    assert tallies["cactus δ=0.5"]["rounds"] > 0  # the exported rule judged the drafts
    plugin = run_pasted(
        "python -c 'import cactus_vllm; print(cactus_vllm.__file__)'", work, bin_dir
    )
    assert "site-packages" in plugin.stdout and str(REPO) not in plugin.stdout
