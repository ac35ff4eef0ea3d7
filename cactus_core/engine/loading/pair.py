"""`ModelPair`: a loaded verifier and draft with one tokenizer, and what is read off a pair.

A leaf of the engine: loading builds pairs (`loading.models`), and the drafters and the decoder
read them, so this module imports neither.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from cactus_core.engine.loading.pairing import max_positions
from cactus_core.engine.loading.weights import state_digest
from cactus_core.engine.runtime.transformers_names import PreTrainedModel, PreTrainedTokenizerBase

if TYPE_CHECKING:
    from cactus_core.engine.loading.feature_draft import FeatureDraft


@dataclass
class ModelPair:
    verifier: PreTrainedModel
    draft: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    verifier_name: str
    draft_name: str
    device: torch.device
    dtype: torch.dtype
    # sha256 of each model's files (weights, config, tokenizer); "" for a pair built in memory,
    # whose parameters are hashed on first use instead.
    verifier_weights: str = ""
    draft_weights: str = ""
    # The hub commit each model was read from (None: a local folder, .gguf or embedded).
    verifier_revision: str | None = None
    draft_revision: str | None = None
    # An optional feature-conditioned draft on the verifier's own features: when set, the
    # decoder drafts with it (engine.drafting); `draft` stays the independent draft that
    # transformers' assisted generation and everything else reads. Its weights' sha256 ("":
    # hashed on first use) joins the identity, so caches never mix drafts.
    feature_draft: FeatureDraft | None = None
    feature_draft_name: str = ""
    feature_draft_weights: str = ""

    @property
    def identity(self) -> str:
        """Names both models with the hash of their weights (and hub revision) and the dtype;
        sweep caches key on it, so new weights in the same folder give a new identity."""
        if not self.verifier_weights:
            self.verifier_weights = state_digest(self.verifier)
        if not self.draft_weights:
            self.draft_weights = state_digest(self.draft)
        parts = []
        for role, name, digest, rev in (
            ("verifier", self.verifier_name, self.verifier_weights, self.verifier_revision),
            ("draft", self.draft_name, self.draft_weights, self.draft_revision),
        ):
            parts.append(f"{role}={name}" + (f"@{rev}" if rev else "") + f"#{digest[:16]}")
        if self.feature_draft is not None:  # absent otherwise: existing identities unchanged
            if not self.feature_draft_weights:
                self.feature_draft_weights = feature_draft_digest(self.feature_draft)
            name, digest = self.feature_draft_name, self.feature_draft_weights
            # Its dtype too: the same files drafting in float32 and bfloat16 decode differently.
            parts.append(f"feature_draft={name}#{digest[:16]}@{self.feature_draft.dtype}")
        return "|".join([*parts, f"dtype={self.dtype}"])

    @property
    def context_length(self) -> int:
        return min(max_positions(self.verifier), max_positions(self.draft))

    def encode_prompt(self, prompt: str, chat_template: bool = True) -> list[int]:
        """Token ids for one user turn (with the assistant header) or for the raw text.

        A tokenizer without a chat template gets the raw text even when chat_template is True,
        so tiny test models without a template still work.
        """
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
        tok = self.tokenizer
        if chat_template and getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            ids = tok(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tok(prompt)["input_ids"]
        if not ids:
            raise ValueError("the prompt encodes to no tokens; give a non-empty prompt")
        if len(ids) >= self.context_length:
            raise ValueError(
                f"the prompt is {len(ids)} tokens, the pair's context is {self.context_length}"
            )
        return list(ids)


def eos_ids(pair: ModelPair) -> set[int]:
    """The ids that end a generation: the tokenizer's and the verifier's EOS ids."""
    ids: set[int] = set()
    for src in (pair.tokenizer, pair.verifier.generation_config, pair.verifier.config):
        eos = getattr(src, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list | tuple):
            ids.update(int(e) for e in eos)
    return ids


END_MARKER = "«end»"  # how an end-of-text token reads (« » are in every font)


def token_display(tokenizer: Any, token_id: int, eos: set[int]) -> str:
    """A token as the lab shows it: its text, but never a raw special token such as
    "<|im_end|>". An end token reads END_MARKER; another special token its bare name in
    guillemets ("«im_start»"), so that a chat template's markup never passes for generated text."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    if token_id in eos:
        return END_MARKER
    if token_id in special:
        raw = tokenizer.convert_ids_to_tokens(token_id)
        return f"«{str(raw).strip('<|>')}»"
    return str(tokenizer.decode([token_id]))


def feature_draft_digest(draft: FeatureDraft) -> str:
    """sha256 of a feature draft built in memory: its own weights, input scales and head ids
    (the parts it borrows from the verifier are in the verifier's digest)."""
    h = hashlib.sha256(state_digest(draft).encode())
    h.update(f"{draft.embed_scale}|{draft.feature_scale}".encode())
    if isinstance(draft.head_ids, torch.Tensor):
        h.update(draft.head_ids.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
