"""Tables as the pages show them: every cell filled, numbers to the digits that mean
something, and a missing number (verifier-only's acceptance, a draft never judged) written
"–", never a raw None or nan."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

MISSING = "–"


def cell(value: Any, fmt: str = ".3f") -> str:
    """A number as text in `fmt`; MISSING for None, nan or a value that is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return MISSING if value is None else str(value)
    if math.isnan(value):
        return MISSING
    return format(value, fmt)


def display_rows(
    rows: Sequence[Mapping[str, Any]], columns: Mapping[str, str], formats: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Rows with the columns picked and renamed (`columns`: key -> heading), each number in
    its column's format (`formats`, by key; text columns as they are)."""
    out = []
    for r in rows:
        row = {}
        for key, heading in columns.items():
            value = r.get(key)
            row[heading] = cell(value, formats[key]) if key in formats else cell(value)
        out.append(row)
    return out
