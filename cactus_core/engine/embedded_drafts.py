"""The ways to run the embedded pair (SmolLM2-135M-Instruct as the verifier): which shipped
draft drafts for it, and the verifier's dtype on a CPU. The sidebar's "Draft" choice, its links,
the CLI's `--embedded-draft` and the tests read them from here;
`load_pair(**choice.load_kwargs(device))` loads one. `load_pair()` alone is the library's plain
pair: the embedded verifier and its independent 3-layer draft, in the device's default dtype.

Kept free of transformers so that the app's settings can import it at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cactus_core.engine.load_args import resolve_device

FEATURE_DRAFT_DIR = Path(__file__).resolve().parents[1] / "assets" / "feature_draft"
# What traces and pages call the shipped feature draft (never its folder: a server path).
FEATURE_DRAFT_NAME = "cactus feature draft (embedded, 1 layer)"


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


# The first is the default: the pair the app opens on, the CLI loads without model flags and
# the shipped reference sweep was measured on.
EMBEDDED_DRAFTS = (
    EmbeddedDraft(
        "feature draft, bfloat16",
        "feature",
        "An EAGLE-style draft that reads the verifier's own features (from three of its layers) "
        "through one decoder layer, and the verifier in bfloat16, where checking 5 tokens "
        "costs about what 1 does: the fastest speculation on a CPU, and the pair the shipped "
        "reference sweep was measured on.",
        FEATURE_DRAFT_DIR,
        "bfloat16",
    ),
    EmbeddedDraft(
        "3-layer draft, float32",
        "3-layer",
        "An independent 3-layer draft model (the one transformers' assisted generation can "
        "run too), and the verifier in float32, where greedy decoding gives the verifier's own "
        "output token for token.",
        None,
        "float32",
    ),
)
DEFAULT_EMBEDDED_DRAFT = EMBEDDED_DRAFTS[0].label


def embedded_draft(label: str) -> EmbeddedDraft:
    """The `EMBEDDED_DRAFTS` entry with this label (ValueError otherwise)."""
    for choice in EMBEDDED_DRAFTS:
        if choice.label == label:
            return choice
    names = ", ".join(repr(c.label) for c in EMBEDDED_DRAFTS)
    raise ValueError(f"unknown embedded draft {label!r}; choose one of {names}")


def embedded_draft_named(name: str) -> EmbeddedDraft:
    """The `EMBEDDED_DRAFTS` entry with this CLI name (ValueError otherwise)."""
    for choice in EMBEDDED_DRAFTS:
        if choice.name == name:
            return choice
    names = ", ".join(c.name for c in EMBEDDED_DRAFTS)
    raise ValueError(f"unknown embedded draft {name!r}; choose one of {names}")
