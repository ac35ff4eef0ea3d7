"""What a feature-draft folder must hold, checked before anything is built from it.

A folder is named by whoever runs the lab (or by a link), so its config.json and weights are
untrusted input: a list instead of an object, a missing key, a string where layers are listed, a
head id past the vocabulary, or 400 layers that take gigabytes before failing. Every such case
is one ModelLoadError naming the folder and the field, raised before a tensor is allocated: the
parameter count the config asks for is bounded by the verifier's own (a draft is meant to be a
fraction of it), and the weights file's tensors are checked by name, shape and kind from its
header before they are read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.errors import StrictDataclassError
from safetensors import safe_open

from cactus_core.engine.loading.deployment import ModelLoadError
from cactus_core.engine.runtime.transformers_names import (
    ACT2FN,
    ROPE_INIT_FUNCTIONS,
    LlamaConfig,
    PreTrainedModel,
)

MAX_CONFIG_BYTES = 1 << 20  # the shipped config.json is 5 KB
# The LlamaConfig fields the draft's layers are built from: whole numbers, at least 1.
SIZES = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
)


def read_config(
    folder: Path, name: str, fmt: str, verifier: PreTrainedModel
) -> tuple[dict[str, Any], LlamaConfig]:
    """The folder's config (its fields checked) and the draft's LlamaConfig."""
    path = folder / name
    if not path.is_file():
        raise ModelLoadError(f"{folder} has no {name}: not a {fmt} folder")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ModelLoadError(f"{path} is over {MAX_CONFIG_BYTES >> 20} MB: not a {fmt} config")
    try:
        meta = json.loads(path.read_bytes())
    except (ValueError, OSError) as err:
        raise ModelLoadError(f"{path} is not readable JSON ({err})") from None
    if not isinstance(meta, dict):
        raise ModelLoadError(f"{path} holds a JSON {type(meta).__name__}, not an object")
    if meta.get("format") != fmt:
        raise ModelLoadError(f"{folder} is not a {fmt} folder (format {meta.get('format')!r})")
    bad = _first_bad_field(meta, verifier)
    if bad is not None:
        raise ModelLoadError(f"{path}: {bad}")
    try:
        cfg = LlamaConfig.from_dict(meta["llama"])
    except (TypeError, ValueError, KeyError, StrictDataclassError) as err:
        reason = " ".join(str(err).split())  # transformers' messages run over several lines
        raise ModelLoadError(f"{path}: llama is not a Llama config ({reason})") from None
    limit = sum(p.numel() for p in verifier.parameters())
    wanted = draft_parameters(cfg, len(meta.get("feature_layers", [])))
    if wanted > limit:
        raise ModelLoadError(
            f"{path}: a draft of {wanted:,} parameters is larger than its verifier "
            f"({limit:,}); a draft is meant to be a fraction of it"
        )
    return meta, cfg


def _whole(x: object, low: int = 1) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _real(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _first_bad_field(meta: dict[str, Any], verifier: PreTrainedModel) -> str | None:
    for key in ("embed_scale", "feature_scale"):
        if not _real(meta.get(key)):
            return f"{key} must be a number, got {meta.get(key)!r}"
    layers = meta.get("feature_layers", [])
    if not isinstance(layers, list) or not all(_whole(i, 0) for i in layers):
        return f"feature_layers must be a list of layer numbers, got {layers!r}"
    scales = meta.get("layer_scales")
    if scales is not None and (
        not isinstance(scales, list) or len(scales) != len(layers) or not all(map(_real, scales))
    ):
        return f"layer_scales must be one number per feature layer, got {scales!r}"
    llama = meta.get("llama")
    if not isinstance(llama, dict):
        return "llama must be an object (the draft layers' Llama config)"
    for key in SIZES:
        if not _whole(llama.get(key)):
            return f"llama.{key} must be a whole number >= 1, got {llama.get(key)!r}"
    if "head_dim" in llama and llama["head_dim"] is not None and not _whole(llama["head_dim"]):
        return f"llama.head_dim must be a whole number >= 1, got {llama['head_dim']!r}"
    if llama["num_attention_heads"] % llama["num_key_value_heads"]:
        return "llama.num_attention_heads must be a multiple of num_key_value_heads"
    bad = _bad_layer_kind(llama)
    if bad is not None:
        return bad
    v = verifier.config
    if (llama["hidden_size"], llama["vocab_size"]) != (v.hidden_size, v.vocab_size):
        return (
            f"the draft (hidden {llama['hidden_size']}, vocab {llama['vocab_size']}) does not "
            f"match the verifier (hidden {v.hidden_size}, vocab {v.vocab_size})"
        )
    return None


def _bad_layer_kind(llama: dict[str, Any]) -> str | None:
    """The activation and the rotary embedding, which transformers checks only when it builds
    the layers (a KeyError deep in its modules), or not at all."""
    act = llama.get("hidden_act", "silu")
    if not isinstance(act, str) or act not in ACT2FN:
        return f"llama.hidden_act must be one of {', '.join(sorted(ACT2FN))}; got {act!r}"
    for key in ("rope_scaling", "rope_parameters"):
        rope = llama.get(key)
        if rope is None:
            continue
        if not isinstance(rope, dict):
            return f"llama.{key} must be an object or null, got {rope!r:.60}"
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
            kinds = ", ".join(["default", *ROPE_INIT_FUNCTIONS])
            return f"llama.{key}.rope_type must be one of {kinds}; got {kind!r:.60}"
        theta = rope.get("rope_theta", 1.0)
        if not _real(theta) or theta <= 0:
            return f"llama.{key}.rope_theta must be a positive number, got {theta!r:.60}"
    return None


def draft_parameters(cfg: LlamaConfig, feature_layers: int) -> int:
    """The parameters a draft of this config owns: its decoder layers, fc and fuse (the
    embedding, norm and head are the verifier's)."""
    d, inner = cfg.hidden_size, cfg.intermediate_size
    head_dim = getattr(cfg, "head_dim", None) or d // cfg.num_attention_heads
    attention = 2 * d * cfg.num_attention_heads * head_dim
    attention += 2 * d * cfg.num_key_value_heads * head_dim
    layer = attention + 3 * d * inner + 2 * d
    fuse = (feature_layers + 1) * d * d if feature_layers else 0
    return int(cfg.num_hidden_layers * layer + 2 * d * d + d + fuse)


def check_weights(path: Path, expected: dict[str, torch.Tensor], head_key: str, vocab: int) -> None:
    """The weights file's tensors, from its header: exactly the draft's names and shapes, and
    head ids (if any) a 1-D integer list no longer than the vocabulary."""
    if not path.is_file():
        raise ModelLoadError(f"{path.parent} has no {path.name}")
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
            kinds = {k: f.get_slice(k).get_dtype() for k in shapes}
    except Exception as err:  # safetensors raises its own error types for a damaged header
        raise ModelLoadError(f"{path} is not a readable safetensors file ({err})") from None
    head = shapes.pop(head_key, None)
    if head is not None and (
        len(head) != 1 or head[0] > vocab or not kinds[head_key].startswith(("I", "U"))
    ):
        raise ModelLoadError(
            f"{path}: {head_key} must be a list of at most {vocab} token ids, got shape {head}"
        )
    want = {k: tuple(v.shape) for k, v in expected.items()}
    if shapes != want:
        wrong = sorted(set(shapes) ^ set(want)) or [k for k in want if shapes[k] != want[k]]
        raise ModelLoadError(f"{path}: its tensors do not match its config.json ({wrong[:3]})")


def check_head_ids(path: Path, ids: torch.Tensor, head_key: str, vocab: int) -> None:
    if ids.numel() and not (int(ids.min()) >= 0 and int(ids.max()) < vocab):
        raise ModelLoadError(f"{path}: {head_key} must be token ids in [0, {vocab})")
