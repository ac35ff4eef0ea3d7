"""The Frontier page's "Open a sweep file" against hostile and look-alike files (AppTest on the
tiny pair): a file is read once whatever the reruns, failures too; a changed file of the same
name and size is read as the new file; the file's words are shown as plain text, so its fields
cannot load an image or draw a link; the operator's broken Ray setting costs Run sweep only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from test_sweep_file_page import tagged_sweep

from cactus_core.experiments.sweeps import file as sf
from cactus_core.experiments.sweeps.cache import canonical_json
from cactus_core.experiments.sweeps.ray_backend import RAY_ADDRESS_ENV, RAY_WORKERS_ENV

APP = Path(__file__).resolve().parent.parent / "app.py"
ATTACKER = "attacker.invalid"
HOSTILE = {
    "command": f"[click me](https://{ATTACKER}/x) ![pixel](https://{ATTACKER}/p.png)",
    "machine": f"<img src='https://{ATTACKER}/i.png'> **bold** `code` https://{ATTACKER}/bare",
    "device": f"![d](https://{ATTACKER}/d.png)",
}
HOSTILE_PAIR = (
    f"verifier=[v](https://{ATTACKER}/v)#1|draft=![d](https://{ATTACKER}/d.png)#2|dtype=torch.f"
)


@pytest.fixture(scope="module")
def result(tiny_pair, tmp_path_factory):
    return tagged_sweep(tiny_pair, tmp_path_factory.mktemp("c"))


def exported(result, command: str, fields: dict | None = None) -> bytes:
    prov = {**sf.provenance(command, "cuda", "ray", 8), **(fields or {})}
    return sf.export_sweep(result, prov)


@pytest.fixture
def frontier(tiny_pair_dirs, tmp_path, monkeypatch):
    monkeypatch.setenv("CACTUS_LAB_VERIFIER", str(tiny_pair_dirs[0]))
    monkeypatch.setenv("CACTUS_LAB_DRAFT", str(tiny_pair_dirs[1]))
    monkeypatch.setenv("CACTUS_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=240).run()
    at.switch_page("pages/frontier.py").run()
    assert not at.exception
    return at


@pytest.fixture
def reads(monkeypatch) -> list[bytes]:
    """Every file the loader reads."""
    seen: list[bytes] = []
    real = sf._load

    def counting(data):
        seen.append(bytes(data))
        return real(data)

    monkeypatch.setattr(sf, "_load", counting)
    return seen


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="fr_file_upload").upload(name, data, "application/json").run()
    assert not at.exception
    return at


def test_a_file_is_read_once_however_often_the_page_reruns_failures_too(frontier, result, reads):
    at = frontier
    bad = exported(result, "python -m cactus_core sweep --export a.json")[:-40]
    upload(at, "a.json", bad)
    for _ in range(3):
        at.run()
        assert len(at.error) == 1 and at.error[0].value.startswith("a.json: ")
    assert len(reads) == 1
    good = exported(result, "python -m cactus_core sweep --export a.json")
    upload(at, "a.json", good)
    for _ in range(3):
        at.run()
        assert not at.error
    assert len(reads) == 2


def test_a_changed_file_of_the_same_name_and_size_is_the_new_file(frontier, result, reads):
    at = frontier
    first = exported(result, "python -m cactus_core sweep --export a.json")
    second = exported(result, "python -m cactus_core sweep --export b.json")
    assert len(first) == len(second) and first != second
    upload(at, "s.json", first)
    assert any("--export a.json" in t.value for t in at.text)
    upload(at, "s.json", second)
    assert any("--export b.json" in t.value for t in at.text)
    assert not any("--export a.json" in t.value for t in at.text)
    assert len(reads) == 2


def test_the_files_words_are_plain_text_never_markdown(frontier, result):
    at = frontier
    body = json.loads(exported(result, "x", HOSTILE))["body"]
    body["pair"] = HOSTILE_PAIR
    upload(at, "evil.json", sf.frame(canonical_json(body)))
    assert not at.error
    texts = [t.value for t in at.text if ATTACKER in t.value]
    assert len(texts) == 1 and HOSTILE["command"] in texts[0]
    markdown = [*at.markdown, *at.caption, *at.info, *at.warning, *at.success, *at.title]
    assert not [m.value for m in markdown if ATTACKER in m.value]


@pytest.mark.parametrize(
    "env, ray_missing, said",
    [
        ({RAY_ADDRESS_ENV: "local", RAY_WORKERS_ENV: "abc"}, False, RAY_WORKERS_ENV),
        ({RAY_ADDRESS_ENV: "auto"}, True, "needs Ray: install it"),
    ],
)
def test_a_broken_ray_setting_costs_run_sweep_only(
    tiny_pair_dirs, tmp_path, monkeypatch, env, ray_missing, said
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if ray_missing:
        monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as without Ray
    monkeypatch.setenv("CACTUS_LAB_VERIFIER", str(tiny_pair_dirs[0]))
    monkeypatch.setenv("CACTUS_LAB_DRAFT", str(tiny_pair_dirs[1]))
    monkeypatch.setenv("CACTUS_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=240)
    at.session_state["fr_max_new"] = 8
    at.run()
    at.switch_page("pages/frontier.py").run()
    # every view of the page is there: the reference, the form, the k tuner, the file opener
    assert not at.exception and not at.error
    assert "Open a sweep file" in [h.value for h in at.subheader]
    at.button(key="fr_run").click().run()
    assert not at.exception
    assert len(at.error) == 1 and said in at.error[0].value
    assert "Open a sweep file" in [h.value for h in at.subheader]
