"""“Use this setting” in a real Chromium: on Decode (after a run, so SGLang's threshold is
fitted on its positions) and on Frontier (the reference tuner's setting, fitted on the
reference's curves), open the panel, switch engine tabs and read the commands to copy. On the
Frontier, after "Find it (runs)", the export, the CLI flags and the link to Decode (and Decode's
own export) all carry the tuner's measured answer.

Runs `streamlit run app.py` on a free port with the tiny pair saved to folders and drives
Debian's chromium through Playwright (tests/streamlit_server.py).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from streamlit_server import tiny_pair_app, wait_idle

from cactus_core.app.shared.engine_export import REPO
from cactus_core.app.shared.settings import tunable_rules

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
TITLE = "Use this setting"
TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def server(tiny_pair_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-export")
    with tiny_pair_app(tiny_pair_dirs, root) as url:
        yield url


def idle(page) -> None:
    wait_idle(page)


def open_panel(page) -> None:
    page.get_by_text(TITLE).first.click()
    idle(page)


def code_in_tab(page, tab: str, contains: str) -> str:
    """The text of the code block holding `contains`, in the panel's `tab`."""
    page.get_by_role("tab", name=tab, exact=True).click()
    block = page.locator('[data-testid="stCode"]').filter(has_text=contains).first
    block.wait_for(state="visible")
    return block.inner_text()


def caption_in_tab(page, text: str) -> str:
    return (
        page.locator('[data-testid="stMarkdownContainer"]').filter(has_text=text).first.inner_text()
    )


def run_page(browser, server, name: str, steps) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        steps(page, server)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert not errors, errors
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"export-{name}-failure.png"), full_page=True)
        raise
    finally:
        page.close()


def decode_steps(page, url: str) -> None:
    page.goto(f"{url}/decode")
    page.get_by_role("heading", name="Decode", exact=True).wait_for()
    idle(page)
    thumb = page.get_by_role("slider", name="Max new tokens")
    thumb.focus()
    for _ in range(12):
        thumb.press("ArrowLeft")
    idle(page)
    page.locator("button", has_text="Generate").first.click()
    page.get_by_text("Run 1:").wait_for()
    idle(page)
    open_panel(page)
    serve = code_in_tab(page, "vLLM", "CACTUS_VLLM_RULE")
    spec = exported_spec(serve)
    assert spec["rule"] == "cactus" and "delta" in spec
    assert '"num_speculative_tokens": 4' in serve and '"probabilistic"' in serve
    install = code_in_tab(page, "vLLM", "pip install")
    assert f"pip install {REPO / 'integrations' / 'vllm'}" in install  # absolute: pastes anywhere
    snippet = code_in_tab(page, "transformers", "cactus_generate")
    assert "custom_generate=cactus_generate" in snippet and "num_assistant_tokens=4" in snippet
    launch = code_in_tab(page, "SGLang", "--speculative-accept-threshold-acc")
    t_acc = float(re.search(r"--speculative-accept-threshold-acc (\S+)", launch).group(1))
    assert 0 < t_acc <= 1
    assert "run 1's positions" in caption_in_tab(page, "Fitted on")
    assert "--spec-draft-n-max" in code_in_tab(page, "llama.cpp", "llama-server")
    # nothing to paste there for cactus: one line under the summary, not a tab
    assert page.get_by_role("tab", name="TensorRT-LLM", exact=True).count() == 0
    page.get_by_text("TensorRT-LLM: No mapping for cactus").first.wait_for()


def frontier_steps(page, url: str) -> None:
    page.goto(f"{url}/frontier")
    page.get_by_role("heading", name="Frontier", exact=True).wait_for()
    page.get_by_text("Tuner: the parameter that meets a KL budget").first.wait_for()
    idle(page)
    open_panel(page)
    serve = code_in_tab(page, "vLLM", "CACTUS_VLLM_RULE")
    spec = exported_spec(serve)
    assert spec["rule"] in tunable_rules()  # the reference tuner's rule at its first guess
    launch = code_in_tab(page, "SGLang", "--speculative-accept-threshold-acc")
    assert re.search(r"--speculative-accept-threshold-acc [0-9.e-]+", launch)
    assert "reference sweep's estimated curves" in caption_in_tab(page, "Fitted on")
    assert "first guess" in caption_in_tab(page, "first guess")

    # "Find it (runs)" measures the answer; the export then carries that value, not the guess.
    page.locator("button", has_text="Find it (runs)").first.click()
    page.get_by_text("measured emitted KL").first.wait_for()
    idle(page)
    flags = page.locator('[data-testid="stCode"]').filter(has_text="--rule ").first.inner_text()
    rule = re.search(r"--rule (\S+)", flags).group(1)
    param, value = re.search(r"--(?!rule|k |temperature|top-)([a-z-]+) (\S+)", flags).groups()
    param = param.replace("-", "_")
    serve = code_in_tab(page, "vLLM", "CACTUS_VLLM_RULE")
    tuned = exported_spec(serve)
    assert tuned["rule"] == rule and tuned[param] == float(value), (flags, serve)
    assert "measured answer" in caption_in_tab(page, "measured answer")
    snippet = code_in_tab(page, "transformers", "cactus_rule=")
    assert f"'{param}': {float(value)!r}" in snippet

    # The link to Decode carries the same value, and Decode's export says it too.
    page.locator("a", has_text="on Decode").first.click()
    page.get_by_role("heading", name="Decode", exact=True).wait_for()
    idle(page)
    open_panel(page)
    on_decode = exported_spec(code_in_tab(page, "vLLM", "CACTUS_VLLM_RULE"))
    assert on_decode["rule"] == rule and on_decode[param] == float(value)


def exported_spec(serve: str) -> dict:
    """The rule spec in the Serve block's CACTUS_VLLM_RULE, read as a shell reads it."""
    words = shlex.split(serve.replace("\\\n", " "), comments=True)
    return json.loads(next(w for w in words if w.startswith("CACTUS_VLLM_RULE=")).split("=", 1)[1])


def test_export_panel_on_decode(server, browser):
    run_page(browser, server, "decode", decode_steps)


def test_export_panel_on_frontier(server, browser):
    run_page(browser, server, "frontier", frontier_steps)
