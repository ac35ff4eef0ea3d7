"""Whether two models can be a verifier/draft pair: one tokenizer, one scored vocabulary.

Speculative sampling compares p and q token by token, so both models must map text to the same
ids and score the same vocabulary; these checks run on every load (`models.load_pair`).
"""

from __future__ import annotations

import hashlib
import json

from cactus_core.engine.loading.deployment import ModelLoadError
from cactus_core.engine.runtime.transformers_names import PreTrainedModel, PreTrainedTokenizerBase

# Strings on which two tokenizers must give the same ids: prose, code, digits, whitespace runs,
# non-Latin scripts, emoji and the chat markers.
TOKENIZER_PROBES = (
    "Tell me about cacti: how do they survive in the desert?",
    "def f(x):\n    return x ** 2  # square\n\n\tprint(f(3))",
    "3.14159 + 2,718 = 5.85959; 1e-3 < 0.01 != 100%",
    "  leading spaces, trailing spaces   \n\n\nnew lines",
    "Ünïcödé café naïve — 東京 Москва مرحبا 🌵🚀",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
)


def tokenizer_fingerprint(tok: PreTrainedTokenizerBase) -> str:
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def check_tokenizers_agree(
    a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase, name_a: str, name_b: str
) -> None:
    """Raise ModelLoadError unless both tokenizers have one vocabulary and encode alike."""
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        diff = sorted(set(va.items()) ^ set(vb.items()), key=lambda kv: kv[1])[:3]
        raise ModelLoadError(
            f"verifier {name_a!r} and draft {name_b!r} have different vocabularies "
            f"({len(va)} vs {len(vb)} entries; e.g. {diff}); speculative sampling needs one "
            "tokenizer"
        )
    for s in TOKENIZER_PROBES:
        ia = a(s, add_special_tokens=False)["input_ids"]
        ib = b(s, add_special_tokens=False)["input_ids"]
        if ia != ib:
            raise ModelLoadError(
                f"verifier {name_a!r} and draft {name_b!r} tokenize {s!r} differently "
                f"({ia[:8]}... vs {ib[:8]}...); speculative sampling needs one tokenizer"
            )


def _check_logit_sizes(v: PreTrainedModel, d: PreTrainedModel, name_v: str, name_d: str) -> None:
    nv, nd = _scored_vocab(v), _scored_vocab(d)
    if nv != nd:
        raise ModelLoadError(
            f"verifier {name_v!r} scores {nv} tokens but draft {name_d!r} scores {nd}; "
            "p and q must share one vocabulary"
        )


def _scored_vocab(model: PreTrainedModel) -> int:
    head = model.get_output_embeddings()
    return int(getattr(head, "out_features", None) or head.weight.shape[0])


def max_positions(model: PreTrainedModel) -> int:
    cfg = model.config
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError(f"cannot tell the context length of {type(model).__name__}")


def head_vocab(model: PreTrainedModel) -> int:
    """The number of tokens a model's head scores (the config's vocabulary without a head)."""
    head = model.get_output_embeddings()
    return int(head.out_features if head is not None else model.config.vocab_size)
