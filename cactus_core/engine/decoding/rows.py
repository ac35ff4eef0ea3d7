"""The decoding state of each sequence of a batch (`DecodeRow`), made from its prompt. Row i of
a batch draws its coins from its own generator seeded with seed + i."""

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
    prompts: list[str],
    max_new_tokens: int,
    seed: int,
    chat_template: bool,
    meta: TraceMeta,
) -> list[DecodeRow]:
    """One row per prompt, each prompt checked against the context (ValueError naming it)."""
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
    for i, prompt in enumerate(prompts):
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
        trace = Trace(meta=meta(prompt, ids, seed + i))
        rows.append(DecodeRow(i, prompt, ids, gen, trace, tokens=list(ids)))
    return rows
