"""AppTest of the Frontier page on the tiny random pair (saved to folders, loaded through the
sidebar's custom-pair path): a sweep runs, the charts and table render, a reload shows the
cached results without a model call, a clicked setting shows its outputs, and the tuner
confirms a parameter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from cactus_core.app.frontier.figures import FRONT_NAME
from cactus_core.app.shared.pair_cache import PairCache
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE

APP = Path(__file__).resolve().parent.parent / "app.py"


@pytest.fixture(scope="module")
def pair_folders(tiny_pair_dirs):
    return tiny_pair_dirs


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    # Shared by this module's tests: a later test finds the earlier one's chunks (as a user
    # coming back would), and still works alone, computing them.
    return tmp_path_factory.mktemp("frontier-cache")


@pytest.fixture
def env(pair_folders, cache_dir, monkeypatch):
    verifier, draft = pair_folders
    monkeypatch.setenv("CACTUS_LAB_VERIFIER", str(verifier))
    monkeypatch.setenv("CACTUS_LAB_DRAFT", str(draft))
    monkeypatch.setenv("CACTUS_CACHE_DIR", str(cache_dir))
    return cache_dir


def _frontier() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=240).run()
    assert not at.exception
    at.switch_page("pages/frontier.py").run()
    assert not at.exception
    return at


def _small_sweep(at: AppTest) -> AppTest:
    at.slider(key="fr_n_24").set_value(3)
    at.slider(key="fr_max_new").set_value(8)
    at.slider(key="fr_chunk").set_value(2)
    at.multiselect(key="fr_rules").set_value(["cactus", "interp"])
    at.run()
    at.text_input(key="fr_grid_cactus").set_value("0, 0.5")
    at.text_input(key="fr_grid_interp").set_value("0.5")
    return at.run()


def test_sweep_runs_renders_and_survives_a_reload(env):
    at = _small_sweep(_frontier())
    assert not at.exception
    assert any("Run sweep" in i.value for i in at.info)
    at.button(key="fr_run").click().run()
    assert not at.exception, at.exception
    # the reference's two, the frontier split by task (the built-in prompts are tagged), then
    # tokens/call, speedup, tokens/s, limit, long answers
    charts = at.get("plotly_chart")
    # and the quality reference's task score and long answers
    assert len(charts) == 10 and any("fr_chart_long" in c.proto.id for c in charts)
    # the sweep's table, its cells as shown: text, "–" where a number is missing
    table = next(d.value for d in at.dataframe if "NLL" in d.value.columns)
    assert list(table["setting"]) == ["verifier-only", "cactus δ=0", "cactus δ=0.5", "interp α=0.5"]
    assert table["tokens/call"].iloc[0] == "1.000"
    shown = [c for c in table["efficiency"].iloc[1:] if c != "–"]
    assert shown and all(float(c.rstrip("%")) <= 100.0 for c in shown)

    # A new session (a browser reload) with the same form finds everything in the cache.
    again = _small_sweep(_frontier())
    assert not again.exception
    assert len(again.get("plotly_chart")) == 10
    assert not any("Run sweep" in i.value for i in again.info)


def test_clicked_setting_shows_outputs_and_the_tuner_confirms(env):
    at = _small_sweep(_frontier())
    at.button(key="fr_run").click().run()
    assert not at.exception
    # what the chart's on_select stores when a point is clicked
    at.session_state["fr_state"].selected = "cactus:delta=0.5"
    at.run()
    assert not at.exception
    assert at.selectbox(key="fr_pick_cactus:delta=0.5").value == "cactus:delta=0.5"
    assert any("verifier-only" in m.value for m in at.markdown)
    assert len(at.text) >= 2

    at.number_input(key="fr_budget").set_value(0.01)
    at.button(key="fr_tune").click().run()
    assert not at.exception, at.exception
    assert at.success and " fits" in at.success[0].value, [m.value for m in at.warning]
    assert any("--rule cactus --delta" in c.value for c in at.code)
    assert at.metric[0].label == "delta"


def test_bad_grid_gives_an_inline_error(env):
    at = _frontier()
    at.text_input(key="fr_grid_cactus").set_value("0, lots").run()
    assert not at.exception
    assert any("'lots' is not a number" in e.value for e in at.error)
    assert "fr_run" not in [b.key for b in at.button]  # the page stops before its buttons


def _chart_names(at: AppTest, key: str) -> set[str]:
    chart = next(c for c in at.get("plotly_chart") if c.proto.id.endswith(key) or key in c.proto.id)
    return {t.get("name") for t in json.loads(chart.proto.spec)["data"]}


def test_opens_on_the_reference_and_answers_a_budget_at_once(env):
    at = _frontier()
    assert any("Reference sweep shipped with the lab" in c.value for c in at.caption)
    names = _chart_names(at, "fr_ref_tpc")
    assert {DEFAULT_RULE, LOSSLESS_RULE, FRONT_NAME} <= names
    assert "limit (best any rule could reach)" in _chart_names(at, "fr_ref_limit")
    assert len(at.dataframe[0].value) >= 6 * 2  # every setting's efficiency
    # the tuner answers from the curve, with no run
    at.number_input(key="fr_ref_budget").set_value(0.02).run()
    assert not at.exception
    assert at.metric[0].label == "delta"
    first = float(at.metric[1].value)
    assert first <= 0.02 + 1e-9 or float(at.metric[0].value) == 0.0
    # refined by runs on request (the tiny pair here; the reference's prompts and seeds)
    at.button(key="fr_ref_tune").click().run()
    assert not at.exception, at.exception
    said = [m.value for m in [*at.success, *at.warning, *at.info, *at.error]]
    assert any(("fit" in m or "No" in m or "no δ" in m) for m in said), said
    runs = next(d.value for d in at.dataframe if "source" in d.value.columns)  # the tuner's
    assert runs["source"].iloc[-1] == "run now"


def test_the_reference_tuner_answers_before_the_pair_has_loaded(env, monkeypatch):
    import pages.shared.pair as common

    def still_loading(s):
        st.stop()  # the page is still waiting for the pair when this run ends

    at = _frontier()  # a first run loads the pair for the sidebar's settings
    monkeypatch.setattr(common, "_PAIRS", PairCache(max_entries=2))  # nothing loaded yet
    monkeypatch.setattr(common, "_cached_pair", still_loading)
    at.run()
    assert not at.exception
    assert at.metric[0].label == "delta"  # the tuner's answer, from the reference alone
    assert "fr_run" in [b.key for b in at.button]  # drawn before the page waits


def test_a_users_sweep_overlays_the_reference_and_takes_the_tuner(env):
    at = _small_sweep(_frontier())
    at.button(key="fr_run").click().run()
    assert not at.exception
    assert "reference sweep" in _chart_names(at, "fr_chart_tpc")
    # one tuner: the same widgets, now on your sweep (its help says so), with no first guess
    assert at.selectbox(key="fr_tune_rule").help == "Tuned on your sweep."
    assert "estimated emitted KL" not in [m.label for m in at.metric]
