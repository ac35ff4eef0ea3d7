"""A public deployment in a real Chromium (issue 15): `streamlit run app.py` with
CACTUS_LAB_PUBLIC=1 and an allow-list. The sidebar has no text box to type a server path into;
typing one into the model picker selects nothing; a load that fails says the one fixed
sentence, the same for a missing folder as for a broken one; and no page ever contains the
server's home folder or the allowed folders' paths (the visitor sees the operator's labels).

Needs Chromium at /usr/bin/chromium (Debian package `chromium`). The allowed models are the
tiny random pair saved to folders.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from streamlit_server import streamlit_app, wait_idle

from cactus_core.engine.loading.deployment import (
    ALLOWED_ENV,
    EMBEDDED_LABEL,
    PUBLIC_ENV,
    PUBLIC_LOAD_ERROR,
)

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
TIMEOUT_MS = 180_000
HOME = str(Path.home())


@pytest.fixture(scope="module")
def deployment(tiny_pair_dirs, tmp_path_factory):
    """The server's URL and the strings no page may contain."""
    root = tmp_path_factory.mktemp("browser-deploy")
    broken = root / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": "x"}))
    allowed = {
        "Tiny verifier": tiny_pair_dirs[0],
        "Tiny draft": tiny_pair_dirs[1],
        "Gone": root / "gone",
        "Broken": broken,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACTUS_LAB_")}
    env.update(
        {
            PUBLIC_ENV: "1",
            ALLOWED_ENV: ",".join(f"{label}={path}" for label, path in allowed.items()),
            "CACTUS_LAB_PRELOAD": "0",
            "CACTUS_CACHE_DIR": str(root / "cache"),
            "OMP_NUM_THREADS": "1",
        }
    )
    secrets = [HOME, str(root), *(str(p) for p in allowed.values())]
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "streamlit-deploy.log", "w") as log, streamlit_app(env, log) as app:
        yield app.url, secrets


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    if errors:
        pytest.fail(f"page errors: {errors}")
    context.close()


def _idle(page) -> None:
    wait_idle(page)


def _pick(page, label: str, option: str) -> None:
    """Type into a select box and press Enter, as a visitor would."""
    box = page.get_by_role("combobox", name=label)
    box.click()
    page.keyboard.type(option)
    page.keyboard.press("Enter")
    _idle(page)


def _assert_reveals_nothing(page, secrets: list[str]) -> None:
    html, text = page.content(), page.locator("body").inner_text()
    for secret in secrets:
        assert secret not in html and secret not in text, f"the page shows {secret!r}"


def _open_decode(page) -> None:
    page.get_by_role("link", name="Decode").first.click()
    page.get_by_role("heading", name="Decode").wait_for()
    _idle(page)


def test_public_sidebar_has_no_text_box_and_a_typed_path_selects_nothing(deployment, page):
    url, secrets = deployment
    page.goto(url)
    page.get_by_role("heading", name="Cactus Lab").wait_for()
    _idle(page)
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.locator('[data-testid="stTextInput"], [data-testid="stTextArea"]').count() == 0
    assert sidebar.get_by_text("Hub id or local folder").count() == 0
    from playwright.sync_api import expect

    model = page.get_by_role("combobox", name="Model")
    for typed in (f"{HOME}/.ssh", "/etc/passwd", "~/.ssh"):
        _pick(page, "Model", typed)
        page.keyboard.press("Escape")
        page.get_by_role("heading", name="Cactus Lab").click()  # leave the box
        _idle(page)
        expect(model).to_have_value(EMBEDDED_LABEL)  # nothing typed is ever a choice
    assert sidebar.get_by_text("Loaded:").count() == 0  # and nothing was loaded
    _assert_reveals_nothing(page, secrets)
    page.screenshot(path=str(ARTIFACTS / "deploy-sidebar.png"))


def test_a_missing_and_a_broken_folder_say_the_same_sentence(deployment, page):
    url, secrets = deployment
    page.goto(url)
    page.get_by_role("heading", name="Cactus Lab").wait_for()
    _idle(page)
    said = []
    for pick in ("Gone", "Broken"):
        _pick(page, "Model", pick)
        _pick(page, "Draft", "Tiny draft")
        _open_decode(page)
        alert = page.locator('[data-testid="stAlert"]').filter(has_text="cannot be loaded")
        alert.first.wait_for()
        said.append(alert.first.inner_text().strip())
        assert page.locator('[data-testid="stException"]').count() == 0
        _assert_reveals_nothing(page, secrets)
    assert said == [PUBLIC_LOAD_ERROR, PUBLIC_LOAD_ERROR]
    page.screenshot(path=str(ARTIFACTS / "deploy-refused.png"))


def test_an_offered_pair_decodes_under_its_labels(deployment, page):
    url, secrets = deployment
    page.goto(url)
    page.get_by_role("heading", name="Cactus Lab").wait_for()
    _idle(page)
    _pick(page, "Model", "Tiny verifier")
    _pick(page, "Draft", "Tiny draft")
    _open_decode(page)
    thumb = page.get_by_role("slider", name="Max new tokens")
    thumb.focus()
    for _ in range(7):
        thumb.press("ArrowLeft")  # 64 -> 8 tokens
    _idle(page)
    page.locator("button", has_text="Generate").first.click()
    page.get_by_text("Run 1:").wait_for()
    _idle(page)
    assert page.get_by_text("Tiny verifier verifying Tiny draft").count() >= 1
    assert page.locator('[data-testid="stException"]').count() == 0
    _assert_reveals_nothing(page, secrets)
    page.screenshot(path=str(ARTIFACTS / "deploy-decode.png"))
