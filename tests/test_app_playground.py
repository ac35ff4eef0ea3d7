"""AppTest of the Overview and Playground pages: they render, the slider moves the numbers the
library computes, and bad tables give an inline error instead of a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core.app.shared.positions import PRESETS, WORKED_EXAMPLE
from cactus_core.maths.emitted import expected_acceptance
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULES, make_rule

APP = Path(__file__).resolve().parent.parent / "app.py"
WORKED = PRESETS[WORKED_EXAMPLE]


@pytest.fixture
def playground() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    at.switch_page("pages/playground.py").run()
    assert not at.exception
    return at


def _table(at: AppTest):
    """The all-rules table, indexed by rule label."""
    return at.dataframe[0].value.set_index("rule")


def test_overview_renders_with_links_and_sidebar():
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception
    assert at.title[0].value.endswith("Cactus Lab")
    assert at.sidebar.slider(key="sb_temperature").value == 0.7
    assert at.session_state["settings"].k == 4
    assert at.session_state["settings_error"] is None


def test_playground_renders_the_worked_example(playground):
    at = playground
    assert not at.error
    table = _table(at)
    assert table.loc["sps", "a(n), drafted"] == pytest.approx(0.4375, abs=1e-6)
    assert table.loc["cactus δ=0.21", "a(n), drafted"] == pytest.approx(0.824, abs=1e-3)
    assert len(at.get("plotly_chart")) >= 1
    assert len(at.latex) >= 4


@pytest.mark.parametrize("delta", [0.0, 0.5, 1.5])
def test_delta_slider_moves_acceptance_as_the_library_says(playground, delta):
    at = playground
    at.select_slider(key="pg_delta").set_value(delta).run()
    assert not at.exception
    table = _table(at)
    for name in ("cactus", "cactus-exact"):
        want = float(expected_acceptance(make_rule(name, delta=delta), WORKED.p, WORKED.q))
        assert table.loc[f"{name} δ={delta:g}", "expected acceptance"] == pytest.approx(
            want, abs=1e-6
        )
    # sps ignores delta
    sps = float(expected_acceptance(make_rule("sps"), WORKED.p, WORKED.q))
    assert table.loc["sps", "expected acceptance"] == pytest.approx(sps, abs=1e-6)
    headline = next(m for m in at.metric if m.label.startswith("cactus δ="))
    assert headline.value == f"{table.loc[f'cactus δ={delta:g}', 'expected acceptance']:.1%}"


def test_truncated_preset_warns_that_no_delta_helps(playground):
    at = playground
    at.selectbox(key="pg_preset").set_value("Outside the verifier's nucleus (top-p)").run()
    at.select_slider(key="pg_delta").set_value(2.0).run()
    assert not at.exception
    assert any("no mass" in w.value for w in at.warning)
    assert _table(at).loc["cactus δ=2", "a(n), drafted"] == 0.0


def test_other_drafted_token_changes_a_n(playground):
    at = playground
    at.selectbox(key="pg_drafted_Worked example (reference README)").set_value(0).run()
    assert not at.exception
    assert _table(at).loc["sps", "a(n), drafted"] == pytest.approx(1.0)  # q .30 ≥ p .05


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({0: {"p (draft)": -0.1}}, "negative"),
        ({i: {"q (verifier)": 0.0} for i in range(3)}, "all zeros"),
        ({1: {"p (draft)": None}}, "NaN"),
        ({2: {"token": "decode"}}, "distinct"),
    ],
)
def test_bad_table_shows_an_error_not_a_traceback(playground, edit, message):
    at = playground
    at.radio(key="pg_source").set_value("Edit a table").run()
    at.session_state["pg_table"] = {"edited_rows": edit, "added_rows": [], "deleted_rows": []}
    at.run()
    assert not at.exception
    assert any(message in e.value for e in at.error)
    assert not at.dataframe[1:]  # no rule table is drawn from a bad table


def test_unnormalised_table_is_normalised_with_a_notice(playground):
    at = playground
    at.radio(key="pg_source").set_value("Edit a table").run()
    at.session_state["pg_table"] = {
        "edited_rows": {0: {"q (verifier)": 0.5}},
        "added_rows": [{"token": "extra", "p (draft)": 0.0, "q (verifier)": 0.0}],
        "deleted_rows": [],
    }
    at.run()
    assert not at.exception
    assert not at.error
    assert any("q summed to 1.2" in i.value for i in at.info)


def test_from_a_decode_run_without_one_says_so(playground):
    at = playground
    at.radio(key="pg_source").set_value("From a decode run").run()
    assert not at.exception
    assert any("No decode run" in i.value for i in at.info)


def widget_type(p) -> str:
    return "number_input" if p.integer else "slider"


def test_decode_rule_picker_is_built_from_the_rules_metadata():
    # No pair is named, so the page draws its form and an error instead of loading models.
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["sb_source"] = "Hub id or local folder"
    at.session_state["sb_verifier"] = ""
    at.run()
    at.switch_page("pages/decode.py").run()
    assert not at.exception
    assert at.selectbox(key="dec_rule").options == list(RULES)
    assert at.selectbox(key="dec_rule").value == DEFAULT_RULE
    for name, cls in RULES.items():
        at.selectbox(key="dec_rule").set_value(name).run()
        assert not at.exception
        for p in cls.params_spec:
            widget = at.get("slider") + at.get("number_input") + at.get("select_slider")
            mine = [w for w in widget if w.key == f"dec_{name}_{p.name}"]
            assert len(mine) == 1
            assert mine[0].value == p.default
            # a log parameter slides over its log steps, labelled as written
            assert mine[0].type == ("select_slider" if p.log_steps else widget_type(p))
            if p.log_steps:
                assert mine[0].options == [p.show_step(v) for v in p.options(p.default)]
            assert mine[0].label == p.label
            assert mine[0].help == p.help


def test_frontier_form_starts_from_the_rules_metadata():
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["sb_source"] = "Hub id or local folder"
    at.session_state["sb_verifier"] = ""
    at.run()
    at.switch_page("pages/frontier.py").run()
    assert not at.exception
    assert at.multiselect(key="fr_rules").value == [DEFAULT_RULE, LOSSLESS_RULE]
    grid = RULES[DEFAULT_RULE].swept().grid
    assert at.text_input(key=f"fr_grid_{DEFAULT_RULE}").value == ", ".join(f"{v:g}" for v in grid)
