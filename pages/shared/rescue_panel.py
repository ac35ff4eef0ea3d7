"""'Why drafts get rejected': the Decode page (a finished run) and Step through (the run so
far) draw it with this one function. Widgets and layout only; the numbers come from
cactus_core.app.shared.rescue."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

import streamlit as st

from cactus_core.app.shared.rescue import (
    rank_histogram,
    rank_histogram_figure,
    rejected_drafts,
    rescue_curve,
    rescue_curve_figure,
    rescue_summary,
    rescue_table,
)

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import RoundTrace


def why_rejected(
    rounds: Sequence[RoundTrace],
    key: str,
    text: Callable[[int], str] | None = None,
    last_decided: Collection[int] | None = None,
) -> None:
    """The rejected drafts of `rounds` (of the last, only the nodes in `last_decided`, when
    given): the smallest Cactus delta that accepts each for sure, the rescue curve, and where
    they sat in q. `key` keeps two pages' charts apart."""
    drafts = rejected_drafts(rounds, text, last_decided)
    with st.expander(f"Why drafts get rejected ({len(drafts)})", expanded=False):
        st.caption(
            "For each rejected draft: the smallest delta at which Cactus (closed form) would "
            "have accepted it for sure, h_n ≥ p_n, or 'never' when q_n = 0 (outside the "
            "verifier's top-k / top-p: truncation caps what any delta can buy)."
        )
        st.markdown(rescue_summary(drafts))
        if not drafts:
            return
        st.dataframe(
            rescue_table(drafts),
            hide_index=True,
            key=f"{key}_rescue_table",
            column_config={c: st.column_config.NumberColumn(format="%.3g") for c in ("p_n", "q_n")},
        )
        left, right = st.columns(2)
        left.plotly_chart(rescue_curve_figure(*rescue_curve(drafts)), key=f"{key}_rescue_curve")
        right.plotly_chart(rank_histogram_figure(*rank_histogram(drafts)), key=f"{key}_q_rank")
