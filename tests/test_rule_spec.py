"""A rule as plain data (`maths.rules.spec`): every form in, one form out, errors named."""

from __future__ import annotations

import json

import pytest

from cactus_core.maths.rules import DEFAULT_RULE, RULES, make_rule
from cactus_core.maths.rules.spec import rule_from_spec, rule_spec, rule_spec_json


@pytest.mark.parametrize("name", list(RULES))
def test_round_trip_for_every_rule(name):
    rule = make_rule(name)
    assert rule_from_spec(rule_spec(rule)) == rule
    assert rule_from_spec(rule_spec_json(rule)) == rule
    assert rule_from_spec(name) == rule
    assert rule_from_spec(rule) is rule


def test_forms():
    rule = make_rule("cactus", delta=0.1)
    assert rule_from_spec({"rule": "cactus", "delta": 0.1}) == rule
    assert rule_from_spec('{"rule": "cactus", "delta": 0.1}') == rule
    assert json.loads(rule_spec_json(rule)) == {"rule": "cactus", "delta": 0.1}
    assert rule_from_spec(None) == make_rule(DEFAULT_RULE)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("nope", "unknown rule"),
        ({"delta": 0.1}, '"rule"'),
        ({"rule": "cactus", "delta": -1}, "delta"),
        ({"rule": "cactus", "gamma": 1}, "unknown parameter"),
        ("{not json", "JSON"),
        (3, "a rule is"),
    ],
)
def test_errors_name_the_problem(spec, match):
    with pytest.raises(ValueError, match=match):
        rule_from_spec(spec)
