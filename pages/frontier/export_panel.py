"""“Use this setting” on Decode and Frontier: the current or tuned setting as each engine takes
it (vLLM with the plugin, transformers, SGLang, TensorRT-LLM, llama.cpp), with copy buttons.
Layout only: the texts come from cactus_core.app.frontier.engine_export, the setting, the SGLang fit
and the best k from cactus_core.app.frontier.export_setting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import streamlit as st

from cactus_core.app.frontier.engine_export import DOCS, ExportSetting, export_blocks, summary
from cactus_core.app.frontier.export_setting import decode_export, frontier_export, frontier_rule
from cactus_core.app.shared.settings import AppSettings
from cactus_core.experiments.k_tuner import cached_costs, cached_costs_for, predict_k, predict_row
from pages.frontier.tuner_panel import SHOWN_KEY, TunerView

if TYPE_CHECKING:
    from cactus_core.app.decode.run import DecodeRequest, DecodeRun
    from cactus_core.engine.loading.pair import ModelPair
    from cactus_core.experiments.reference import Reference, ReferenceSweep

TITLE = "Use this setting: vLLM, transformers, SGLang, TensorRT-LLM, llama.cpp"
MEMO_KEY = "export_memo"  # (what the export was built from, the ExportSetting)


def panel(setting: ExportSetting | None, key: str, note: str = "") -> None:
    """The export as one expander: a tab per engine, each with its caption and code blocks
    (st.code has the copy button)."""
    with st.expander(TITLE, icon=":material/ios_share:", key=f"{key}_export_open"):
        if setting is None:
            st.info(note)
            return
        st.markdown(summary(setting))
        for line in setting.notes:
            st.caption(line)
        exports = export_blocks(setting)
        for tab, engine in zip(st.tabs([e.engine for e in exports]), exports, strict=True):
            with tab:
                st.caption(engine.version)
                st.markdown(engine.caption)
                if engine.note:
                    st.caption(engine.note)
                for block in engine.blocks:
                    st.markdown(f"**{block.title}**")
                    st.code(block.code, language=block.language)
        st.caption(f"What each engine can and cannot do with a lab setting: {DOCS}.")


def _memo(key: Any, build: Any) -> ExportSetting:
    """The setting built once per input (the SGLang fit reads the run's rows)."""
    memo = st.session_state.get(MEMO_KEY)
    if memo is not None and memo[0] == key:
        return memo[1]
    setting = build()
    st.session_state[MEMO_KEY] = (key, setting)
    return setting


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
    pred = None
    counts = run.output.stats.positions if run is not None else None
    costs = cached_costs(pair) if pair is not None and counts and counts.rounds else None
    if costs is not None:
        pred = predict_k(counts.conditional(), costs, reached=counts.reached)
    key = ("dec", None if run is None else run.run_id, rule, s, pred and pred.best_k)
    panel(_memo(key, lambda: decode_export(s, rule, run, pred)), "dec")


def frontier_panel(s: AppSettings, shown: tuple[Reference, ReferenceSweep] | None) -> None:
    """Frontier's export: the tuner's refined answer for the rule and budget it shows, else
    its first guess from the reference (`shown`, given while the reference is tuned on)."""
    ref, part = shown if shown is not None else (None, None)
    view: TunerView | None = st.session_state.get(SHOWN_KEY)
    resolved = None
    if view is not None:
        resolved = frontier_rule(view.result, view.guess if part is not None else None, view.budget)
    if resolved is None:
        panel(None, "fr", "Tune a setting above (pick a rule and a KL budget) to export it.")
        return
    rule, origin = resolved
    pred = None
    costs = cached_costs_for(ref.model, "cpu") if ref is not None else None
    rows = [] if part is None else part.rule_rows(rule.name)
    if costs is not None and rows:
        value = next(iter(rule.params.values()), 0.0)
        row = min(rows, key=lambda r: abs(float(r.get("value") or 0.0) - float(value)))
        pred = predict_row(row, costs)
    key = ("fr", rule, origin, s, None if part is None else part.top_p, pred and pred.best_k)
    panel(_memo(key, lambda: frontier_export(s, rule, origin, part, pred)), "fr")
