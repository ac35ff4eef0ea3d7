"""CACTUS_LAB_PUBLIC (and CACTUS_LAB_ALLOW_RAY) take on or off and nothing else: `=y`, `=2` or
`=enabled` once meant the trusting mode in silence; now the app serves no page and says its
settings are invalid, and the CLI stops with one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core import cli
from cactus_core.engine.loading import models
from cactus_core.engine.loading.deployment import PUBLIC_ENV, DeploymentPolicy
from cactus_core.experiments.sweeps.ray_backend import (
    RAY_ADDRESS_ENV,
    RAY_ALLOW_PUBLIC_ENV,
    ray_address,
)

APP = Path(__file__).resolve().parent.parent / "app.py"
UNKNOWN = ("y", "2", "enabled", "public", "tru", "-1", "1 1")


@pytest.mark.parametrize("value", ["1", "true", "YES", " on ", "True"])
def test_on_is_public(value):
    assert DeploymentPolicy.from_env({PUBLIC_ENV: value}).public


@pytest.mark.parametrize("value", ["", "0", "false", "No", "off", " "])
def test_off_or_unset_trusts_the_user(value):
    assert not DeploymentPolicy.from_env({PUBLIC_ENV: value}).public
    assert not DeploymentPolicy.from_env({}).public


@pytest.mark.parametrize("value", UNKNOWN)
def test_anything_else_is_refused_naming_the_setting(value):
    with pytest.raises(ValueError, match=f"{PUBLIC_ENV} must be 1 or 0"):
        DeploymentPolicy.from_env({PUBLIC_ENV: value})


@pytest.mark.parametrize("value", ["y", "enabled"])
def test_the_app_serves_no_page_on_an_unknown_value(value, monkeypatch):
    monkeypatch.setenv(PUBLIC_ENV, value)
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "This server's model settings are invalid; its operator's log says why."
    ]
    assert not at.selectbox and not at.text_input  # no free-text model box of the trusting mode


def test_the_cli_stops_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv(PUBLIC_ENV, "y")
    # the policy is read first of all; the old reading went on to load the embedded pair
    monkeypatch.setattr(models, "resolve_device", lambda *a: pytest.fail("went on to load"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["generate", "hi"])
    assert exit_.value.code != 0
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and f"{PUBLIC_ENV} must be 1 or 0" in err.splitlines()[-1]


def test_the_ray_allowance_is_read_the_same_way():
    env = {RAY_ADDRESS_ENV: "auto", PUBLIC_ENV: "1"}
    assert ray_address(env) is None
    assert ray_address({**env, RAY_ALLOW_PUBLIC_ENV: "yes"}) == "auto"
    with pytest.raises(ValueError, match=f"{RAY_ALLOW_PUBLIC_ENV} must be 1 or 0"):
        ray_address({**env, RAY_ALLOW_PUBLIC_ENV: "y"})
