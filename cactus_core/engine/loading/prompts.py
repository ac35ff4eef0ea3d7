"""The built-in benchmark prompts (cactus_core/data/chat_prompts.jsonl).

These are what docs/benchmarks.md is measured on; the draft's training prompts (training/)
are a different set.
"""

from __future__ import annotations

import json
from pathlib import Path

PROMPTS_FILE = Path(__file__).resolve().parents[2] / "data" / "chat_prompts.jsonl"


def builtin_prompts() -> list[str]:
    """The chat prompts, in file order."""
    prompts = []
    for n, line in enumerate(PROMPTS_FILE.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record.get("prompt"), str) or not record["prompt"].strip():
            raise ValueError(f"{PROMPTS_FILE}:{n} needs a non-empty string field 'prompt'")
        prompts.append(record["prompt"])
    return prompts
