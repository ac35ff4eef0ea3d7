"""The app's start-up load of the embedded pair (pages/pair_page.preload_pair): it runs once per
process in the background, only for the embedded pair with its conversion cached, and the
sidebar's warm label appears when it is done."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from cactus_core.app.shared.pair_cache import PairCache
from cactus_core.app.shared.settings import AppSettings
from cactus_core.engine.loading import models
from pages.shared import pair as pair_page


@pytest.fixture
def fake_loader(monkeypatch):
    calls: list[tuple] = []
    release = threading.Event()

    def load(*key):
        calls.append(key)
        release.wait(10)
        return SimpleNamespace(
            verifier_name="V", draft_name="D", device="cpu", dtype="torch.float32"
        )

    monkeypatch.setenv(pair_page.PRELOAD_ENV, "1")
    monkeypatch.setattr(pair_page, "_load_pair", load)
    monkeypatch.setattr(pair_page, "_PAIRS", PairCache(max_entries=2))
    monkeypatch.setattr(pair_page, "_PRELOADS", {})
    monkeypatch.setattr(models, "embedded_cache_ready", lambda cache_dir=None: True)
    return calls, release


def _join_preload() -> None:
    for t in threading.enumerate():
        if t.name == "preload":
            t.join(10)


def test_embedded_pair_loads_once_in_the_background(fake_loader):
    calls, release = fake_loader
    s = AppSettings(device="cpu")
    assert pair_page.preload_pair(s)  # started
    assert pair_page.preload_pair(s)  # still running: not started twice
    assert pair_page.warm_label(s) is None
    release.set()
    _join_preload()
    assert calls == [s.pair_key]
    assert pair_page.warm_label(s) == "V + D (cpu, torch.float32)"
    assert not pair_page.preload_pair(s)  # warm: nothing to do


def test_no_preload_for_a_typed_pair_a_missing_cache_or_when_off(fake_loader, monkeypatch):
    calls, release = fake_loader
    release.set()
    assert not pair_page.preload_pair(AppSettings(verifier="some/model", device="cpu"))
    monkeypatch.setattr(models, "embedded_cache_ready", lambda cache_dir=None: False)
    s = AppSettings(device="cpu")
    pair_page.preload_pair(s)
    _join_preload()
    assert calls == []  # no conversion behind the user's back
    assert not pair_page.preload_pair(s)  # the sidebar stops saying it is loading
    monkeypatch.setenv(pair_page.PRELOAD_ENV, "0")
    assert not pair_page.preload_pair(AppSettings(device="auto"))
    assert calls == []


def test_embedded_cache_ready_reads_the_conversion_cache(tmp_path):
    assert not models.embedded_cache_ready(tmp_path)
