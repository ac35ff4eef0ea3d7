"""The lab's speculative decoder inside transformers' `model.generate`.

    from cactus_transformers import cactus_generate
    out = model.generate(input_ids, custom_generate=cactus_generate, cactus_draft=draft,
                         cactus_rule={"rule": "cactus", "delta": 0.1},
                         do_sample=True, temperature=0.7, num_assistant_tokens=4,
                         max_new_tokens=64)

`model` is the verifier (q) and `cactus_draft` the draft (p); they must score one vocabulary.
`cactus_rule` is a `Rule`, a rule name or `{"rule": name, **params}` (`maths.rules.spec`;
default: the lab's default rule). `cactus_seed` fixes the coins (row i of the batch gets
cactus_seed + i, as in `SpeculativeDecoder.generate`); without it they are drawn from torch's
global generator, so `torch.manual_seed` makes a call repeatable, as it does for generate's own
sampling. The GenerationConfig gives the sampling (do_sample, temperature, top_k, top_p), the
draft length k (`num_assistant_tokens`, 1..16), the length and the EOS ids
(`generation_settings`); `cactus_streamer` gets the prompt, then each round's tokens as they
are decided, then `end()`. The result is what generate returns: a LongTensor
[B, prompt + new] (rows that stop early are padded with pad_token_id), or a
GenerateDecoderOnlyOutput with `sequences` when return_dict_in_generate is set. A batch may
be left-padded (attention_mask); each row is decoded from its own tokens.

What reaches the callable: transformers 5.24 calls a `custom_generate` callable with the
prepared inputs, logits processors, stopping criteria and GenerationConfig, the model
keywords, and, of the caller's other keywords, only those the callable's signature names and
generate's own `_sample` does not. `assistant_model` and `streamer` are parameters of
`generate` itself, so they never get there; the draft and the streamer therefore travel
under the callable's own names, `cactus_draft` and `cactus_streamer`, like `cactus_rule`.

The Hub-style folder (integrations/transformers/cactus_generate, `custom_generate="<folder>",
trust_remote_code=True`) is called with every argument of generate, `assistant_model` and
`streamer` included; its `generate` below hands them on under those names to the same
callable, through generate, so the inputs are prepared exactly as for the callable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.rows import TokenPrompt
from cactus_core.engine.decoding.trace import RoundTrace
from cactus_core.engine.loading.pair import ModelPair
from cactus_core.engine.loading.pairing import head_vocab
from cactus_core.engine.runtime.transformers_names import (
    GenerateDecoderOnlyOutput,
    GenerationConfig,
    PreTrainedModel,
)
from cactus_core.maths.rules.spec import RuleSpec, rule_from_spec
from cactus_core.maths.sampling import SEED_MAX
from cactus_transformers.generation_settings import HFSettings, hf_settings

# What the callable takes under its own names, and what generate calls them.
HANDED_ON = {"assistant_model": "cactus_draft", "streamer": "cactus_streamer"}


def cactus_generate(
    model: PreTrainedModel,
    input_ids: torch.LongTensor,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
    generation_config: GenerationConfig | None = None,
    cactus_draft: PreTrainedModel | None = None,
    cactus_streamer: Any = None,
    cactus_rule: RuleSpec | None = None,
    cactus_seed: int | None = None,
    **model_kwargs: Any,
) -> torch.LongTensor | GenerateDecoderOnlyOutput:
    """A `custom_generate` callable: speculative sampling of `model` with `cactus_draft`
    under `cactus_rule` (see the module docstring)."""
    if cactus_draft is None:
        raise ValueError(
            "custom_generate=cactus_generate needs a draft: cactus_draft=draft (transformers "
            "hands a custom_generate callable neither assistant_model nor streamer, so they "
            "go as cactus_draft= and cactus_streamer=)"
        )
    config = generation_config if generation_config is not None else model.generation_config
    settings = hf_settings(config, input_ids.shape[1], logits_processor, stopping_criteria)
    prompts = _row_prompts(input_ids, model_kwargs.get("attention_mask"))
    if cactus_streamer is not None and len(prompts) > 1:
        raise ValueError("a streamer takes one sequence; stream a batch of 1")
    decoder = SpeculativeDecoder(
        hf_pair(model, cactus_draft),
        rule_from_spec(cactus_rule),
        sampling=settings.sampling,
        record_trace=False,
        measure_kl=False,
        eos_ids=settings.eos_ids,  # generate's EOS ids, not the tokenizer's
    )
    seed = _seed(cactus_seed)
    on_round = None
    if cactus_streamer is not None:
        cactus_streamer.put(input_ids.cpu())  # the prompt first, as generate puts it
        on_round = _streaming(cactus_streamer)
    outputs = decoder.generate(
        prompts, max_new_tokens=settings.max_new_tokens, seed=seed, on_round=on_round
    )
    if cactus_streamer is not None:
        cactus_streamer.end()
    assert isinstance(outputs, list)  # a list of prompts gives a list of outputs
    new = [o.token_ids for o in outputs]
    return _result(input_ids, new, settings)


def generate(model: PreTrainedModel, **generate_arguments: Any) -> Any:
    """The Hub-style folder's entry point: transformers calls it with every argument of
    `model.generate(custom_generate="<folder>", ...)`; it runs generate again with the
    callable, `assistant_model` and `streamer` handed on as `cactus_draft` and
    `cactus_streamer`."""
    arguments = dict(generate_arguments)
    arguments.pop("custom_generate", None)
    if arguments.pop("synced_gpus", None):
        raise ValueError("synced_gpus is not supported: the lab's decoder runs on one device")
    for name, own in HANDED_ON.items():
        value = arguments.pop(name, None)
        if value is None:
            continue
        if arguments.get(own) not in (None, value):
            raise ValueError(f"{name} and {own} name two different objects: give one")
        arguments[own] = value
    return model.generate(custom_generate=cactus_generate, **arguments)


def hf_pair(model: PreTrainedModel, draft: PreTrainedModel) -> ModelPair:
    """The decoder's pair for two models handed over by generate (no tokenizer: the ids are
    decoded as given and nothing is shown as text)."""
    vocab_v, vocab_d = head_vocab(model), head_vocab(draft)
    if vocab_v != vocab_d:
        raise ValueError(
            f"the model scores {vocab_v} tokens and the assistant {vocab_d}: speculative "
            "sampling compares p and q token by token, so both need one vocabulary"
        )
    if model.device != draft.device:
        raise ValueError(f"the model is on {model.device}, the assistant on {draft.device}")
    return ModelPair(
        verifier=model,
        draft=draft,
        tokenizer=_IdsOnly(vocab_v),
        verifier_name=str(getattr(model, "name_or_path", "") or type(model).__name__),
        draft_name=str(getattr(draft, "name_or_path", "") or type(draft).__name__),
        device=model.device,
        dtype=model.dtype,
    )


class _IdsOnly:
    """What the decoder reads of a tokenizer, for ids handed over by generate: its size, and
    no text (the caller decodes the result with its own tokenizer)."""

    all_special_ids: tuple[int, ...] = ()

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        return ""

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return str(token_id)


def _row_prompts(input_ids: torch.Tensor, mask: torch.Tensor | None) -> list[TokenPrompt]:
    """Each row's own tokens: a left-padded batch loses its padding (mask 0 before 1s)."""
    if input_ids.dim() != 2 or input_ids.shape[0] < 1 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids must be [batch, length], got {tuple(input_ids.shape)}")
    rows = input_ids.tolist()
    if mask is None:
        return [TokenPrompt(tuple(r)) for r in rows]
    out = []
    for i, (ids, m) in enumerate(zip(rows, mask.tolist(), strict=True)):
        start = len(m) - sum(1 for x in m if x)
        if any(m[:start]) or not all(m[start:]):
            raise ValueError(
                f"row {i} of attention_mask is not left padding (zeros, then ones): pad on the "
                "left (tokenizer.padding_side = 'left')"
            )
        if start == len(m):
            raise ValueError(f"row {i} of the batch is all padding")
        out.append(TokenPrompt(tuple(ids[start:])))
    return out


def _seed(seed: int | None) -> int:
    if seed is None:
        # From torch's global generator, so torch.manual_seed(s) makes the call repeatable;
        # room is left for the batch's seed + i.
        return int(torch.randint(0, SEED_MAX // 2, (1,)).item())
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX // 2:
        raise ValueError(f"cactus_seed must be an integer in [0, {SEED_MAX // 2}], got {seed!r}")
    return seed


def _streaming(streamer: Any) -> Callable[[RoundTrace, int], None]:
    def on_round(rnd: RoundTrace, row: int) -> None:
        if rnd.emitted_ids:
            streamer.put(torch.tensor([rnd.emitted_ids], dtype=torch.long))

    return on_round


def _result(
    input_ids: torch.Tensor, new: list[list[int]], settings: HFSettings
) -> torch.LongTensor | GenerateDecoderOnlyOutput:
    width = max(len(n) for n in new)
    seq = torch.full(
        (input_ids.shape[0], input_ids.shape[1] + width),
        settings.pad_token_id,
        dtype=torch.long,
        device=input_ids.device,
    )
    seq[:, : input_ids.shape[1]] = input_ids
    for b, ids in enumerate(new):
        seq[b, input_ids.shape[1] : input_ids.shape[1] + len(ids)] = torch.tensor(ids)
    if settings.return_dict:
        return GenerateDecoderOnlyOutput(sequences=seq)
    return seq
