"""The prompt form Decode and Step through share: the prompt, the chat template and the length."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from cactus_core.app.shared.limits import MAX_PROMPT_CHARS, MAX_PROMPT_TOKENS
from cactus_core.app.shared.links import MAX_NEW
from cactus_core.app.shared.settings import DEFAULT_PROMPT


@dataclass(frozen=True)
class PromptInput:
    """What the form holds: a `DecodeRequest` without the rule and the sidebar's settings."""

    prompt: str
    chat_template: bool
    max_new_tokens: int


def prompt_form(prefix: str, max_new: int, height: int = 110) -> PromptInput:
    """The prompt, "Apply the chat template" and "Max new tokens", keyed `{prefix}_prompt`,
    `{prefix}_chat` and `{prefix}_max_new` (the keys the page's links restore)."""
    for key, start in (
        (f"{prefix}_prompt", DEFAULT_PROMPT),
        (f"{prefix}_chat", True),
        (f"{prefix}_max_new", max_new),
    ):
        # In session state, not the widgets' `value`: a link or an earlier visit may have
        # set them first, and Streamlit warns about a widget given both.
        st.session_state.setdefault(key, start)
    prompt = st.text_area(
        "Prompt",
        height=height,
        max_chars=MAX_PROMPT_CHARS,
        key=f"{prefix}_prompt",
        help=f"At most {MAX_PROMPT_TOKENS:,} tokens (with the chat template), so that one "
        "prompt's prefill takes seconds, not minutes. The CLI has no cap.",
    )
    o1, o2 = st.columns([1, 2])
    chat = o1.checkbox(
        "Apply the chat template", key=f"{prefix}_chat", help="On for instruct models."
    )
    length = o2.slider(
        "Max new tokens",
        *MAX_NEW,
        step=8,
        key=f"{prefix}_max_new",
        help="The run also stops at the model's end token.",
    )
    return PromptInput(prompt, chat, int(length))
