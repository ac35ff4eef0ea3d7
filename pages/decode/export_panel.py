"""Decode's “Use this setting”: the rule picked now, fitted and k-tuned on the last run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cactus_core.app.shared.export_setting import decode_export, decode_prediction
from cactus_core.app.shared.settings import AppSettings
from pages.shared.export_panel import memo, panel

if TYPE_CHECKING:
    from cactus_core.app.shared.request import DecodeRequest, DecodeRun
    from cactus_core.engine.loading.pair import ModelPair


def decode_panel(
    s: AppSettings,
    request: DecodeRequest | None,
    run: DecodeRun | None,
    pair: ModelPair | None,
) -> None:
    """Decode's export: the rule picked now; fitted and k-tuned on the last run."""
    source = request if request is not None else (run.request if run is not None else None)
    if source is None:
        panel(None, "dec", "Enter a prompt: the export is for the rule picked above.")
        return
    rule = source.rule
    pred = decode_prediction(run, pair)
    key = ("dec", None if run is None else run.run_id, rule, s, pred and pred.best_k)
    panel(memo(key, lambda: decode_export(s, rule, run, pred)), "dec")
