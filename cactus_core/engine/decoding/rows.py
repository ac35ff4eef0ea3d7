"""The decoding state of each sequence of a batch (`DecodeRow`), made from its prompt. Row i of
a batch draws its coins from its own generator seeded with seed + i. A prompt is text (encoded
by the pair, chat template on request) or a `TokenPrompt`: token ids decoded as given, with no
template (what a `generate` hook hands on)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from cactus_core.engine.decoding.generation import GenerationStats
from cactus_core.engine.decoding.trace import Trace
from cactus_core.maths.sampling import SamplingSettings

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

# meta(prompt, prompt_ids, seed) -> the trace's meta for that row
TraceMeta = Callable[[str, list[int], int], dict[str, Any]]


@dataclass(frozen=True)
class TokenPrompt:
    """A prompt given as token ids: decoded exactly as given (no chat template, no special
    tokens added). `SpeculativeDecoder.generate(TokenPrompt(ids))`, or a list of them as one
    batch. `text` is what the trace shows as the prompt ("" reads the ids back)."""

    ids: tuple[int, ...]
    text: str = ""

    def __post_init__(self) -> None:
        ids = tuple(self.ids)
        if not ids:
            raise ValueError("a TokenPrompt needs at least one token id")
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, int) or t < 0:
                raise ValueError(f"token ids must be non-negative integers, got {t!r}")
        object.__setattr__(self, "ids", ids)


Prompt = str | TokenPrompt


@dataclass(eq=False)
class DecodeRow:
    """Decoding state of one sequence."""

    index: int
    prompt: str
    prompt_ids: list[int]
    generator: torch.Generator
    trace: Trace
    tokens: list[int] = field(default_factory=list)  # prompt + generated
    stats: GenerationStats = field(default_factory=GenerationStats)

    @property
    def generated(self) -> list[int]:
        return self.tokens[len(self.prompt_ids) :]


def check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def decode_rows(
    pair: ModelPair,
    sampling: SamplingSettings,
    prompts: list[Prompt],
    max_new_tokens: int,
    seed: int,
    chat_template: bool,
    meta: TraceMeta,
) -> list[DecodeRow]:
    """One row per prompt, each prompt checked against the context (ValueError naming it);
    a `TokenPrompt`'s ids are taken as they are (its trace says no chat template)."""
    check_int("max_new_tokens", max_new_tokens, 1)
    # SamplingSettings owns the seed's bounds (those of torch's manual_seed).
    seed = dataclasses.replace(sampling, seed=seed).seed
    if not prompts:
        raise ValueError("no prompts given")
    ctx = pair.context_length
    device = torch.device(pair.device)
    rows: list[DecodeRow] = []
    # A statistical test repeats one prompt thousands of times: encode it once.
    encoded: dict[str, list[int]] = {}
    vocab = pair.verifier.get_input_embeddings().num_embeddings
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, TokenPrompt):
            ids = list(prompt.ids)
            if max(ids) >= vocab:
                raise ValueError(f"prompt {i} has token id {max(ids)}; the verifier has {vocab}")
        else:
            if not isinstance(prompt, str) or not prompt.strip():
                raise ValueError(f"prompt {i} is empty")
            if prompt not in encoded:
                encoded[prompt] = list(pair.encode_prompt(prompt, chat_template=chat_template))
            ids = list(encoded[prompt])
        if not ids:
            raise ValueError(f"prompt {i} encodes to no tokens")
        if len(ids) >= ctx:
            raise ValueError(
                f"prompt {i} is {len(ids)} tokens long; the context holds {ctx}, and at "
                "least one new token must fit"
            )
        gen = torch.Generator(device=device)
        gen.manual_seed(seed + i)
        text = _prompt_text(pair, prompt)
        trace = Trace(meta=meta(text, ids, seed + i))
        if isinstance(prompt, TokenPrompt):
            trace.meta["chat_template"] = False  # the ids were taken as they are
        rows.append(DecodeRow(i, text, ids, gen, trace, tokens=list(ids)))
    return rows


def _prompt_text(pair: ModelPair, prompt: Prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return prompt.text or str(pair.tokenizer.decode(list(prompt.ids), skip_special_tokens=False))
