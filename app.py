"""Cactus Lab: `streamlit run app.py`.

The entry point runs on every rerun of every page: it sets up navigation from the page table
(pages/shared/navigation.py), restores a link's settings, draws the shared sidebar (model pair,
sampling, k, seed) into st.session_state, runs the chosen page, and writes the page's settings
back into the URL. The pages live in pages/: a script each, its panels in a folder of its name.
"""

from __future__ import annotations

import logging

import streamlit as st

from cactus_core.engine.loading.deployment import DeploymentPolicy, deployment_policy
from pages.overview.page import overview
from pages.shared.navigation import PAGES
from pages.shared.page_links import copy_link, keep_widget_state, restore_link, write_link
from pages.shared.session import GOTO_PARAM
from pages.shared.sidebar import sidebar
from pages.shared.tour import bring_into_view, next_stop, take_focus

st.set_page_config(page_title="Cactus Lab", page_icon="🌵", layout="wide")
# Streamlit's default 6rem above every page pushed the controls toward the fold at 1440×900.
st.html("<style>[data-testid='stMainBlockContainer']{padding-top:2.5rem;}</style>")


def _policy() -> DeploymentPolicy | None:
    """This server's deployment policy; None (and no page at all) when a setting is malformed:
    the app must not fall back to allowing everything. The reason goes to the server log only
    (the value may be the operator's path)."""
    try:
        return deployment_policy()
    except ValueError:
        logging.getLogger(__name__).exception("invalid deployment settings")
        st.error("This server's model settings are invalid; its operator's log says why.")
        return None


# The Overview, the default page, runs as a function (pages/overview/__init__.py says why).
NAVIGATION = [
    st.Page(
        overview if p.default else p.path,
        title=p.title,
        icon=p.icon,
        url_path=p.url_path or None,
        default=p.default,
    )
    for p in PAGES
]
page = st.navigation(NAVIGATION)
goto = st.query_params.get(GOTO_PARAM)
if goto is not None:
    # A page sent us here first (pages/shared/session.py); open it now that navigation is
    # set, with the rest of the link's query string.
    del st.query_params[GOTO_PARAM]
    target = next((p for p in NAVIGATION if p.url_path == goto), None)
    if target is not None and target is not page:
        st.switch_page(target, query_params=st.query_params.to_dict())
policy = _policy()
if policy is not None:
    offered = list(policy.choices()) if policy.public else []
    keep_widget_state(policy.public, offered)
    restore_link(page.url_path, policy.public, offered)
    take_focus()
    next_stop()
    # "Copy link" at the top of the sidebar, where its popover has room to open (at the
    # bottom it was cut off); it is filled once the page has run and the address is final.
    link_slot = st.sidebar.container()
    sidebar(policy)
    try:
        page.run()
        bring_into_view()
    finally:
        # Also when the page stops early or reruns: the URL always names what is on screen.
        url = write_link(page.url_path, policy.public, offered)
    copy_link(url, link_slot)
