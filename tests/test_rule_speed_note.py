"""A rule that decodes measurably slower says so where it is picked, from its own metadata
(`Rule.card.speed_note`), with the benchmark that measured it."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from cactus_core.maths.rules import RULES


def picker_app() -> None:
    import streamlit as st

    from pages.shared.rule_picker import rule_picker

    st.session_state.setdefault("t_rule", "cactus-budget")
    rule_picker("t")


def test_cactus_budget_says_it_is_slower_where_it_is_picked():
    note = RULES["cactus-budget"].card.speed_note
    assert "docs/benchmarks.md" in note and "Slower" in note
    at = AppTest.from_function(picker_app).run()
    assert not at.exception
    assert any(note in c.value for c in at.caption)
    at.selectbox(key="t_rule").set_value("cactus").run()
    assert not any("Slower" in c.value for c in at.caption)  # cactus has no such note
