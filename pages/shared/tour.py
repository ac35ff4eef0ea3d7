"""The guided tour's landing: a tour stop's link names the element it describes, and the page
brings that element into view once it has been drawn (cactus_core/app/shared/tour.py); the
sidebar then says which stop this is and links the next one."""

from __future__ import annotations

import streamlit as st

from cactus_core.app.shared.tour import (
    FOCUS_PARAM,
    STOP_PARAM,
    focus_script,
    stop_link,
    stop_number,
    tour,
    tour_target,
)
from pages.shared.navigation import page_entry

PENDING_KEY = "tour_focus"  # the element to bring into view at the end of the next full run
STOP_KEY = "tour_stop"  # the tour stop this session is at (1 on), once a stop's link opened


def take_focus() -> None:
    """Before the page runs: remember the element a tour link names. The URL loses it when the
    page writes its settings back, so a run that stops early (a rerun) still scrolls after
    the next one."""
    target = tour_target(st.query_params.get(FOCUS_PARAM))
    if target is not None:
        st.session_state[PENDING_KEY] = target
    number = stop_number(st.query_params.get(STOP_PARAM))
    if number is not None:
        st.session_state[STOP_KEY] = number


def next_stop() -> None:
    """In the sidebar, while the session follows the tour: this stop, and a link to the next."""
    number = st.session_state.get(STOP_KEY)
    if number is None:
        return
    stops = tour()
    with st.sidebar.container(border=True, key="tour_next"):
        st.caption(f"Guided tour, stop {number} of {len(stops)}: {stops[number - 1].title}")
        if number < len(stops):
            nxt = stops[number]
            st.page_link(
                page_entry(nxt.page).path,
                label=f"Next stop: {number + 1}. {nxt.title}",
                icon=":material/arrow_forward:",
                query_params=stop_link(number + 1),
            )
        else:
            st.caption("That is the last stop: the Overview lists them all.")


def bring_into_view() -> None:
    """After the page ran to its end: scroll to the remembered element, once."""
    target = st.session_state.pop(PENDING_KEY, None)
    if target is not None:
        st.html(focus_script(target), unsafe_allow_javascript=True)
