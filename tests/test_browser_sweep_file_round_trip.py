"""The Frontier page's own download reopens on the page, in a real Chromium: run a small sweep
on the tiny pair, download "Sweep file (.json)", choose that file in "Open a sweep file", and
read the same frontier with its provenance in words. Then a file whose fields are Markdown and
HTML pointing elsewhere: its words show as text, and the page holds no image or link from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit_server import fill, slider_from_start, tiny_pair_app

from cactus_core.app.frontier.sweep_file import PAGE_COMMAND
from cactus_core.experiments.sweeps import file as sf
from cactus_core.experiments.sweeps.cache import canonical_json

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
ATTACKER = "attacker.invalid"


@pytest.fixture(scope="module")
def server(tiny_pair_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-round-trip")
    with tiny_pair_app(tiny_pair_dirs, root) as url:
        yield url, root, tiny_pair_dirs


def _points(page, key: str) -> dict[str, list]:
    """A chart's measured points by trace name, as Plotly holds them."""
    chart = page.locator(f".st-key-{key} .js-plotly-plot").first
    chart.wait_for(state="visible", timeout=240_000)
    data = chart.evaluate("el => el.data.map(d => [d.name, d.x, d.y])")
    return {name: [x, y] for name, x, y in data if name}


def _hostile_file(downloaded: bytes) -> bytes:
    body = json.loads(downloaded)["body"]
    body["provenance"]["command"] = (
        f"[click me](https://{ATTACKER}/x) ![p](https://{ATTACKER}/p.png)"
    )
    body["provenance"]["machine"] = f"<img src='https://{ATTACKER}/i.png'> https://{ATTACKER}/bare"
    body["pair"] = f"verifier=[v](https://{ATTACKER}/v)#1|draft=d#2|dtype=torch.float32"
    return sf.frame(canonical_json(body))


def test_the_pages_download_reopens_on_the_page(server, browser):
    from playwright.sync_api import expect

    url, root, (verifier, draft) = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page.set_default_timeout(120_000)
    try:
        page.goto(f"{url}/frontier")
        page.get_by_role("heading", name="Frontier", exact=True).wait_for()
        slider_from_start(page, "Prompts to use", right=1)  # 2 prompts
        slider_from_start(page, "Max new tokens")  # 8 tokens
        fill(page, "cactus: values of delta", "0, 1")
        page.get_by_text("3 settings + verifier-only × 2 prompts").wait_for()
        page.get_by_role("button", name="Run sweep").click()
        swept = _points(page, "fr_chart_tpc")

        with page.expect_download() as download:
            page.get_by_role("button", name="Sweep file (.json)").click()
        path = root / "sweep.json"
        download.value.save_as(path)
        assert download.value.suggested_filename == "sweep.json"

        page.locator(".st-key-fr_file_upload input[type='file']").set_input_files(str(path))
        words = page.locator(".st-key-fr_file_provenance")
        expect(words).to_contain_text(
            "3 settings × 2 prompts on cpu (local, 1 worker)", timeout=120_000
        )
        expect(words).to_contain_text(f"with: {PAGE_COMMAND}.")
        expect(words).to_contain_text(f"Pair: verifier {verifier}, draft {draft}, in float32.")
        reopened = _points(page, "fr_file_tpc")
        shared = set(swept) & set(reopened)
        assert {"cactus", "sps"} <= {n.split(" ")[0] for n in shared}, (swept, reopened)
        assert all(reopened[n] == swept[n] for n in shared)
        assert page.locator("[data-testid='stException']").count() == 0

        hostile = root / "hostile.json"
        hostile.write_bytes(_hostile_file(path.read_bytes()))
        page.locator(".st-key-fr_file_upload input[type='file']").set_input_files(str(hostile))
        expect(words).to_contain_text(f"[click me](https://{ATTACKER}/x)", timeout=120_000)
        assert page.locator(f"img[src*='{ATTACKER}']").count() == 0
        assert page.locator(f"a[href*='{ATTACKER}']").count() == 0
        assert page.locator("[data-testid='stException']").count() == 0
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "sweep-file-round-trip-failure.png"), full_page=True)
        raise
    finally:
        page.close()
