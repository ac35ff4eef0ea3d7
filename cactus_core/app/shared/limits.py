"""How much work one click in the app may start. A public lab is shared: a visitor must not be
able to hold the server's cores for minutes with one long prompt or one huge sweep, and the
page must answer with a message, not a stall. The CLI has no such caps; the app says where
they apply and points there.

- MAX_PROMPT_TOKENS: the longest prompt the Decode page decodes and the Frontier sweeps, after
  the chat template (8k tokens of the embedded pair took 101 s of prefill on a laptop CPU,
  with nothing to show meanwhile; 1,024 take a few seconds).
- MAX_PROMPT_CHARS: the Decode text box's own limit, checked before tokenising (a prompt of
  MAX_PROMPT_TOKENS tokens is about 4,000 characters of English).
- MAX_SWEEP_RUNS: settings × prompts in one Frontier sweep (1,000 prompts × 1,000 grid values
  made every rerun take 22 s just to look the sweep up in the cache).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

MAX_PROMPT_TOKENS = 1024
MAX_PROMPT_CHARS = 8 * MAX_PROMPT_TOKENS
MAX_SWEEP_RUNS = 5000
CLI_HINT = "the command line (`python -m cactus_core`) has no such cap"


def check_prompt_chars(prompt: str, which: str = "the prompt") -> None:
    """ValueError naming the cap when the prompt is longer than MAX_PROMPT_CHARS characters."""
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(
            f"{which} is {len(prompt):,} characters; the app takes prompts of at most "
            f"{MAX_PROMPT_CHARS:,} characters and {MAX_PROMPT_TOKENS:,} tokens ({CLI_HINT})"
        )


def check_prompt_tokens(n_tokens: int, which: str = "the prompt") -> None:
    """ValueError naming the cap when a prompt has more than MAX_PROMPT_TOKENS tokens."""
    if n_tokens > MAX_PROMPT_TOKENS:
        raise ValueError(
            f"{which} is {n_tokens:,} tokens; the app takes prompts of at most "
            f"{MAX_PROMPT_TOKENS:,} tokens, so that one click cannot hold the server for "
            f"minutes ({CLI_HINT})"
        )


def check_sweep_size(n_settings: int, n_prompts: int) -> None:
    """ValueError naming the cap when settings × prompts is over MAX_SWEEP_RUNS."""
    runs = n_settings * n_prompts
    if runs > MAX_SWEEP_RUNS:
        raise ValueError(
            f"this sweep is {n_settings:,} settings × {n_prompts:,} prompts = {runs:,} runs; "
            f"the app runs at most {MAX_SWEEP_RUNS:,} per sweep. Use fewer grid values or "
            f"fewer prompts ({CLI_HINT})"
        )


def check_prompts_fit(
    prompts: Sequence[str], encode: Callable[[str], list[int]], context: int
) -> None:
    """ValueError naming the first prompt (1-based) that is over MAX_PROMPT_TOKENS or does not
    fit the pair's context. `encode` is the pair's encode_prompt with the sweep's template;
    its own ValueError (an empty or unencodable prompt) is passed on with the prompt named."""
    for i, prompt in enumerate(prompts, start=1):
        if len(prompt) > MAX_PROMPT_CHARS:  # cheap, and spares tokenising megabytes
            check_prompt_chars(prompt, f"prompt {i}")
        try:
            n = len(encode(prompt))
        except ValueError as err:
            raise ValueError(f"prompt {i}: {err}") from None
        check_prompt_tokens(n, f"prompt {i}")
        if n >= context:
            raise ValueError(
                f"prompt {i} is {n:,} tokens, longer than the model pair's context of "
                f"{context:,} tokens"
            )
