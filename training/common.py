"""Shared helpers for the training scripts."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load_verifier_and_tokenizer():
    """The embedded verifier in float32, through the app's conversion cache (fast after once)."""
    from cactus_core.engine.loading.models import (
        convert_gguf_cached,
        embedded_gguf_path,
        resolve_cache_dir,
    )

    folder = convert_gguf_cached(embedded_gguf_path(), resolve_cache_dir())
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    return model.eval(), tok


def target_probs(vals: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """q over the top-K ids: softmax at T of the saved logits, then the top-p nucleus.

    vals [N, K] sorted descending. Mass beyond the top K is dropped (tiny at T = 0.7).
    """
    q = torch.softmax(vals.float() / temperature, dim=-1)
    keep = q.cumsum(-1) - q < top_p
    q = q * keep
    return q / q.sum(-1, keepdim=True)


def load_records(data: Path) -> list[dict]:
    records = []
    for shard in sorted(data.glob("shard_*.pt")):
        records.extend(torch.load(shard))
    return [r for r in records if len(r["answer_ids"]) >= 2]


def split_holdout(records: list[dict], holdout: int) -> tuple[list[dict], list[dict]]:
    """(train, held): every n-th answer by prompt text is held out, so reruns on more data keep
    evaluating (mostly) the same rows."""
    records = sorted(records, key=lambda r: r["prompt"])
    held = [r for i, r in enumerate(records) if i % max(1, len(records) // holdout) == 0]
    held = held[:holdout]
    held_ids = {id(r) for r in held}
    return [r for r in records if id(r) not in held_ids], held
