"""The rules table of the docs and each rule in words, written from the rules' own metadata
(so they cannot drift).

`python -m cactus_core rules` prints both; docs/rules.md holds a copy that a test compares.
"""

from __future__ import annotations

from typing import Any

from cactus_core.maths.rules.base import Param, Rule


def _param_cell(param: Param[Any], swept: bool) -> str:
    unit = f" {param.unit}" if param.unit else ""
    grid = ", ".join(f"{v:g}" for v in param.grid) if swept else "held at the default"
    kind = "integer" if param.integer else "number"
    return (
        f"`{param.name}` ({param.symbol}): {kind} in [{param.low:g}, {param.high:g}]{unit}, "
        f"default {param.default:g}; sweep {grid}"
    )


def rules_markdown(rules: dict[str, type[Rule]]) -> str:
    """One Markdown row per rule: name, what it does, parameters, lossless, its guarantee,
    what a(n) needs, citation."""
    lines = [
        "| rule | verifies against | parameters | lossless | guarantee | a(n) from | citation |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, cls in rules.items():
        params = "<br>".join(_param_cell(p, i == 0) for i, p in enumerate(cls.params_spec))
        needs = "whole rows" if cls.caps.needs_rows else "p_n, q_n only"
        needs = "the whole round" if cls.caps.round_level else needs
        lossless = "yes" if cls.caps.lossless else "no"
        card = cls.card
        lines.append(
            f"| `{name}` | {card.description} | {params or '–'} | {lossless} | {card.guarantee} "
            f"| {needs} | {card.citation} |"
        )
    return "\n".join(lines) + "\n"


DOCS_PAGE = "docs/rules.md"


def rule_anchor(name: str) -> str:
    """Where docs/rules.md describes a rule: its heading under "Each rule in words" (a heading
    "### `name`" gets the anchor "name", as rule names are lower case with hyphens)."""
    return f"{DOCS_PAGE}#{name}"


def rules_in_words(rules: dict[str, type[Rule]]) -> str:
    """One heading per rule with its plain sentence (and what its residual does on the drafted
    token, where it differs from every min(1, h_n / p_n) rule)."""
    parts = []
    for name, cls in rules.items():
        text = cls.card.in_words
        if cls.card.residual_in_words:
            text += f" {cls.card.residual_in_words}"
        parts.append(f"### `{name}`\n\n{text}\n")
    return "\n".join(parts)
