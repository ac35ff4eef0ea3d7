"""Links that reopen a view: each page's widget settings restored from the URL before any widget
is drawn and written back after the page ran, the values kept across pages, and "Copy link"."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import ParamSpec, TypeVar

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from cactus_core.app.shared import links
from pages.shared.pair import LINKED_PAIR_KEY, PAIR_NAMING_KEYS

LINK_WRITTEN_KEY = "link_written"  # the query strings this session put in the URL, newest last
# A rerun carries the address the browser had when it was asked for, which can be one this
# session wrote a few runs ago (a click while the last run's address was still on its way):
# such a query is ours, not a link, and must not turn the widgets back.
LINK_MEMORY = 64
LINK_CONTEXT_KEY = "link_context"  # (page, public, offered) of the run in progress


KEPT_VALUES_KEY = "kept_widget_values"  # {widget key: its last value}, plain session state

Params = ParamSpec("Params")
Result = TypeVar("Result")


def keep_widget_state(public: bool, offered: Sequence[str] = ()) -> None:
    """Before any widget is drawn: every page's widget values survive a visit to another page.
    Streamlit drops a widget's value on a run that does not draw it (so the Decode prompt
    came back as the default after a look at the Playground); writing each value back to its
    own key makes it the session's, which Streamlit keeps on full runs. A fragment's rerun on
    another page (the Playground's δ slider) still lost it: the key stays mapped to the
    undrawn widget, and the rerun's bookkeeping drops it. So each value is also copied under
    one key no widget owns, and put back from there when Streamlit has dropped it."""
    kept = st.session_state.setdefault(KEPT_VALUES_KEY, {})
    for key in links.kept_keys(public, offered):
        if key in st.session_state:
            kept[key] = st.session_state[key]
        if key in kept:
            st.session_state[key] = kept[key]


def restore_link(page: str, public: bool, offered: Sequence[str] = ()) -> None:
    """Before any widget is drawn: a query string this session did not write itself (a link
    opened in a fresh browser, a tour stop, a hand-edited address) sets the widgets it names.
    Values a widget would refuse are dropped (links.LinkField.parse)."""
    st.session_state[LINK_CONTEXT_KEY] = (page, public, list(offered))
    query = st.query_params.to_dict()
    if not query or _frozen(query) in st.session_state.get(LINK_WRITTEN_KEY, ()):
        return
    restored = links.restore(page, query, st.session_state, public, offered)
    st.session_state.update(restored)
    if PAIR_NAMING_KEYS & restored.keys():
        st.session_state[LINKED_PAIR_KEY] = True
    _remember(query)


def write_link(page: str, public: bool, offered: Sequence[str] = ()) -> str:
    """After the page ran: put its settings in the URL, and return the link that reopens it."""
    fields = links.query_fields(page, st.session_state, public, offered)
    query = links.to_query(fields, st.session_state)
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)
    _remember(query)
    return links.link(st.context.url or "", page, query)


def _frozen(query: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(query.items()))


def _remember(query: dict[str, str]) -> None:
    seen = [q for q in st.session_state.get(LINK_WRITTEN_KEY, ()) if q != _frozen(query)]
    st.session_state[LINK_WRITTEN_KEY] = [*seen, _frozen(query)][-LINK_MEMORY:]


def copy_link(url: str, where: DeltaGenerator | None = None) -> None:
    """The "Copy link" control (in `where`, else at the sidebar's end): the address with every
    setting of this view, and a copy button (the code block's own)."""
    # Opening it reruns the page: a part that redrew alone (a `linked_fragment`) since the
    # last full run left this address behind, and the rerun writes the current one here.
    with (where or st.sidebar).popover(
        "Copy link",
        icon=":material/link:",
        width="stretch",
        help="An address that reopens this page exactly as it is now.",
        key="copy_link",
        on_change="rerun",
    ):
        st.code(url, language=None, wrap_lines=True)


def linked_fragment(body: Callable[Params, Result]) -> Callable[Params, Result]:
    """`st.fragment` for a part of a page that draws linked widgets (the rule picker, the
    Playground's sliders, the tuner's budget). A fragment's rerun skips app.py, which writes
    the page's settings into the URL after the page ran: without this the address bar would
    keep the values from before the widget moved."""

    @functools.wraps(body)
    def run(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        out = body(*args, **kwargs)
        context = st.session_state.get(LINK_CONTEXT_KEY)
        if context is not None:
            write_link(*context)
        return out

    return st.fragment(run)
