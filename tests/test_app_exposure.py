"""`make app` trusts its user, so it listens on this machine only, and a link that names a model
pair loads nothing until the visitor clicks."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

from streamlit.testing.v1 import AppTest

from cactus_core.app.shared.markdown import md_text

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"


def test_make_app_listens_on_localhost_only():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["server"]["address"] == "127.0.0.1"
    recipe = (ROOT / "Makefile").read_text(encoding="utf-8").split("\napp:", 1)[1]
    recipe = recipe.split("\n\n", 1)[0]
    assert "streamlit run app.py" in recipe and "server.address" not in recipe


def test_a_link_naming_a_pair_waits_for_a_click(tiny_pair_dirs, tmp_path):
    # A copy under a new path: a pair no other test has loaded into this process's cache.
    verifier, draft = (shutil.copytree(d, tmp_path / d.name) for d in tiny_pair_dirs)
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update(
        {
            "source": "Hub id or local folder",
            "verifier": str(verifier),
            "draft": str(draft),
            "max_new": "8",
        }
    )
    at.run()
    at.switch_page("pages/step.py").run()
    assert not at.exception
    assert "step_state" not in at.session_state or at.session_state["step_state"].run is None
    button = at.button(key="load_linked_pair")
    # the names, as text: Markdown-escaped, so a name from a link can render no link
    assert md_text(str(verifier)) in " ".join(m.value for m in at.markdown)
    button.click().run()
    assert not at.exception, at.exception
    assert at.session_state["step_state"].run is not None
    assert not [b for b in at.button if b.key == "load_linked_pair"]
    at.run()  # and it stays loaded without asking again
    assert not [b for b in at.button if b.key == "load_linked_pair"]
