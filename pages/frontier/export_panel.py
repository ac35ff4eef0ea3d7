"""Frontier's “Use this setting”: the tuner's refined answer, else its first guess, drawn
inside the tuner's fragment so that it changes with the answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cactus_core.app.shared.export_setting import (
    frontier_export,
    frontier_prediction,
    frontier_rule,
)
from cactus_core.app.shared.settings import AppSettings
from pages.shared.export_panel import memo, panel

if TYPE_CHECKING:
    from cactus_core.app.frontier.tuner import TunerView
    from cactus_core.app.shared.reference import Reference, ReferenceSweep


def frontier_panel(
    s: AppSettings,
    shown: tuple[Reference, ReferenceSweep] | None,
    view: TunerView | None,
    key: str = "fr",
) -> None:
    """Frontier's export, drawn by the tuner it exports: the tuner's refined answer for the rule
    and budget it shows (`view`), else its first guess from the reference (`shown`, given while
    the reference is tuned on). `key` tells the reference's tuner from your sweep's."""
    ref, part = shown if shown is not None else (None, None)
    resolved = None
    if view is not None:
        resolved = frontier_rule(view.result, view.guess if part is not None else None, view.budget)
    if resolved is None:
        panel(None, key, "Tune a setting above (pick a rule and a KL budget) to export it.")
        return
    rule, origin = resolved
    pred = frontier_prediction(rule, ref, part)
    memo_key = (key, rule, origin, s, None if part is None else part.top_p, pred and pred.best_k)
    panel(memo(memo_key, lambda: frontier_export(s, rule, origin, part, pred)), key)
