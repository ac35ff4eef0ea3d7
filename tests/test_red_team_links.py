"""Links with numbers no widget takes: huge, tiny, non-finite, over-long. Every field of every
page, for every rule, public or not, drops them (or keeps a value its widget accepts) and never
raises; `?T=1e308` once raised OverflowError on every page of the tab."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core.app.shared.links import page_fields, restore, sidebar_fields
from cactus_core.maths.rules import RULES

APP = Path(__file__).resolve().parent.parent / "app.py"
PAGES = ("", "decode", "step", "playground", "frontier")
PREFIX = {"decode": "dec", "step": "step"}
HOSTILE = (
    "1e308", "-1e308", "1.7976931348623157e308", "-1.7976931348623157e308", "1e309", "-1e309",
    "inf", "-inf", "Infinity", "nan", "-nan", "1e-320", "-1e-320", "4.9e-324", "-0", "-0.0",
    "9" * 400, "-" + "9" * 400, "9" * 5000, "1e9", "-1e9", "1_000_000", " 1e308 ", "0x7f",
)  # fmt: skip


def _states(page: str) -> list[dict]:
    """The widget states a link is read under: each rule picked, on a page with a rule."""
    if page in PREFIX:
        return [{f"{PREFIX[page]}_rule": rule} for rule in RULES]
    return [{}]


@pytest.mark.parametrize("public", [False, True])
@pytest.mark.parametrize("page", PAGES)
def test_every_field_drops_numbers_its_widget_cannot_take(page, public):
    tried = 0
    for state in _states(page):
        rule = {"rule": state[next(iter(state))]} if state else {}
        fields = [*sidebar_fields(public), *page_fields(page, state)]
        for field in fields:
            if field.kind not in (int, float):
                continue
            for raw in HOSTILE:
                got = restore(page, {**rule, field.name: raw}, {}, public)
                tried += 1
                if field.key not in got:
                    continue
                value = got[field.key]
                assert math.isfinite(value), (field.name, raw, value)
                assert field.low is None or value >= field.low, (field.name, raw, value)
                assert field.high is None or value <= field.high, (field.name, raw, value)
    assert tried >= 7 * len(HOSTILE)  # the sidebar's numbers at least


def test_a_link_of_huge_numbers_opens_the_app_with_its_own_values():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update(
        {
            "T": "1e308",
            "top_p": "-1e308",
            "k": "1e308",
            "seed": "9" * 400,
            "rule": "tas",
            "alpha": "1e308",
        }
    )
    at.run()
    assert not at.exception
    s = at.session_state["settings"]
    assert (s.sampling.temperature, s.sampling.top_p) == (0.7, 0.95)  # the widgets' defaults
    # the same tab goes on working
    at.run()
    assert not at.exception


@pytest.mark.parametrize(
    "page, query, key",
    [
        ("decode", {"rule": "tas", "alpha": "1e308"}, "dec_tas_alpha"),
        ("decode", {"rule": "tas", "alpha": "-1e308"}, "dec_tas_alpha"),
        ("step", {"rule": "cactus", "delta": "1e308"}, "step_cactus_delta"),
        ("", {"T": "1e308", "top_p": "-1e308"}, "sb_temperature"),
    ],
)
def test_the_reported_links_are_dropped_not_raised(page, query, key):
    got = restore(page, query, {}, False)
    assert key not in got
