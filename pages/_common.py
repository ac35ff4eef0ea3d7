"""Streamlit glue shared by the pages: the sidebar's settings, the process-wide model cache,
the rule picker and parameter widgets (from the rules' metadata). No maths here; numbers come
from cactus_core."""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import streamlit as st

from cactus_core.app.settings import AppSettings, param_value, rules_markdown
from cactus_core.maths.rules import DEFAULT_RULE, RULES, Param

if TYPE_CHECKING:  # transformers is slow to import; only the Decode page needs it
    from cactus_core.engine.models import ModelPair

SETTINGS_KEY = "settings"
SETTINGS_ERROR_KEY = "settings_error"
GOTO_PARAM = "goto"  # query parameter: the page to open after a detour through app.py
LAST_RUN_KEY = "decode_run"  # the last DecodeRun of this session (Decode and Playground)

# Labels of pairs this process has loaded, so the sidebar can say what is warm without
# triggering a load (st.cache_resource offers no "is it cached?" query).
_WARM: dict[tuple[str | None, str | None, str], str] = {}


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
    st.switch_page("app.py", query_params={GOTO_PARAM: path} if path else None)


def warm_label(s: AppSettings) -> str | None:
    return _WARM.get(s.pair_key)


# Two entries: one for the embedded pair and one for a pair the user is trying, so that two
# sessions on different pairs don't evict each other on every click, while memory stays bound.
@st.cache_resource(show_spinner=False, max_entries=2)
def _load_pair(verifier: str | None, draft: str | None, device: str) -> ModelPair:
    from cactus_core.engine.models import load_pair

    return load_pair(verifier=verifier, draft=draft, device=device)


PRELOAD_ENV = "CACTUS_LAB_PRELOAD"  # "0" turns the start-up load off (the tests do)
_PRELOAD_LOCK = threading.Lock()
# pair key -> "running", "done" or "skipped" (no cached conversion, or the load failed)
_PRELOADS: dict[tuple[str | None, str | None, str], str] = {}


def preload_pair(s: AppSettings) -> bool:
    """Start loading the embedded pair in the background when the app first runs, so that the
    Decode page finds it warm instead of loading for several seconds after the click.

    Only the embedded pair, and only when its conversion is cached: a pair typed into the
    sidebar loads when a page asks for it, and a first conversion (half a minute of both
    cores) never starts behind the user's back. _load_pair's cache lets a page that asks
    meanwhile wait for this same load instead of starting another. Returns True while that
    load may still be running.
    """
    if os.environ.get(PRELOAD_ENV, "1") == "0" or s.pair_key in _WARM:
        return False
    if s.verifier is not None or s.draft is not None:
        return False
    with _PRELOAD_LOCK:
        state = _PRELOADS.get(s.pair_key)
        if state is None:
            _PRELOADS[s.pair_key] = state = "running"
            threading.Thread(
                target=_preload, args=(s.pair_key,), daemon=True, name="preload"
            ).start()
    return state == "running"


def _preload(key: tuple[str | None, str | None, str]) -> None:
    from cactus_core.engine.models import embedded_cache_ready

    state = "skipped"
    try:
        if embedded_cache_ready():
            _WARM[key] = _warm_text(_load_pair(*key))
            state = "done"
    except (OSError, ValueError, RuntimeError, ImportError):
        pass  # get_pair shows the error when a page asks for the pair
    finally:
        _PRELOADS[key] = state


def _warm_text(pair: ModelPair) -> str:
    return f"{pair.verifier_name} + {pair.draft_name} ({pair.device}, {pair.dtype})"


def get_pair(s: AppSettings | None = None) -> ModelPair | None:
    """The model pair the sidebar names, loaded once per process.

    Shows a status box while loading. On failure shows an error and returns None.
    """
    s = s or settings()
    err = st.session_state.get(SETTINGS_ERROR_KEY)
    if err:
        st.error(f"Model settings: {err}")
        return None
    if s.pair_key in _WARM:
        return _load_pair(*s.pair_key)
    with st.status(f"Loading the {s.pair_label} on {s.device}…", expanded=False) as box:
        start = time.perf_counter()
        try:
            pair = _load_pair(*s.pair_key)
        except (OSError, ValueError, RuntimeError, ImportError) as err:
            box.update(label="Could not load the model pair", state="error", expanded=True)
            st.error(f"Could not load {s.pair_label}: {err}")
            return None
        _WARM[s.pair_key] = _warm_text(pair)
        box.update(
            label=f"Loaded {_WARM[s.pair_key]} in {time.perf_counter() - start:.1f} s",
            state="complete",
        )
    return pair


def param_widget(
    param: Param, key: str, start: float | None = None, label: str | None = None
) -> float | int:
    """A slider over the parameter's widget range (a number box for integers), starting at
    `start` or the parameter's default. The start goes into session state rather than the
    widget's `value`, so a preset may set the key later without Streamlit's warning about a
    widget given both."""
    if key not in st.session_state:
        st.session_state[key] = param_value(param, param.default if start is None else start)
    low, high = param.ui
    label = label or param.label
    if param.integer:
        step = int(param.step)
        value = st.number_input(label, int(low), int(high), step=step, help=param.help, key=key)
        return int(value)
    value = st.slider(label, float(low), float(high), step=param.step, help=param.help, key=key)
    return float(value)


def rule_picker(
    key_prefix: str, label: str = "Rule", default: str = DEFAULT_RULE
) -> tuple[str, dict[str, float | int]]:
    """A rule selectbox and its parameter widgets, all from the rules' metadata; returns
    (name, params)."""
    names = list(RULES)
    name = st.selectbox(
        label,
        names,
        index=names.index(default),
        key=f"{key_prefix}_rule",
        help=rules_markdown(),
    )
    st.caption(RULES[name].description)
    params = {
        param.name: param_widget(param, f"{key_prefix}_{name}_{param.name}")
        for param in RULES[name].params_spec
    }
    return name, params
