"""The Frontier's quality views without Streamlit: what the task-score chart shows and what its
prompt set can detect, and how the long-answers chart reads (`experiments.quality`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TASK_VIEWS = {"task_score_diff": "difference from lossless (paired)", "task_score": "score"}
LONG_VIEWS = {"eos_rate": "end at the end token", "loop_rate": "end in a loop"}
LONG_CAPTION = (
    "Read from each answer's text, with 95% Wilson intervals over prompts: an answer ends at the "
    "end token when it stops before Max new tokens; it ends in a loop when it runs to the "
    "budget and its tail repeats one span of up to 16 words back to back. Lossy acceptance on "
    "long answers can start loops and leave answers unfinished; raise Max new tokens (256) to "
    "see it."
)


def task_caption(rows: Sequence[dict[str, Any]], view: str) -> str:
    """What the task-score chart shows (`view`, a TASK_VIEWS key), with what its prompt set
    can detect."""
    if view == "task_score":
        return (
            "Each setting's share of checkable answers right (horizontal bars: 95% Wilson "
            "intervals over prompts). Unpaired intervals overlap easily: the paired difference "
            "(the other view) compares the same prompts and seeds, and is what decides."
        )
    against = next((r["task_score_against"] for r in rows if r.get("task_score_against")), "sps")
    detect = [r["task_score_detectable"] for r in rows if r.get("task_score_detectable")]
    can = (
        f" These prompts detect a difference of about ±{max(detect):.2f} (80% power)."
        if detect
        else ""
    )
    return (
        f"Each setting's task score minus {against}'s on the same prompts and seeds, with the "
        "paired 95% interval (t over prompts): an interval wholly below 0 is a real drop." + can
    )
