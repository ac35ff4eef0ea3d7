"""A rule as plain data, the form engines take it in: `{"rule": "cactus", "delta": 0.1}` (the
name as `make_rule` knows it and its parameters). The transformers hook reads it, the vLLM
plugin reads it from the environment and per request, and the export panel writes it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cactus_core.maths.rules import DEFAULT_RULE, Rule, make_rule

RuleSpec = Rule | str | Mapping[str, Any]


def rule_from_spec(spec: RuleSpec | None) -> Rule:
    """A `Rule` from a Rule (as it is), a rule name (its default parameters), a mapping
    `{"rule": name, **params}` or its JSON text; None gives the lab's default rule.
    ValueError names what is wrong (an unknown rule or parameter, a value out of range)."""
    if spec is None:
        return make_rule(DEFAULT_RULE)
    if isinstance(spec, Rule):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if not text.startswith("{"):
            return make_rule(text)
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"rule spec is not valid JSON: {err}") from err
    if not isinstance(spec, Mapping):
        raise ValueError(
            'a rule is a Rule, a rule name or {"rule": name, **params}, got ' + repr(spec)
        )
    params = dict(spec)
    name = params.pop("rule", None)
    if not isinstance(name, str):
        raise ValueError(f'a rule spec needs "rule": a rule name, got {spec!r}')
    return make_rule(name, **params)


def rule_spec(rule: Rule) -> dict[str, Any]:
    """The plain-data form of a rule: {"rule": name, **params} (every parameter, defaults
    included, so the spec means the same whatever the defaults become)."""
    return {"rule": rule.name, **rule.params}


def rule_spec_json(rule: Rule) -> str:
    """`rule_spec` as compact JSON, as an environment variable or a flag carries it."""
    return json.dumps(rule_spec(rule), separators=(", ", ": "))
