"""The session's settings, which app.py stores before any page runs, and the detour through
app.py for a page opened on its own."""

from __future__ import annotations

from urllib.parse import urlparse

import streamlit as st

from cactus_core.app.shared.settings import AppSettings

SETTINGS_KEY = "settings"
SETTINGS_ERROR_KEY = "settings_error"
GOTO_PARAM = "goto"  # query parameter: the page to open after a detour through app.py
LAST_RUN_KEY = "decode_run"  # the last DecodeRun of this session (Decode and Playground)


def settings() -> AppSettings:
    """The sidebar's current settings. Every page calls this (or require_entry_point) first."""
    require_entry_point()
    return st.session_state[SETTINGS_KEY]


def require_entry_point() -> None:
    """Rerun through app.py, then come back to this page.

    app.py always runs before a page and stores the settings, except in Streamlit's legacy
    `pages/` mode: a fresh server uses it for a deep link (say /decode) until st.navigation has
    run once, and then runs the page file alone, without the sidebar. Going through app.py
    once switches the server to st.navigation for good; app.py then opens the page named in
    `goto`.
    """
    if SETTINGS_KEY in st.session_state:
        return
    path = urlparse(st.context.url or "").path.rstrip("/").rsplit("/", 1)[-1]
    # The link's own query string comes along, so the page opens in the state it names.
    query = {**st.query_params.to_dict(), GOTO_PARAM: path} if path else None
    st.switch_page("app.py", query_params=query)
