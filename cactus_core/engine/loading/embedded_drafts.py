"""The ways to run the embedded pair (SmolLM2-135M-Instruct as the verifier): which shipped
draft drafts for it, and the verifier's dtype on a CPU. The sidebar's "Draft" choice, its links,
the CLI's `--embedded-draft` and the tests read them from here;
`load_pair(**choice.load_kwargs(device))` loads one. `load_pair()` alone is the library's plain
pair: the embedded verifier and its independent 3-layer draft, in the device's default dtype.

The default is the feature draft in the faster dtype on this CPU
(`packed_linear.native_bfloat16`): bfloat16 where the CPU multiplies it natively, where
checking 5 tokens costs about what 1 does, and float32 elsewhere, where 5 bfloat16 tokens
cost about 1.6 times 1 and float32 decodes faster (docs/benchmarks.md, "On a CPU without
native bfloat16"). The shipped reference sweep was measured in bfloat16
(`REFERENCE_EMBEDDED_DRAFT`).

Kept free of transformers so that the app's settings can import it at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

from cactus_core.engine.loading.load_args import resolve_device
from cactus_core.engine.runtime.packed_linear import native_bfloat16

FEATURE_DRAFT_DIR = Path(__file__).resolve().parents[2] / "assets" / "feature_draft"
# What traces and pages call the shipped feature draft (never its folder: a server path).
FEATURE_DRAFT_NAME = "cactus feature draft (embedded, 1 layer)"
# The CLI's name for the feature draft in this CPU's faster dtype.
FASTEST_FEATURE = "feature"


@cache
@dataclass(frozen=True)
class EmbeddedDraft:
    """A shipped draft for the embedded verifier, and the verifier's dtype on a CPU."""

    label: str  # the sidebar's and links' name
    name: str  # the CLI's (--embedded-draft)
    description: str
    feature_draft: Path | None  # None: the independent 3-layer draft (assets/draft)
    cpu_dtype: str  # on CUDA every choice runs in the device's default dtype

    def load_kwargs(self, device: str | torch.device) -> dict[str, Any]:
        """`load_pair` keywords (feature_draft, dtype) for the embedded verifier on `device`."""
        on_cpu = resolve_device(device).type == "cpu"
        return {"feature_draft": self.feature_draft, "dtype": self.cpu_dtype if on_cpu else None}


_FEATURE = (
    "An EAGLE-style draft that reads the verifier's own features (from three of its layers) "
    "through one decoder layer"
)
FEATURE_BFLOAT16 = EmbeddedDraft(
    "feature draft, bfloat16",
    "feature-bfloat16",
    f"{_FEATURE}, with the draft and the verifier in bfloat16. On a CPU with native bfloat16 "
    "(AVX-512 BF16 or AMX) checking 5 tokens costs about what 1 does: the fastest speculation "
    "there. The shipped reference sweep was measured on this pair.",
    FEATURE_DRAFT_DIR,
    "bfloat16",
)
FEATURE_FLOAT32 = EmbeddedDraft(
    "feature draft, float32",
    "feature-float32",
    f"{_FEATURE}, with the draft and the verifier in float32: the faster build on a CPU without "
    "native bfloat16, where 5 bfloat16 tokens cost about 1.6 times 1.",
    FEATURE_DRAFT_DIR,
    "float32",
)
THREE_LAYER_FLOAT32 = EmbeddedDraft(
    "3-layer draft, float32",
    "3-layer",
    "An independent 3-layer draft model (the one transformers' assisted generation can "
    "run too), and the verifier in float32, where greedy decoding gives the verifier's own "
    "output token for token.",
    None,
    "float32",
)
# The first is the default: the pair the app opens on and the CLI loads without model flags.
EMBEDDED_DRAFTS = (
    (FEATURE_BFLOAT16, FEATURE_FLOAT32, THREE_LAYER_FLOAT32)
    if native_bfloat16()
    else (FEATURE_FLOAT32, FEATURE_BFLOAT16, THREE_LAYER_FLOAT32)
)
DEFAULT_EMBEDDED_DRAFT = EMBEDDED_DRAFTS[0].label
# The pair the shipped reference sweep was measured on, and `sweep --reference` loads.
REFERENCE_EMBEDDED_DRAFT = FEATURE_BFLOAT16.label


def embedded_draft(label: str) -> EmbeddedDraft:
    """The `EMBEDDED_DRAFTS` entry with this label (ValueError otherwise)."""
    for choice in EMBEDDED_DRAFTS:
        if choice.label == label:
            return choice
    names = ", ".join(repr(c.label) for c in EMBEDDED_DRAFTS)
    raise ValueError(f"unknown embedded draft {label!r}; choose one of {names}")


def embedded_draft_named(name: str) -> EmbeddedDraft:
    """The `EMBEDDED_DRAFTS` entry with this CLI name, or for `FASTEST_FEATURE` the feature
    draft in this CPU's faster dtype (ValueError otherwise)."""
    if name == FASTEST_FEATURE:
        return EMBEDDED_DRAFTS[0]
    for choice in EMBEDDED_DRAFTS:
        if choice.name == name:
            return choice
    names = ", ".join(embedded_draft_names())
    raise ValueError(f"unknown embedded draft {name!r}; choose one of {names}")


def embedded_draft_names() -> tuple[str, ...]:
    """What the CLI's --embedded-draft accepts."""
    return (FASTEST_FEATURE, *(c.name for c in EMBEDDED_DRAFTS))
