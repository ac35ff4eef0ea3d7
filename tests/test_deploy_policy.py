"""The deployment policy (issue 15): off by default; when public, only the embedded pair and the
operator's allow-list load, every refusal and load error is one fixed message that says nothing
about the server's disk, and hub downloads are capped by size (the hub is stubbed here)."""

from __future__ import annotations

import os
from pathlib import Path

import huggingface_hub
import pytest

from cactus_core.engine.loading import models as cm
from cactus_core.engine.loading.deployment import (
    ALLOWED_ENV,
    EMBEDDED_LABEL,
    MAX_DOWNLOAD_ENV,
    PUBLIC_ENV,
    PUBLIC_LOAD_ERROR,
    DeploymentPolicy,
    deployment_policy,
)
from cactus_core.engine.loading.models import ModelLoadError, load_pair


def _public(allowed: str = "", cap_mb: str = "") -> DeploymentPolicy:
    env = {PUBLIC_ENV: "1", ALLOWED_ENV: allowed}
    if cap_mb:
        env[MAX_DOWNLOAD_ENV] = cap_mb
    return deployment_policy(env)


def test_off_by_default_allows_everything():
    policy = deployment_policy({})
    assert not policy.public and policy.max_download_bytes is None
    assert policy.allows("/anything/at/all") and policy.allows("org/model") and policy.allows(None)
    assert policy.choices() == {EMBEDDED_LABEL: None}


def test_policy_from_environment(tmp_path):
    folder = tmp_path / "models" / "small"
    folder.mkdir(parents=True)
    policy = _public(f" org/a , Small={folder}/, {tmp_path}/x.gguf ", cap_mb="512")
    assert policy.public and policy.max_download_bytes == 512 * 2**20
    assert policy.hub_ids == ("org/a",)
    assert policy.choices() == {
        EMBEDDED_LABEL: None,
        "org/a": "org/a",
        "Small": f"{folder}/",
        f"{tmp_path}/x.gguf": f"{tmp_path}/x.gguf",
    }
    assert policy.allows(None) and policy.allows("org/a") and policy.allows(folder)
    assert policy.allows(str(folder)) and policy.allows(f"{tmp_path}/models/../models/small")
    assert not policy.allows("org/b") and not policy.allows(str(tmp_path))
    assert not policy.allows(f"{folder}/../../../root")
    assert not policy.allows(123)  # not a source at all
    assert _public().max_download_bytes == 2048 * 2**20  # a default cap when public
    for bad in ("lots", "-1", "inf"):
        with pytest.raises(ValueError, match=MAX_DOWNLOAD_ENV):
            _public(cap_mb=bad)
    with pytest.raises(ValueError, match=ALLOWED_ENV):
        _public("label=")


def test_public_refusals_say_nothing_about_the_disk(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a refused source must not reach the loader")

    monkeypatch.setattr(cm, "_load_pair", never)
    home = Path.home()
    existing_gguf = tmp_path / "m.gguf"
    existing_gguf.write_bytes(b"GGUF")
    specs = [
        str(home / ".ssh"),
        "~/.ssh",
        "/root",
        str(tmp_path),  # exists
        str(tmp_path / "missing" / "model"),  # does not
        str(existing_gguf),
        str(tmp_path / "missing.gguf"),
        "/etc/passwd",
        "some-org/not-on-the-list",
    ]
    policy = _public("org/a")
    messages = set()
    for spec in specs:
        for role in ("verifier", "draft"):
            with pytest.raises(ModelLoadError) as err:
                load_pair(**{role: spec}, device="cpu", policy=policy)
            messages.add(str(err.value))
            assert err.value.__cause__ is None
    assert messages == {PUBLIC_LOAD_ERROR}
    for secret in (str(home), "root", str(tmp_path), "ssh", "passwd"):
        assert secret not in PUBLIC_LOAD_ERROR


def test_public_reads_the_environment_when_no_policy_is_given(tmp_path, monkeypatch):
    monkeypatch.setenv(PUBLIC_ENV, "1")
    monkeypatch.delenv(ALLOWED_ENV, raising=False)
    with pytest.raises(ModelLoadError) as err:
        load_pair(str(tmp_path), device="cpu")
    assert str(err.value) == PUBLIC_LOAD_ERROR


def test_public_allow_listed_folders_load_and_their_errors_are_fixed(tiny_pair_dirs, tmp_path):
    verifier, draft = tiny_pair_dirs
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama", "hidden_size": "abc"}')
    policy = _public(f"{verifier},{draft},{broken}")
    pair = load_pair(str(verifier), str(draft), device="cpu", policy=policy)
    assert pair.verifier_weights and pair.draft_weights
    with pytest.raises(ModelLoadError) as err:
        load_pair(str(broken), str(draft), device="cpu", policy=policy)
    assert str(err.value) == PUBLIC_LOAD_ERROR
    with pytest.raises(ModelLoadError) as err:
        load_pair(str(verifier), str(draft), device="cpu", policy=policy, trust_remote_code=True)
    assert str(err.value) == PUBLIC_LOAD_ERROR


class _Sibling:
    def __init__(self, name: str, size: int | None) -> None:
        self.rfilename, self.size = name, size


class _Info:
    sha = "a" * 40

    def __init__(self, files: list[tuple[str, int | None]]) -> None:
        self.siblings = [_Sibling(n, s) for n, s in files]


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    """huggingface_hub with a hub that answers model_info from `files` and records downloads."""
    state: dict = {"files": [], "downloads": [], "info_kwargs": None}

    class FakeApi:
        def model_info(self, repo_id, **kwargs):
            state["info_kwargs"] = kwargs
            return _Info(state["files"])

    def fake_snapshot(repo_id, local_files_only=False, **kwargs):
        if local_files_only:
            raise FileNotFoundError("not in the cache")
        state["downloads"].append(kwargs)
        return str(tmp_path / "snapshots" / kwargs["revision"])

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    return state


def test_hub_downloads_are_capped_by_size_before_downloading(fake_hub):
    mb = 2**20
    fake_hub["files"] = [
        ("config.json", 1000),
        ("model.safetensors", 300 * mb),
        ("pytorch_model.bin", 900 * mb),  # not fetched: the repository has safetensors
        ("README.md", 5000),
    ]
    policy = _public("org/a", cap_mb="200")
    with pytest.raises(ModelLoadError, match="over the 200 MB download cap"):
        cm.hub_snapshot("org/a", policy)
    assert fake_hub["downloads"] == []
    assert fake_hub["info_kwargs"]["files_metadata"] is True

    folder = cm.hub_snapshot("org/a", _public("org/a", cap_mb="400"))
    assert folder.name == "a" * 40  # the revision whose sizes were checked
    assert fake_hub["downloads"][0]["revision"] == "a" * 40

    fake_hub["files"] = [("config.json", 10), ("model.safetensors", None)]
    with pytest.raises(ModelLoadError, match="does not report the size"):
        cm.hub_snapshot("org/a", _public("org/a", cap_mb="400"))

    # .bin weights count when they are what would be fetched
    fake_hub["files"] = [("config.json", 10), ("pytorch_model.bin", 900 * mb)]
    with pytest.raises(ModelLoadError, match="900 MB"):
        cm.hub_snapshot("org/a", _public("org/a", cap_mb="400"))
    assert len(fake_hub["downloads"]) == 1

    # Not public and no cap set: the operator's own downloads are not limited.
    cm.hub_snapshot("org/a", deployment_policy({}))
    assert len(fake_hub["downloads"]) == 2


def test_public_allow_listed_hub_id_is_never_read_from_a_local_folder(tmp_path, monkeypatch):
    # A folder in the working directory named like an allowed hub id must not stand in for it.
    (tmp_path / "org" / "a").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    seen = []

    def fake_hub(repo_id, cache, dtype, trust, policy):
        seen.append(repo_id)
        raise ModelLoadError(f"no hub here for {repo_id}")

    monkeypatch.setattr(cm, "_from_hub", fake_hub)
    with pytest.raises(ModelLoadError) as err:
        load_pair("org/a", device="cpu", policy=_public("org/a"))
    assert seen == ["org/a"] and str(err.value) == PUBLIC_LOAD_ERROR
    assert os.path.isdir("org/a")
