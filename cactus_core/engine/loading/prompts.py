"""The built-in benchmark prompts (cactus_core/data/chat_prompts.jsonl), each tagged with the
task it asks for ("chat", "code", "maths", "writing"), so a sweep can be tuned per task.

These are what docs/benchmarks.md is measured on; the draft's training prompts (training/)
are a different set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROMPTS_FILE = Path(__file__).resolve().parents[2] / "data" / "chat_prompts.jsonl"


def _records() -> list[dict[str, Any]]:
    records = []
    for n, line in enumerate(PROMPTS_FILE.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record.get("prompt"), str) or not record["prompt"].strip():
            raise ValueError(f"{PROMPTS_FILE}:{n} needs a non-empty string field 'prompt'")
        if not isinstance(record.get("task"), str) or not record["task"].strip():
            raise ValueError(f"{PROMPTS_FILE}:{n} needs a non-empty string field 'task'")
        records.append(record)
    return records


def builtin_prompts() -> list[str]:
    """The chat prompts, in file order."""
    return [r["prompt"] for r in _records()]


def builtin_tasks() -> list[str]:
    """Each built-in prompt's task tag, in the same order as `builtin_prompts`."""
    return [r["task"] for r in _records()]
