"""The Frontier's quality tabs: the task score (paired against lossless, or as a share) and the
long answers' end-token and loop rates against divergence. Layout only: the texts come from
cactus_core.app.frontier.quality, the charts from its figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from cactus_core.app.frontier import figures as ff
from cactus_core.app.frontier.quality import LONG_CAPTION, LONG_VIEWS, TASK_VIEWS, task_caption

Chart = Callable[[go.Figure, str], None]  # the page's clickable chart


def task_scores(rows: list[dict[str, Any]], selected: str | None, chart: Chart, key: str) -> None:
    view = st.radio(
        "Task score", list(TASK_VIEWS), format_func=TASK_VIEWS.get, horizontal=True,
        key="fr_task_view",
    )  # fmt: skip
    chart(ff.frontier_chart(rows, "tokens_per_call", view, front=False, selected=selected), key)
    st.caption(task_caption(rows, view))


def long_answers(rows: list[dict[str, Any]], selected: str | None, chart: Chart, key: str) -> None:
    """How answers end: at the end token, or in a loop that runs to the budget."""
    view = st.radio(
        "Answers that", list(LONG_VIEWS), format_func=LONG_VIEWS.get, horizontal=True,
        key="fr_long_view",
    )  # fmt: skip
    chart(ff.frontier_chart(rows, view, front=False, selected=selected), key)
    st.caption(LONG_CAPTION)
