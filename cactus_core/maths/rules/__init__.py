"""Acceptance rules for speculative sampling, batched over any leading shape.

One class per rule carries everything about it: name, description, citation, whether it is
lossless, whether a(n) needs whole rows, and its parameters (`Param`: default, range, widget
range, sweep grid). Widgets, sweeps, the CLI, trace replay and the docs' rules table all read
them from here (`RULES`). Adding a rule is one class in this package, registered below, and its
tests. The protocol a rule implements is documented in `base.py`.
"""

from __future__ import annotations

from typing import Any

from cactus_core.maths.rules.base import NO_STATS, UNBOUNDED, Drafted, Param, RowStats, Rule
from cactus_core.maths.rules.block import Block
from cactus_core.maths.rules.cactus import (
    Cactus,
    CactusAdaptive,
    CactusBudget,
    CactusExact,
    budget_delta,
    cactus_exact_h,
    cactus_h,
)
from cactus_core.maths.rules.deferral import Cascade, Fuzzy, KLJudge
from cactus_core.maths.rules.fixed_targets import Interp, Optimal, OptimalPrice
from cactus_core.maths.rules.fly import FLy
from cactus_core.maths.rules.learned_judge import LearnedJudge
from cactus_core.maths.rules.sglang import SGLangThresholds
from cactus_core.maths.rules.sps import SPS
from cactus_core.maths.rules.thresholds import TAS, RelaxedTopK, TopK, kth_largest

RULES: dict[str, type[Rule]] = {
    cls.name: cls
    for cls in (
        SPS,
        Cactus,
        CactusExact,
        CactusBudget,
        CactusAdaptive,
        TAS,
        TopK,
        RelaxedTopK,
        SGLangThresholds,
        Interp,
        Cascade,
        Fuzzy,
        KLJudge,
        Optimal,
        OptimalPrice,
        Block,
        FLy,
        LearnedJudge,
    )
}
RULE_NAMES: tuple[str, ...] = tuple(RULES)
LOSSLESS_RULE = SPS.name  # the baseline every relaxed rule is measured against
DEFAULT_RULE = Cactus.name  # what the app and the sweeps start from


def rule_class(name: str) -> type[Rule]:
    """The class of a rule by name; ValueError naming the allowed names otherwise."""
    if name not in RULES:
        raise ValueError(f"unknown rule {name!r}; allowed: {', '.join(RULE_NAMES)}")
    return RULES[name]


def make_rule(name: str, **params: Any) -> Rule:
    """A rule by name with its parameters (defaults fill the ones left out); see each class's
    `params_spec` for names, defaults and ranges, or `python -m cactus_core rules`."""
    cls = rule_class(name)
    allowed = [p.name for p in cls.params_spec]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"rule {name!r} got unknown parameter(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(allowed) or 'none'}"
        )
    return cls(**params)


def lossless_rule() -> Rule:
    """The rule every decoder judges with at temperature 0: p and q are one-hot there, and
    `sps` then accepts a draft iff it is the verifier's argmax, else emits that argmax."""
    return make_rule(LOSSLESS_RULE)


__all__ = [
    "DEFAULT_RULE",
    "LOSSLESS_RULE",
    "NO_STATS",
    "RULES",
    "RULE_NAMES",
    "UNBOUNDED",
    "Drafted",
    "Param",
    "RowStats",
    "Rule",
    "budget_delta",
    "cactus_exact_h",
    "cactus_h",
    "kth_largest",
    "lossless_rule",
    "make_rule",
    "rule_class",
]
