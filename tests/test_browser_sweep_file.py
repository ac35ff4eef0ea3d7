"""Open a sweep file on the Frontier page in a real Chromium and read the per-task tuner: the
file (a tagged sweep on the tiny pair, exported as by `sweep --export`) is chosen through the
page's uploader, and the tuner's table shows the answer for all prompts and for each task."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from streamlit_server import tiny_pair_app
from test_sweep_file_page import tagged_sweep

from cactus_core.experiments.sweeps import file as sf
from cactus_core.experiments.tuning.tasks import MIN_TASK_PROMPTS, answers_by_task, spread

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def server(tiny_pair_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-sweep-file")
    with tiny_pair_app(tiny_pair_dirs, root) as url:
        yield url, root


def test_open_a_sweep_file_and_read_the_per_task_tuner(server, browser, tiny_pair):
    from playwright.sync_api import expect

    url, root = server
    result = tagged_sweep(tiny_pair, root / "sweep")
    path = root / "cluster.json"
    prov = sf.provenance("python -m cactus_core sweep --export cluster.json", "cuda", "ray", 4)
    path.write_bytes(sf.export_sweep(result, prov))
    gap = spread(answers_by_task(result, "cactus", 0.05))
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(120_000)
    try:
        page.goto(f"{url}/frontier")
        page.get_by_role("heading", name="Open a sweep file").wait_for()
        uploader = page.locator(".st-key-fr_file_upload input[type='file']")
        uploader.set_input_files(str(path))
        expect(page.get_by_text("on cuda (ray, 4 workers)")).to_be_visible(timeout=120_000)
        # the tuner's answers at the default budget (0.05 nats): one or two prompts a task are
        # too few for an answer of its own, and the page says so
        assert math.isnan(gap)
        expect(page.get_by_text(f"No task has the {MIN_TASK_PROMPTS} prompts")).to_be_visible(
            timeout=60_000
        )
        # and the frontier split by task, one line per task after all prompts
        chart = page.locator(".st-key-fr_file_task_chart .js-plotly-plot")
        chart.wait_for(state="visible")
        names = chart.evaluate("el => el.data.map(d => d.name)")
        assert names == ["all prompts (4 prompts)", "writing (1 prompts)", "maths (2 prompts)",
                         "code (1 prompts)"]  # fmt: skip
        assert page.locator("[data-testid='stException']").count() == 0
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "sweep-file-failure.png"), full_page=True)
        raise
    finally:
        page.close()
