"""Streamlit glue shared by the pages: the sidebar's settings, the process-wide model cache,
the rule picker and parameter widgets (from the rules' metadata). No maths here; numbers come
from cactus_core."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from cactus_core.app import links
from cactus_core.app.pair_cache import PairCache
from cactus_core.app.settings import AppSettings, param_value, rules_markdown
from cactus_core.engine.loading.deployment import (
    PUBLIC_LOAD_ERROR,
    ModelLoadError,
    deployment_policy,
)
from cactus_core.engine.loading.embedded_drafts import embedded_draft
from cactus_core.maths.rules import DEFAULT_RULE, RULES, Param

if TYPE_CHECKING:  # transformers is slow to import; only the Decode page needs it
    from cactus_core.engine.loading.pair import ModelPair

SETTINGS_KEY = "settings"
SETTINGS_ERROR_KEY = "settings_error"
GOTO_PARAM = "goto"  # query parameter: the page to open after a detour through app.py
LAST_RUN_KEY = "decode_run"  # the last DecodeRun of this session (Decode and Playground)

log = logging.getLogger(__name__)


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


# Where in the sidebar a load error goes: app.py sets it under the pair picker on every run,
# before the page runs (each session's script runs in its own thread).
_PAIR_SLOT = threading.local()


def set_pair_error_slot(slot: DeltaGenerator) -> None:
    _PAIR_SLOT.value = slot
    _PAIR_SLOT.asked = False  # a new run: the linked pair's question is not on screen yet
    _PAIR_SLOT.status = None


def set_pair_status_slot(slot: DeltaGenerator) -> None:
    """The sidebar's "Loaded: …" line, which a load later in the same run rewrites."""
    _PAIR_SLOT.status = slot


# The sidebar keys that name a model pair other than the embedded one. A link that sets them
# loads nothing until the visitor clicks: a link is someone else's choice of server folders,
# GGUF conversions and hub downloads, and opening it must not start one.
LINKED_PAIR_KEY = "linked_pair_unconfirmed"
PAIR_NAMING_KEYS = frozenset(
    {"sb_source", "sb_verifier", "sb_draft", "sb_offer_verifier", "sb_offer_draft"}
)


def _linked_pair_confirmed(s: AppSettings) -> bool:
    """Whether the pair may load: yes unless a link named it and nobody has clicked yet."""
    if not st.session_state.get(LINKED_PAIR_KEY):
        return True
    if (s.verifier is None and s.draft is None) or s.pair_key in _PAIRS:
        st.session_state.pop(LINKED_PAIR_KEY, None)  # the embedded pair, or one loaded already
        return True
    if getattr(_PAIR_SLOT, "asked", False):
        return False  # a second call in this run: the question is on screen once
    _PAIR_SLOT.asked = True
    with st.container(border=True):
        st.markdown(
            f"This link names the model pair **{s.pair_label}**. Loading it reads those "
            "models on this server (from its disk, or downloaded from the hub)."
        )
        # The click's callback runs before the next run, which then loads without asking.
        st.button(
            "Load this pair",
            icon=":material/download:",
            key="load_linked_pair",
            on_click=st.session_state.pop,
            args=(LINKED_PAIR_KEY, None),
        )
    return False


def warm_label(s: AppSettings) -> str | None:
    """What the sidebar says is loaded: only a pair the cache holds right now."""
    return _PAIRS.label(s.pair_key)


# Two entries: one for the embedded pair and one for a pair the user is trying, so that two
# sessions on different pairs don't evict each other on every click, while memory stays bound.
# "Warm" is "in this cache" (cactus_core/app/pair_cache.py), so nothing lists an evicted pair.
_PAIRS: PairCache[ModelPair] = PairCache(max_entries=2)


def _load_pair(
    verifier: str | None, draft: str | None, device: str, embedded: str | None
) -> ModelPair:
    """`AppSettings.pair_key`'s pair; `embedded`: the embedded verifier's draft, by label."""
    from cactus_core.engine.loading.models import load_pair

    return load_pair(**_load_kwargs(verifier, draft, device, embedded))


def _load_kwargs(
    verifier: str | None, draft: str | None, device: str, embedded: str | None
) -> dict[str, Any]:
    if verifier is None and embedded is not None:
        return {"device": device, **embedded_draft(embedded).load_kwargs(device)}
    return {"verifier": verifier, "draft": draft, "device": device}


def pair_load_kwargs(s: AppSettings) -> dict[str, Any]:
    """`load_pair`'s keywords for the sidebar's pair (what a Ray worker loads it from)."""
    return _load_kwargs(*s.pair_key)


def _cached_pair(s: AppSettings) -> ModelPair:
    """The pair from the process-wide cache, loading it (once, whoever asks) if need be. A
    public server names the models by the operator's labels, never by their paths."""

    def load() -> ModelPair:
        pair = _load_pair(*s.pair_key)
        if deployment_policy().public:
            names = {}
            if s.verifier is not None and s.verifier_label:
                names["verifier_name"] = s.verifier_label
            if s.draft is not None and s.draft_label:
                names["draft_name"] = s.draft_label
            pair = replace(pair, **names)
        return pair

    return _PAIRS.get(s.pair_key, load, label=_warm_text)


PRELOAD_ENV = "CACTUS_LAB_PRELOAD"  # "0" turns the start-up load off (the tests do)
_PRELOAD_LOCK = threading.Lock()
# pair key -> "running", "done" or "skipped" (no cached conversion, or the load failed)
_PRELOADS: dict[tuple[str | None, str | None, str, str | None], str] = {}


def preload_pair(s: AppSettings) -> bool:
    """Start loading the embedded pair in the background when the app first runs, so that the
    Decode page finds it warm instead of loading for several seconds after the click.

    Only the embedded pair, and only when its conversion is cached: a pair typed into the
    sidebar loads when a page asks for it, and a first conversion (half a minute of both
    cores) never starts behind the user's back. The pair cache lets a page that asks
    meanwhile wait for this same load instead of starting another. Returns True while that
    load may still be running.
    """
    if os.environ.get(PRELOAD_ENV, "1") == "0" or s.pair_key in _PAIRS:
        return False
    if s.verifier is not None or s.draft is not None:
        return False
    with _PRELOAD_LOCK:
        state = _PRELOADS.get(s.pair_key)
        if state is None:
            _PRELOADS[s.pair_key] = state = "running"
            threading.Thread(target=_preload, args=(s,), daemon=True, name="preload").start()
    return state == "running"


def _preload(s: AppSettings) -> None:
    from cactus_core.engine.loading.models import embedded_cache_ready

    state = "skipped"
    try:
        if embedded_cache_ready():
            _cached_pair(s)
            state = "done"
    except Exception:  # get_pair shows the error when a page asks for the pair
        log.warning("preloading the embedded pair failed", exc_info=True)
    finally:
        _PRELOADS[s.pair_key] = state


def _warm_text(pair: ModelPair) -> str:
    # The draft that drafts: a feature draft, when the pair has one, in place of `draft`.
    feature = getattr(pair, "feature_draft", None) is not None
    draft = pair.feature_draft_name if feature else pair.draft_name
    return f"{pair.verifier_name} + {draft} ({pair.device}, {pair.dtype})"


def load_error_message(s: AppSettings, err: BaseException) -> str:
    """What a visitor reads when a load fails. Public: the one fixed sentence, whatever
    happened (so it cannot tell whether a path exists). Otherwise the library's own message
    for a ModelLoadError (written to name the folder and the field, never file contents), and
    only the kind of error for anything else; the details go to the server log."""
    if deployment_policy().public:
        return PUBLIC_LOAD_ERROR
    if isinstance(err, ModelLoadError):
        return f"Could not load {s.pair_label}: {err}"
    return (
        f"Could not load {s.pair_label}: {type(err).__name__} while reading the model files "
        "(the details are in the server log)"
    )


def get_pair(s: AppSettings | None = None) -> ModelPair | None:
    """The model pair the sidebar names, loaded once per process.

    Shows a status box while loading. On failure shows the error there and in the sidebar
    under the pair picker, and returns None; nothing about a load escapes as an exception.
    """
    s = s or settings()
    err = st.session_state.get(SETTINGS_ERROR_KEY)
    if err:
        st.error(f"Model settings: {err}")
        return None
    if not _linked_pair_confirmed(s):
        return None
    if s.pair_key in _PAIRS:
        box = None
    else:
        box = st.status(f"Loading the {s.pair_label} on {s.device}…", expanded=False)
    start = time.perf_counter()
    try:
        # Inside the error handling even when warm: the pair may be evicted meanwhile, and
        # then this loads it again, which can fail (its folder may be gone).
        pair = _cached_pair(s)
    except Exception as error:  # any load failure is a message, not a traceback
        log.warning("could not load %s", s.pair_key, exc_info=True)
        message = load_error_message(s, error)
        if box is None:
            box = st.status("Loading…")
        box.update(label="Could not load the model pair", state="error", expanded=True)
        box.error(message)
        # and next to the picker, where it is fixed
        (getattr(_PAIR_SLOT, "value", None) or st.sidebar).error(message)
        return None
    if box is not None:
        box.update(
            label=f"Loaded {_PAIRS.label(s.pair_key) or s.pair_label} in "
            f"{time.perf_counter() - start:.1f} s",
            state="complete",
        )
    status, warm = getattr(_PAIR_SLOT, "status", None), warm_label(s)
    if status is not None and warm:
        status.caption(f"Loaded: {warm}")
    return pair


def param_widget(
    param: Param, key: str, start: float | None = None, label: str | None = None
) -> float | int:
    """A slider over the parameter's widget range (a number box for integers; a log-scale
    slider over `Param.options` for a log parameter), starting at `start` or the parameter's
    default. The start goes into session state rather than the widget's `value`, so a preset
    may set the key later without Streamlit's warning about a widget given both."""
    if key not in st.session_state:
        st.session_state[key] = param_value(param, param.default if start is None else start)
    low, high = param.ui
    label = label or param.label
    if param.integer:
        step = int(param.step)
        value = st.number_input(label, int(low), int(high), step=step, help=param.help, key=key)
        return int(value)
    if param.log_steps:
        # a value between two steps (a link's, the tuner's, a preset's) joins the steps
        options = param.options(st.session_state[key])
        value = st.select_slider(
            label, options, format_func=param.show_step, help=param.help, key=key
        )
        return float(value)
    value = st.slider(label, float(low), float(high), step=param.step, help=param.help, key=key)
    return float(value)


def rule_picker(
    key_prefix: str, label: str = "Rule", default: str = DEFAULT_RULE
) -> tuple[str, dict[str, float | int]]:
    """A rule selectbox and its parameter widgets, all from the rules' metadata; returns
    (name, params)."""
    # The start goes into session state, not `index`: a link (a tour stop) sets the key
    # first, and Streamlit warns about a widget given both.
    st.session_state.setdefault(f"{key_prefix}_rule", default)
    name = st.selectbox(label, list(RULES), key=f"{key_prefix}_rule", help=rules_markdown())
    st.caption(RULES[name].description)
    if RULES[name].speed_note:
        st.caption(f":material/timer: {RULES[name].speed_note}")
    params = {
        param.name: param_widget(param, f"{key_prefix}_{name}_{param.name}")
        for param in RULES[name].params_spec
    }
    # A page may draw the picker in a fragment, whose reruns skip app.py's write_link: keep the
    # address bar current from here too.
    context = st.session_state.get(LINK_CONTEXT_KEY)
    if context is not None:
        write_link(*context)
    return name, params


# -- links that reopen the view ----------------------------------------------------------------

LINK_WRITTEN_KEY = "link_written"  # the query strings this session put in the URL, newest last
# A rerun carries the address the browser had when it was asked for, which can be one this
# session wrote a few runs ago (a click while the last run's address was still on its way):
# such a query is ours, not a link, and must not turn the widgets back.
LINK_MEMORY = 64
LINK_CONTEXT_KEY = "link_context"  # (page, public, offered) of the run in progress


KEPT_VALUES_KEY = "kept_widget_values"  # {widget key: its last value}, plain session state


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
    with (where or st.sidebar).popover(
        "Copy link",
        icon=":material/link:",
        width="stretch",
        help="An address that reopens this page exactly as it is now.",
    ):
        st.code(url, language=None, wrap_lines=True)
