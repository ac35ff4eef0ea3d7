"""The guided tour's landing: a tour stop's link names the element it describes, and the page
brings that element into view once it has been drawn (cactus_core/app/shared/tour.py)."""

from __future__ import annotations

import streamlit as st

from cactus_core.app.shared.tour import FOCUS_PARAM, focus_script, tour_target

PENDING_KEY = "tour_focus"  # the element to bring into view at the end of the next full run


def take_focus() -> None:
    """Before the page runs: remember the element a tour link names. The URL loses it when the
    page writes its settings back, so a run that stops early (a rerun) still scrolls after
    the next one."""
    target = tour_target(st.query_params.get(FOCUS_PARAM))
    if target is not None:
        st.session_state[PENDING_KEY] = target


def bring_into_view() -> None:
    """After the page ran to its end: scroll to the remembered element, once."""
    target = st.session_state.pop(PENDING_KEY, None)
    if target is not None:
        st.html(focus_script(target), unsafe_allow_javascript=True)
