"""Every table cell is filled: a missing number reads "–", never a raw None or nan."""

from __future__ import annotations

import math

from cactus_core.app.shared.tables import MISSING, cell, display_rows


def test_missing_numbers_read_as_a_dash():
    assert cell(None) == cell(math.nan) == MISSING
    assert cell(0.12345, ".2f") == "0.12" and cell("sps") == "sps"
    rows = display_rows(
        [{"label": "verifier-only", "acceptance_rate": None, "efficiency": math.nan},
         {"label": "cactus δ=1", "acceptance_rate": 0.71234, "efficiency": 0.98}],
        {"label": "setting", "acceptance_rate": "acceptance", "efficiency": "efficiency"},
        {"acceptance_rate": ".3f", "efficiency": ".1%"},
    )  # fmt: skip
    assert rows == [
        {"setting": "verifier-only", "acceptance": MISSING, "efficiency": MISSING},
        {"setting": "cactus δ=1", "acceptance": "0.712", "efficiency": "98.0%"},
    ]
