"""The model pair the sidebar names: the process-wide cache, the start-up load of the embedded
pair, and a load's status and errors on the page and in the sidebar."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from cactus_core.app.shared.markdown import md_text
from cactus_core.app.shared.pair_cache import PairCache
from cactus_core.app.shared.settings import AppSettings
from cactus_core.engine.loading.deployment import (
    PUBLIC_LOAD_ERROR,
    ModelLoadError,
    deployment_policy,
)
from cactus_core.engine.loading.embedded_drafts import embedded_draft
from pages.shared.session import SETTINGS_ERROR_KEY, settings

if TYPE_CHECKING:  # transformers is slow to import; only the Decode page needs it
    from cactus_core.engine.loading.pair import ModelPair

log = logging.getLogger(__name__)

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
            f"This link names the model pair **{md_text(s.pair_label)}**. Loading it reads those "
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
# "Warm" is "in this cache" (app/shared/pair_cache.py), so nothing lists an evicted pair.
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
        return md_text(f"Could not load {s.pair_label}: {err}")
    return (
        f"Could not load {md_text(s.pair_label)}: {type(err).__name__} while reading the model "
        "files (the details are in the server log)"
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
        box = st.status(f"Loading the {md_text(s.pair_label)} on {s.device}…", expanded=False)
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
            label=f"Loaded {md_text(_PAIRS.label(s.pair_key) or s.pair_label)} in "
            f"{time.perf_counter() - start:.1f} s",
            state="complete",
        )
    status, warm = getattr(_PAIR_SLOT, "status", None), warm_label(s)
    if status is not None and warm:
        status.caption(f"Loaded: {md_text(warm)}")
    return pair
