"""Measuring the pair's costs (the k tuner's, the predicted speedups'): one measurement at a
time for the whole server, a click never re-measures costs another visitor has just measured,
and on a public server no visitor can replace them (each would burn a minute or two of CPU
and overwrite what everyone's predictions use)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core.experiments.tuning import k_tuner
from cactus_core.experiments.tuning.k_tuner import (
    PairCosts,
    cached_costs,
    shared_costs,
    store_costs,
)

PAIR = SimpleNamespace(identity="fake pair", device="cpu")


def fake_costs(identity: str = "fake pair") -> PairCosts:
    return PairCosts(identity, "cpu", 1, tuple(10.0 + w for w in range(13)), 1.0, 1.0, 1.0)


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """Costs go to a fresh cache; `measure_costs` is counted, and takes a moment."""
    monkeypatch.setenv("CACTUS_CACHE_DIR", str(tmp_path))
    calls = []

    def measure(pair, on_progress=None, **_):
        calls.append(pair.identity)
        time.sleep(0.2)
        if on_progress is not None:
            on_progress(1, 1)
        return fake_costs(pair.identity)

    monkeypatch.setattr(k_tuner, "measure_costs", measure)
    return calls


def test_two_visitors_at_once_cost_one_measurement(measured):
    got = []
    threads = [threading.Thread(target=lambda: got.append(shared_costs(PAIR))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert measured == ["fake pair"] and got[0] == got[1]


def panel_app() -> None:
    from types import SimpleNamespace

    import streamlit as st

    from pages.shared.k_panel import cost_panel

    costs = cost_panel(SimpleNamespace(identity="fake pair", device="cpu"), "k", again=True)
    st.write(f"costs: {'yes' if costs is not None else 'no'}")


def test_a_click_after_another_visitor_measured_reuses_their_costs(measured):
    at = AppTest.from_function(panel_app).run()
    button = next(b for b in at.button if b.label == "Measure the pair's costs")
    store_costs(fake_costs())  # another visitor's measurement lands meanwhile
    button.click().run()
    assert not at.exception
    assert measured == []  # nothing measured again
    assert any(m.value == "costs: yes" for m in at.markdown)


@pytest.mark.parametrize("public", [False, True])
def test_only_a_trusting_server_offers_to_measure_again(measured, monkeypatch, public):
    if public:
        monkeypatch.setenv("CACTUS_LAB_PUBLIC", "1")
    store_costs(fake_costs())
    at = AppTest.from_function(panel_app).run()
    assert not at.exception
    again = [b for b in at.button if b.label == "Measure again"]
    assert len(again) == (0 if public else 1)
    if not public:
        again[0].click().run()
        assert measured == ["fake pair"] and cached_costs(PAIR) is not None
