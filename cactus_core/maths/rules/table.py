"""The rules table of the docs, written from the rules' own metadata (so it cannot drift).

`python -m cactus_core rules` prints it; docs/rules.md holds a copy that a test compares.
"""

from __future__ import annotations

from cactus_core.maths.rules.base import Param, Rule


def _param_cell(param: Param, swept: bool) -> str:
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
        needs = "whole rows" if cls.needs_rows else "p_n, q_n only"
        needs = "the whole round" if cls.round_level else needs
        lossless = "yes" if cls.lossless else "no"
        lines.append(
            f"| `{name}` | {cls.description} | {params or '–'} | {lossless} | {cls.guarantee} "
            f"| {needs} "
            f"| {cls.citation} |"
        )
    return "\n".join(lines) + "\n"
