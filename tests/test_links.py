"""Links: each page's settings go into the query string and come back as the same widget
values; values a widget would refuse are dropped; the tour's stops name real pages and valid
settings; the Overview restores the sidebar from a link (AppTest)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core.app.shared.links import (
    JUMPS,
    STEP_INDEX_KEY,
    STEP_JUMP_KEY,
    STEP_ROUND_KEY,
    LinkField,
    decode_setting_query,
    from_query,
    link,
    page_fields,
    query_fields,
    restore,
    to_query,
)
from cactus_core.app.shared.param_groups import headline_group
from cactus_core.app.shared.positions import PRESETS
from cactus_core.app.shared.tour import FOCUS_PARAM, focus_script, tour, tour_target
from cactus_core.app.step.view import JUMP_TESTS
from cactus_core.maths.rules import DEFAULT_RULE, RULES

APP = Path(__file__).resolve().parent.parent / "app.py"
PAGES = ("", "decode", "step", "playground", "frontier")
DELTA = RULES[DEFAULT_RULE].swept().name


def test_fields_parse_only_what_the_widget_accepts():
    f = LinkField("T", "sb_temperature", float, 0.0, 2.0)
    assert f.parse("0.3") == 0.3
    assert f.parse("3") is None and f.parse("nan") is None and f.parse("x") is None
    b = LinkField("chat", "dec_chat", bool)
    assert (b.parse("1"), b.parse("false"), b.parse("yes")) == (True, False, None)
    c = LinkField("rule", "dec_rule", str, choices=tuple(RULES))
    assert c.parse(DEFAULT_RULE) == DEFAULT_RULE and c.parse("no-such-rule") is None
    assert LinkField("p", "k", str, max_len=3).parse("long") is None
    assert f.show(0.30000) == "0.3" and b.show(True) == "1"
    assert f.show(0.1 + 0.2) == "0.3" and f.show(1.23456789) == "1.23456789"
    assert set(JUMPS) == set(JUMP_TESTS)  # every jump a link may name opens something


@pytest.mark.parametrize("name", list(RULES))
def test_step_page_round_trip_for_every_rule(name):
    state = {
        "sb_source": "Embedded pair (offline)",
        "sb_device": "cpu",
        "sb_temperature": 0.7,
        "sb_top_k": 0,
        "sb_top_p": 0.95,
        "sb_k": 5,
        "sb_seed": 11,
        "step_prompt": "Why & how? ünïcode\nnew line",
        "step_chat": False,
        "step_max_new": 40,
        "step_rule": name,
        STEP_ROUND_KEY: 3,
        STEP_INDEX_KEY: 7,
    }
    for p in RULES[name].params_spec:
        state[f"step_{name}_{p.name}"] = int(p.ui[1]) if p.integer else p.ui[1] / 2
    query = to_query(query_fields("step", state, public=False), state)
    assert query["rule"] == name and query["round"] == "3" and query["step"] == "7"
    # what a fresh session gets back from the link: every value, exactly
    assert restore("step", query, {}, public=False) == state


@pytest.mark.parametrize("page", ["decode", "playground"])
def test_every_log_slider_value_round_trips_exactly(page):
    """Each value a log parameter's select_slider can hold (Param.log_steps) comes back from
    its link as the same float."""
    for name in RULES:
        state = {"dec_rule": name}
        for field in page_fields(page, state):
            if field.param is None or not field.param.log_steps:
                continue
            for value in field.param.log_steps:
                query = to_query([field], {field.key: value})
                assert from_query([field], query) == {field.key: value}, (name, query)


def test_a_tuned_value_in_a_link_is_kept_not_snapped():
    """A tuner's δ of 0.05236 is no slider step: the link keeps it (four significant digits)
    and the slider adds it to its steps, instead of moving it to 0.05 without a word."""
    got = restore("decode", {"rule": DEFAULT_RULE, DELTA: "0.052361"}, {}, public=False)
    key = f"dec_{DEFAULT_RULE}_{DELTA}"
    assert got[key] == 0.05236
    param = RULES[DEFAULT_RULE].swept()
    assert 0.05236 not in param.log_steps and 0.05236 in param.options(0.05236)


def test_the_tuners_use_on_decode_link_opens_its_exact_value():
    query = decode_setting_query(DEFAULT_RULE, {DELTA: 0.05236})
    assert query == {"rule": DEFAULT_RULE, DELTA: "0.05236"}
    assert restore("decode", query, {}, public=False)[f"dec_{DEFAULT_RULE}_{DELTA}"] == 0.05236


def test_bad_values_are_dropped_and_the_rest_kept():
    query = {"rule": DEFAULT_RULE, DELTA: "-1", "k": "99", "seed": "5", "T": "abc"}
    got = restore("decode", query, {}, public=False)
    assert got == {"dec_rule": DEFAULT_RULE, "sb_seed": 5}


def test_a_public_server_takes_only_offered_labels():
    fields = query_fields("", {}, public=True, offered=["Embedded", "Big model"])
    assert from_query(fields, {"model": "Big model", "verifier": "/etc"}) == {
        "sb_offer_verifier": "Big model"
    }
    assert from_query(fields, {"model": "/root/secret"}) == {}


def test_link_keeps_the_app_root():
    assert (
        link("http://host:8501/lab", "step", {"rule": DEFAULT_RULE, "round": "2"})
        == f"http://host:8501/lab/step?rule={DEFAULT_RULE}&round=2"
    )
    assert link("http://h/", "", {"a": "b c"}) == "http://h/?a=b+c"
    # the browser's address may already name the page
    assert link("http://h:1/lab/step", "step", {}) == "http://h:1/lab/step?"[:-1]
    assert link("http://h:1/step/", "step", {"k": "4"}) == "http://h:1/step?k=4"


def test_tour_stops_open_real_pages_in_valid_states():
    stops = tour()
    assert 5 <= len(stops) <= 7
    assert {s.page for s in stops} >= {"playground", "step", "decode", "frontier"}
    for stop in stops:
        assert stop.page in PAGES
        got = restore(stop.page, stop.query, {}, public=False)
        names = {f.key: f.name for f in query_fields(stop.page, got, public=False)}
        # every setting the stop names reaches its widget
        assert {names[k] for k in got} == set(stop.query), stop.title
        if STEP_JUMP_KEY in got:
            assert got[STEP_JUMP_KEY] in JUMP_TESTS
    first = restore(stops[0].page, stops[0].query, {}, public=False)
    assert first["pg_preset"] in PRESETS and first[f"pg_{headline_group().key}"] == 0.0


def test_page_fields_follow_the_rule_picked():
    fields = {f.name for f in page_fields("decode", {"dec_rule": DEFAULT_RULE})}
    assert {"prompt", "rule", DELTA, "max_new"} <= fields
    assert page_fields("", {}) == []


def test_the_overview_restores_the_sidebar_from_a_link():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update({"T": "0.3", "seed": "7", "k": "6", "top_p": "0.9", "k_bad": "1"})
    at.run()
    assert not at.exception
    assert at.session_state["sb_temperature"] == 0.3
    assert (at.session_state["sb_seed"], at.session_state["sb_k"]) == (7, 6)
    s = at.session_state["settings"]
    assert (s.sampling.temperature, s.seed, s.k, s.sampling.top_p) == (0.3, 7, 6, 0.9)
    # ... and writes the view back: every setting, under the link's names
    assert at.query_params["seed"] == ["7"] or at.query_params["seed"] == "7"
    # the tour is on the Overview, one link per stop
    assert len(at.get("page_link")) >= len(tour())
    # a later change in the sidebar is not overridden by the old link
    at.slider(key="sb_temperature").set_value(1.1).run()
    assert at.session_state["settings"].sampling.temperature == 1.1


def test_the_sidebar_picks_the_embedded_draft_and_a_link_carries_it():
    from cactus_core.engine.loading.embedded_drafts import EMBEDDED_DRAFTS

    fast, plain = EMBEDDED_DRAFTS[0].label, "3-layer draft, float32"
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update({"embedded_draft": plain})
    at.run()
    assert not at.exception
    box = at.sidebar.selectbox(key="sb_embedded_draft")
    assert box.options == [d.label for d in EMBEDDED_DRAFTS] and box.value == plain
    assert {"feature draft, bfloat16", "feature draft, float32", plain} == set(box.options)
    s = at.session_state["settings"]
    assert s.embedded_draft == plain and s.pair_label == f"embedded pair ({plain})"
    box.set_value(fast).run()
    assert at.session_state["settings"].embedded_draft == fast
    # a typed pair has no embedded draft to pick
    at.sidebar.radio(key="sb_source").set_value("Hub id or local folder").run()
    assert not [b for b in at.sidebar.selectbox if b.key == "sb_embedded_draft"]
    assert restore("", {"embedded_draft": "a 70B draft"}, {}, public=False) == {}


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("public", [False, True])
def test_no_two_settings_share_a_name_in_the_url(page, public):
    prefix = {"decode": "dec", "step": "step"}.get(page, "x")
    for rule in RULES:
        fields = query_fields(page, {f"{prefix}_rule": rule}, public, ["Embedded"])
        names = [f.name for f in fields]
        assert len(names) == len(set(names)), (page, rule, names)
        keys = [f.key for f in fields]
        assert len(keys) == len(set(keys))


def test_an_address_the_session_wrote_itself_never_turns_widgets_back():
    at = AppTest.from_file(APP, default_timeout=60).run()
    first = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert first["seed"] == "0"
    at.number_input(key="sb_seed").set_value(5).run()
    # a click that left the browser before the new address arrived carries the old one
    at.query_params.clear()
    at.query_params.update(first)
    at.run()
    assert not at.exception
    assert at.session_state["sb_seed"] == 5
    # a link from elsewhere still applies
    at.query_params.clear()
    at.query_params.update({**first, "seed": "9"})
    at.run()
    assert at.session_state["sb_seed"] == 9


def test_a_tour_link_names_its_target_and_only_a_tour_target_reaches_the_script():
    for stop in tour():
        assert stop.link_query[FOCUS_PARAM] == stop.target
        assert tour_target(stop.target) == stop.target
        assert f'".st-key-{stop.target}"' in focus_script(stop.target)
        # no page keeps the focus in its URL: a copied link opens at the top
        got = restore(stop.page, stop.link_query, {}, public=False)
        assert FOCUS_PARAM not in {f.name for f in query_fields(stop.page, got, public=False)}
    for raw in ('x"];alert(1);//', "</script><script>alert(1)", "", None):
        assert tour_target(raw) is None
