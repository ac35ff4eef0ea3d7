"""The Frontier page opens a sweep file (AppTest on the tiny pair): its frontier and the
per-task tuner's answers are those of the sweep that made it; a damaged file is one error."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core.experiments.sweeps import file as sf
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import SweepConfig, settings_from_grids
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.experiments.tuning.tasks import ALL_TASKS, answers_by_task
from cactus_core.maths.sampling import SamplingSettings

APP = Path(__file__).resolve().parent.parent / "app.py"


def tagged_sweep(pair, cache_dir):
    config = SweepConfig(
        prompts=("Write a haiku.", "What is 2 + 2?", "Sort a list.", "What is 7 x 6?"),
        tasks=("writing", "maths", "code", "maths"),
        settings=tuple(settings_from_grids({"cactus": [0.0, 0.3, 1.0, 3.0]})),
        sampling=SamplingSettings(temperature=1.0, k=3, seed=2),
        max_new_tokens=8,
        chunk_size=2,
    )
    return run_sweep(pair, config, SweepCache(cache_dir))


@pytest.fixture(scope="module")
def sweep_file(tiny_pair, tmp_path_factory):
    result = tagged_sweep(tiny_pair, tmp_path_factory.mktemp("c"))
    prov = sf.provenance("python -m cactus_core sweep --export s.json", "cuda", "ray", 8)
    return result, sf.export_sweep(result, prov, gzipped=True)


def _tuner_table(at):
    """The per-task tuner's table (the one with a "task" column), or None."""
    tables = [d.value for d in at.dataframe if "task" in d.value.columns]
    return tables[-1] if tables else None


@pytest.fixture
def frontier(tiny_pair_dirs, tmp_path, monkeypatch):
    monkeypatch.setenv("CACTUS_LAB_VERIFIER", str(tiny_pair_dirs[0]))
    monkeypatch.setenv("CACTUS_LAB_DRAFT", str(tiny_pair_dirs[1]))
    monkeypatch.setenv("CACTUS_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=240).run()
    at.switch_page("pages/frontier.py").run()
    assert not at.exception
    return at


def test_open_a_sweep_file_and_read_the_per_task_tuner(frontier, sweep_file):
    result, data = sweep_file
    at = frontier
    at.file_uploader(key="fr_file_upload").upload("s.json.gz", data, "application/gzip").run()
    assert not at.exception and not at.error
    assert any("on cuda (ray, 8 workers)" in t.value for t in at.text)
    at.number_input(key="fr_file_budget").set_value(0.02).run()
    table = _tuner_table(at)
    assert table is not None
    expected = answers_by_task(result, "cactus", 0.02)
    assert list(table["task"]) == [ALL_TASKS, "writing", "maths", "code"]
    assert list(table["prompts"]) == [4, 1, 2, 1]
    for row, answer in zip(table.to_dict("records"), expected, strict=True):
        if answer.fits and answer.enough:
            assert row["delta"] == f"{answer.value:.4g}"
    # 1 or 2 prompts a task: none has the five an answer of its own needs, and it says so
    assert all(row["delta"] == "–" for row in table.to_dict("records")[1:])
    assert any("No task has the 5 prompts" in c.value for c in at.caption)


def test_a_damaged_sweep_file_is_one_error_and_nothing_else(frontier, sweep_file):
    at = frontier
    damaged = sweep_file[1][:-40]
    at.file_uploader(key="fr_file_upload").upload("s.json.gz", damaged, "application/gzip").run()
    assert not at.exception
    assert len(at.error) == 1 and at.error[0].value.startswith("s.json.gz: ")
    assert _tuner_table(at) is None
