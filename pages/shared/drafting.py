"""The sidebar's chain-or-tree setting (drawn under "Speculation"); its keys, ranges and link
names live in cactus_core/app/shared/links.py."""

from __future__ import annotations

import streamlit as st

from cactus_core.app.shared.links import DRAFTING, DRAFTING_KEY, TREE_DEPTH, TREE_NODES, Slider
from cactus_core.engine.drafting.tree_settings import TreeSettings


def _int_slider(spec: Slider, help: str) -> int:
    st.session_state.setdefault(spec.key, int(spec.default))
    return int(st.slider(spec.label, int(spec.low), int(spec.high), key=spec.key, help=help))


def tree_widgets() -> TreeSettings | None:
    """Chain or tree; for a tree its node budget and depth. None: a chain."""
    st.session_state.setdefault(DRAFTING_KEY, DRAFTING[0])
    mode = st.radio(
        "Drafting",
        DRAFTING,
        key=DRAFTING_KEY,
        horizontal=True,
        help="A tree drafts several candidates at every depth (EAGLE-2 style) and the "
        "verifier checks all of them in one pass; it needs a feature draft.",
    )
    if mode != "tree":
        return None
    nodes = _int_slider(TREE_NODES, "Drafted tokens per round; the verify pass reads one more.")
    depth = _int_slider(TREE_DEPTH, "The longest path a round can accept.")
    return TreeSettings(nodes=nodes, depth=depth)
