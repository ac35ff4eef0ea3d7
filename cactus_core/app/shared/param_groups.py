"""Every rule parameter once, as one widget each (`ParamGroup`): the Playground's sliders, which
the links and the tour name too; rules that declare the same `Param` share its widget."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from cactus_core.app.shared.positions import Position
from cactus_core.app.shared.settings import param_value
from cactus_core.maths.rules import DEFAULT_RULE, RULES, Param, Rule, make_rule


@dataclass(frozen=True)
class ParamGroup:
    """One Playground widget: a parameter and the rules that take it (cactus and cactus-exact
    share delta; tas's alpha and interp's alpha are different parameters and get two)."""

    key: str  # the widget's key suffix and the key of playground_rules' values
    param: Param
    rules: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.param.label}: {', '.join(self.rules)}"

    def start(self, position: Position) -> float | int:
        """Where the widget starts: the example's own value if it has one, else the default."""
        return param_value(self.param, position.params.get(self.key, self.param.default))


@lru_cache(maxsize=1)
def playground_params() -> tuple[ParamGroup, ...]:
    """Every rule parameter once, in the registry's order. The key is the parameter's name
    unless two different parameters share that name; then the first rule's name prefixes it."""
    users: dict[Param, list[str]] = {}
    for name, cls in RULES.items():
        for param in cls.params_spec:
            users.setdefault(param, []).append(name)
    names = Counter(param.name for param in users)
    return tuple(
        ParamGroup(
            param.name if names[param.name] == 1 else f"{rules[0]}_{param.name}",
            param,
            tuple(rules),
        )
        for param, rules in users.items()
    )


def headline_group() -> ParamGroup:
    """The parameter the Playground shows first: the default rule's swept one."""
    swept = RULES[DEFAULT_RULE].swept()
    return next(g for g in playground_params() if g.param == swept)


def playground_rules(values: Mapping[str, float] | None = None) -> list[Rule]:
    """Every rule, its parameters taken from `values` (keyed by ParamGroup.key) or defaulted."""
    values = values or {}
    key = {(r, g.param.name): g.key for g in playground_params() for r in g.rules}
    rules = []
    for name, cls in RULES.items():
        params = {}
        for p in cls.params_spec:
            params[p.name] = param_value(p, values.get(key[name, p.name], p.default))
        rules.append(make_rule(name, **params))
    return rules
