"""Write a draft in the embedded format: config.json + its own layers in bf16 safetensors.

The embedding (and the tied head) is the verifier's, so it is left out of the file; the loader
(engine.loading.models) takes it from the verifier. A folder written here is a transformers
LlamaForCausalLM folder apart from that one missing tensor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import save_file

SKIP = ("model.embed_tokens.weight", "lm_head.weight")
HEAD_IDS_FILE = "head_token_ids.safetensors"


def head_ids_of(draft) -> torch.Tensor | None:
    """The ids a VocabSubsetHead scores (engine.runtime.subset_head), or None for a full head."""
    ids = getattr(draft.lm_head, "token_ids", None)
    return None if ids is None else ids.detach().cpu()


def save_draft(draft, folder: Path, info: dict, tokenizer_sha256: str) -> None:
    """A draft with a VocabSubsetHead also gets its ids written (HEAD_IDS_FILE, key
    "token_ids") and named in config.json under "cactus_head_token_ids"; the head's weights
    are rows of the verifier's embedding, so they are not stored either."""
    folder.mkdir(parents=True, exist_ok=True)
    head_ids = head_ids_of(draft)
    shared = getattr(draft.config, "cactus_shared_verifier_layers", 0)
    skip = SKIP + tuple(f"model.layers.{i}." for i in range(shared))
    sd = {
        k: v.detach().to(torch.bfloat16).contiguous()
        for k, v in draft.state_dict().items()
        if not k.startswith(skip)
    }
    tmp = folder / "model.safetensors.tmp"
    save_file(sd, str(tmp), metadata={"format": "pt"})
    os.chmod(tmp, 0o644)  # save_file creates it private; the repo copy must be readable
    os.replace(tmp, folder / "model.safetensors")
    cfg = draft.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_name_or_path", None)
    cfg["dtype"] = "bfloat16"
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg["cactus_tokenizer_sha256"] = tokenizer_sha256
    cfg["cactus_embeddings"] = "verifier (frozen, tied; not stored)"
    cfg["cactus_shared_verifier_layers"] = shared
    cfg["cactus_training"] = {k: v for k, v in info.items() if k != "log"}
    if head_ids is not None:
        tmp = folder / (HEAD_IDS_FILE + ".tmp")
        save_file({"token_ids": head_ids.to(torch.int64).contiguous()}, str(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, folder / HEAD_IDS_FILE)
        cfg["tie_word_embeddings"] = True  # the loader ties, then attaches the subset head
        cfg["cactus_head_token_ids"] = HEAD_IDS_FILE
        cfg["cactus_head_size"] = int(head_ids.numel())
    else:
        cfg.pop("cactus_head_token_ids", None)
        (folder / HEAD_IDS_FILE).unlink(missing_ok=True)
    for name, text in (
        ("config.json", json.dumps(cfg, indent=2, sort_keys=True)),
        ("train_log.json", json.dumps(info, indent=1)),
    ):
        tmp = folder / (name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, folder / name)
