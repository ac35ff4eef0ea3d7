"""The rule picker and the parameter widgets, all from the rules' metadata."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from cactus_core.app.shared.settings import param_value, rules_markdown
from cactus_core.maths.rules import DEFAULT_RULE, RULES, Param, Rule


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
    key_prefix: str,
    label: str = "Rule",
    default: str = DEFAULT_RULE,
    names: Sequence[str] | None = None,
) -> Rule:
    """A rule selectbox (of `names`, every rule by default) and its parameter widgets, all from
    the rules' metadata; returns the rule they set (its class checks each value against the
    `Param`'s range and types it: a widget hands back floats, also for whole numbers)."""
    names = list(RULES) if names is None else list(names)
    # The start goes into session state, not `index`: a link (a tour stop) sets the key
    # first, and Streamlit warns about a widget given both.
    key = f"{key_prefix}_rule"
    st.session_state.setdefault(key, default)
    if st.session_state[key] not in names:  # a run's rule that this picker leaves out
        st.session_state[key] = names[0]
    name = st.selectbox(label, names, key=key, help=rules_markdown())
    st.caption(RULES[name].card.description)
    if RULES[name].card.speed_note:
        st.caption(f":material/timer: {RULES[name].card.speed_note}")
    params = {
        param.name: param_widget(param, f"{key_prefix}_{name}_{param.name}")
        for param in RULES[name].params_spec
    }
    return RULES[name](**params)
