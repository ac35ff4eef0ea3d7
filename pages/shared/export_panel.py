"""“Use this setting” on Decode and Frontier: a setting as each engine takes it (vLLM with the
plugin, transformers, SGLang, TensorRT-LLM, llama.cpp), with copy buttons. Layout only: the
texts come from cactus_core.app.shared.engine_export, the setting, the SGLang fit and the best
k from cactus_core.app.shared.export_setting; each page says which setting it exports."""

from __future__ import annotations

from typing import Any

import streamlit as st

from cactus_core.app.shared.engine_export import DOCS, ExportSetting, export_blocks, summary

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
        # An engine with nothing to paste for this rule gets its one line, not a tab of its own.
        exports = [e for e in export_blocks(setting) if e.blocks]
        for engine in export_blocks(setting):
            if not engine.blocks:
                st.caption(f"**{engine.engine}**: {engine.caption}")
        for tab, engine in zip(st.tabs([e.engine for e in exports]), exports, strict=True):
            with tab:
                st.caption(engine.version)
                st.markdown(engine.caption)
                if engine.note:
                    st.caption(engine.note)
                for block in engine.blocks:
                    st.markdown(f"**{block.title}**")
                    # Long commands wrap inside the panel rather than run off its edge.
                    st.code(block.code, language=block.language, wrap_lines=True)
        st.caption(f"What each engine can and cannot do with a lab setting: {DOCS}.")


def memo(key: Any, build: Any) -> ExportSetting:
    """The setting built once per input (the SGLang fit reads the run's rows)."""
    memo = st.session_state.get(MEMO_KEY)
    if memo is not None and memo[0] == key:
        return memo[1]
    setting = build()
    st.session_state[MEMO_KEY] = (key, setting)
    return setting
