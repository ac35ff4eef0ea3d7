"""How every chart draws each rule: one colour per rule and one marker per family, the same
on every page, the CLI's HTML report and the docs' figures. Figures read `style(rule)`;
nothing else picks a rule's colour.

The colours are Kelly's maximum-contrast set (no two rules share one, and none is the black
of the limit or the dark grey of the Pareto frontier). The markers group the families, so a
reader who cannot tell two colours apart still tells the families apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from cactus_core.experiments.sweep_config import BASELINE
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULE_NAMES


@dataclass(frozen=True)
class RuleStyle:
    colour: str
    symbol: str  # a Plotly marker symbol
    family: str


_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    # family -> (marker, its rules)
    "lossless": ("diamond", ("sps", "block")),
    "Cactus": ("circle", ("cactus", "cactus-exact", "cactus-budget", "cactus-adaptive")),
    "thresholds": ("square", ("tas", "topk", "relaxed-topk")),
    "fixed target": ("triangle-up", ("interp", "optimal", "optimal-price")),
    "deferral": ("star", ("cascade", "fuzzy")),
}
_COLOURS: dict[str, str] = {
    "sps": "#848482",  # grey: the lossless baseline every chart compares with
    "block": "#B3446C",
    "cactus": "#008856",
    "cactus-exact": "#0067A5",
    "cactus-budget": "#875692",
    "cactus-adaptive": "#A1CAF1",
    "tas": "#F38400",
    "topk": "#654522",
    "relaxed-topk": "#C2B280",
    "interp": "#E68FAC",
    "optimal": "#882D17",
    "optimal-price": "#2B3D26",
    "cascade": "#BE0032",
    "fuzzy": "#8DB600",
}
UNKNOWN = RuleStyle("#555555", "circle-open", "other")
# The verifier-only runs a sweep measures speed against: not a rule, always shown.
BASELINE_STYLE = RuleStyle("#5a5a5a", "x", "baseline")
# What a chart of every rule shows before a legend click: the baseline, the default rule, its
# exact and budgeted variants, and the limit-reaching rule. The rest are one click away.
SHOWN_FIRST: tuple[str, ...] = (
    LOSSLESS_RULE,
    DEFAULT_RULE,
    "cactus-exact",
    "cactus-budget",
    "optimal",
)

STYLES: dict[str, RuleStyle] = {
    rule: RuleStyle(_COLOURS[rule], symbol, family)
    for family, (symbol, rules) in _FAMILIES.items()
    for rule in rules
}
if set(STYLES) != set(RULE_NAMES) or set(_COLOURS) != set(RULE_NAMES):
    # A new rule must get its own colour and family here, not a recycled one.
    raise RuntimeError(
        f"rule_style.py lists {sorted(STYLES)}, the registry has {sorted(RULE_NAMES)}"
    )
if len(set(_COLOURS.values())) != len(_COLOURS):
    raise RuntimeError("two rules share a colour in rule_style.py")


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
