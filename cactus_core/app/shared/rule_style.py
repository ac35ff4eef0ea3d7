"""How every chart draws each rule: one colour per rule and one marker per family, the same
on every page, the CLI's HTML report and the docs' figures. Figures read `style(rule)`;
nothing else picks a rule's colour.

The colours are Kelly's maximum-contrast set (no two rules share one, and none is the black
of the limit or the dark grey of the Pareto frontier). The markers group the families, so a
reader who cannot tell two colours apart still tells the families apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from cactus_core.experiments.sweeps.config import BASELINE
from cactus_core.maths.rules import RULES

LIMIT_COLOUR = "#000000"  # the limit's curve, on every chart


@dataclass(frozen=True)
class RuleStyle:
    colour: str
    symbol: str  # a Plotly marker symbol
    family: str


# Each family's marker; a rule's family and colour are on the rule (`Rule.card`).
_MARKERS: dict[str, str] = {
    "lossless": "diamond",
    "Cactus": "circle",
    "thresholds": "square",
    "fixed target": "triangle-up",
    "deferral": "star",
}
UNKNOWN = RuleStyle("#555555", "circle-open", "other")
# The verifier-only runs a sweep measures speed against: not a rule, always shown.
BASELINE_STYLE = RuleStyle("#5a5a5a", "x", "baseline")
# What a chart of every rule shows before a legend click: the rules marked `shown_first`
# (the baseline, the default rule, its exact and budgeted variants, the limit-reaching rule).
# The rest are one click away.
SHOWN_FIRST: tuple[str, ...] = tuple(n for n, cls in RULES.items() if cls.card.shown_first)

STYLES: dict[str, RuleStyle] = {
    name: RuleStyle(cls.card.colour, _MARKERS[cls.card.family], cls.card.family)
    for name, cls in RULES.items()
}
if len({s.colour for s in STYLES.values()}) != len(STYLES):
    raise RuntimeError("two rules share a colour (the rules' `card.colour`)")


def style(rule: str) -> RuleStyle:
    """The rule's colour, marker and family (UNKNOWN for a name outside the registry)."""
    if rule == BASELINE:
        return BASELINE_STYLE
    return STYLES.get(rule, UNKNOWN)


def rule_colour(rule: str) -> str:
    return style(rule).colour


def shown_first(rule: str) -> bool | str:
    """A trace's `visible`: True for the rules a chart opens with, else "legendonly"."""
    return True if rule in SHOWN_FIRST or rule not in STYLES else "legendonly"


def rule_of_label(label: str) -> str:
    """The rule a setting's label names ("cactus δ=0.1" -> "cactus")."""
    return label.split(" ", 1)[0]
