"""The transformers names the engine uses, imported in this one module.

transformers resolves its names lazily: the first `from transformers import X` in a process
imports X's module then. Two threads doing that at once (the app's background load of the
embedded pair and a page opened meanwhile, or two visitors' first pages) can each find a module
the other is still importing half initialised, and fail with `ImportError: cannot import name
'PreTrainedModel' from 'transformers'`. Every engine module takes its transformers names from
here instead, so the first thread imports them all while Python's lock on this module makes any
other thread wait; and this module imports nothing of ours, so that wait cannot close a cycle.
`tests/test_first_view.py` checks that no other module of the package imports transformers at
its top.
"""

from __future__ import annotations

from transformers import (
    AttentionInterface,
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.activations import ACT2FN
from transformers.generation import GenerateDecoderOnlyOutput
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)
from transformers.utils import logging as transformers_logging

__all__ = [
    "ACT2FN",
    "ROPE_INIT_FUNCTIONS",
    "AttentionInterface",
    "AttentionMaskInterface",
    "AutoModelForCausalLM",
    "AutoTokenizer",
    "DynamicCache",
    "EosTokenCriteria",
    "GenerateDecoderOnlyOutput",
    "GenerationConfig",
    "LlamaConfig",
    "LlamaDecoderLayer",
    "LlamaForCausalLM",
    "LlamaRotaryEmbedding",
    "MaxLengthCriteria",
    "PreTrainedModel",
    "PreTrainedTokenizerBase",
    "TemperatureLogitsWarper",
    "TopKLogitsWarper",
    "TopPLogitsWarper",
    "apply_rotary_pos_emb",
    "sdpa_attention_forward",
    "transformers_logging",
]
