"""What a transformers `GenerationConfig` asks of the lab's decoder, and what it cannot have.

`generate` prepares the config (the model's own, the caller's keywords, the library defaults)
and the logits processors and stopping criteria it implies before it calls a `custom_generate`
callable. The decoder samples with temperature, top-k and top-p in transformers' order (the
same filters, `maths.sampling`), stops at the EOS ids and the length, and drafts
`num_assistant_tokens` tokens a round; anything else that would change which tokens come out
(a repetition penalty, a minimum length, stop strings, beams, a processor of the caller's own)
is refused with a ValueError naming it rather than silently left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cactus_core.engine.runtime.transformers_names import (
    EosTokenCriteria,
    GenerationConfig,
    MaxLengthCriteria,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from cactus_core.maths.sampling import K_MAX, SamplingSettings

# The processors and criteria generate builds for settings the decoder does itself.
SAMPLING_WARPERS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)
OWN_CRITERIA = (MaxLengthCriteria, EosTokenCriteria)
# Outputs generate can add to a dict result that the decoder does not make.
EXTRA_OUTPUTS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")
# Candidate generators other than a draft model.
OTHER_ASSISTANTS = ("prompt_lookup_num_tokens", "assistant_early_exit")


@dataclass(frozen=True)
class HFSettings:
    """The decoder's settings for one `generate` call."""

    sampling: SamplingSettings
    max_new_tokens: int
    eos_ids: frozenset[int]
    pad_token_id: int
    return_dict: bool


def hf_settings(
    config: GenerationConfig,
    prompt_width: int,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
) -> HFSettings:
    """The decoder's settings from a prepared GenerationConfig (as generate hands it to a
    custom_generate callable: defaults filled, max_length including the prompt's width)."""
    refuse_unsupported(config, logits_processor, stopping_criteria)
    eos = _ids(config.eos_token_id)
    max_new = int(config.max_length) - prompt_width
    if max_new < 1:
        raise ValueError(
            f"max_length {config.max_length} leaves no room after the {prompt_width}-token "
            "prompt: set max_new_tokens"
        )
    pad = config.pad_token_id
    if pad is None:
        pad = min(eos) if eos else 0  # what generate itself falls back to: an EOS id
    return HFSettings(
        sampling=_sampling(config),
        max_new_tokens=max_new,
        eos_ids=frozenset(eos),
        pad_token_id=int(pad),
        return_dict=bool(config.return_dict_in_generate),
    )


def _sampling(config: GenerationConfig) -> SamplingSettings:
    k = config.num_assistant_tokens
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K_MAX:
        raise ValueError(
            f"num_assistant_tokens is {k!r} (transformers' default is 20 unless you set it); "
            f"the lab's decoder drafts 1..{K_MAX} tokens a round: pass num_assistant_tokens=k "
            "(4 is the lab's default)"
        )
    if not config.do_sample:
        return SamplingSettings(temperature=0.0, k=k)
    temperature = 1.0 if config.temperature is None else float(config.temperature)
    top_k = int(config.top_k or 0)
    top_p = 1.0 if config.top_p is None else float(config.top_p)
    return SamplingSettings(temperature=temperature, top_k=top_k, top_p=top_p, k=k)


def refuse_unsupported(config: GenerationConfig, logits_processor: Any, criteria: Any) -> None:
    """ValueError for what the decoder cannot honour, named."""
    if (config.num_beams or 1) > 1:
        raise ValueError("beam search (num_beams > 1) is not speculative sampling: set num_beams=1")
    for name in OTHER_ASSISTANTS:
        if getattr(config, name, None) is not None:
            raise ValueError(f"{name} picks another drafter; give a draft model instead")
    for name in EXTRA_OUTPUTS:
        if getattr(config, name, False):
            raise ValueError(f"{name}=True is not available: the result holds sequences only")
    for proc in logits_processor or ():
        if not isinstance(proc, SAMPLING_WARPERS):
            raise ValueError(
                f"{type(proc).__name__} is not supported: the lab's decoder applies temperature, "
                "top-k and top-p only (no penalties, minimum lengths or custom processors)"
            )
    for crit in criteria or ():
        if not isinstance(crit, OWN_CRITERIA):
            raise ValueError(
                f"{type(crit).__name__} is not supported: the lab's decoder stops at the EOS "
                "ids and max_new_tokens only (no stop strings, time limits or custom criteria)"
            )


def _ids(value: Any) -> set[int]:
    if value is None:
        return set()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}
