"""The Frontier's quality views without Streamlit: what the task-score chart shows and what its
prompt set can detect, and how the long-answers chart reads (`experiments.quality.paired`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cactus_core.experiments.quality.paired import PairedDifference
from cactus_core.experiments.quality.reference import QualityReference
from cactus_core.experiments.quality.reference import (
    load_quality_reference as load_quality_reference,
)
from cactus_core.experiments.quality.tune import DEFAULT_MAX_DROP as DEFAULT_MAX_DROP
from cactus_core.experiments.quality.tune import QualityAnswer as QualityAnswer
from cactus_core.experiments.quality.tune import confirm as confirm
from cactus_core.experiments.quality.tune import onsets
from cactus_core.experiments.quality.tune import quality_answer as quality_answer
from cactus_core.experiments.sweeps.run import SweepResult as SweepResult

TASK_VIEWS = {"task_score_diff": "difference from lossless (paired)", "task_score": "score"}
LONG_VIEWS = {
    "loop_rate": "end in a loop",
    "eos_rate": "end at the end token",
    "distinct_4": "distinct 4-grams",
    "length_ratio": "length against lossless",
}
LONG_CAPTION = (
    "Read from each answer's text, with 95% Wilson intervals over prompts: an answer ends at the "
    "end token when it stops before Max new tokens; it ends in a loop when it runs to the "
    "budget and its tail repeats one span of up to 16 words back to back. Distinct 4-grams: "
    "the share of an answer's word 4-grams that are distinct (t interval over answers); "
    "length: mean new tokens against the lossless baseline's on the same prompts. Lossy "
    "acceptance on long answers can start loops and leave answers unfinished; raise Max new "
    "tokens (256) to see it."
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


def candidate_rows(answer: QualityAnswer) -> list[dict[str, Any]]:
    """The quality tuner's candidates as table rows, the answer first."""
    rows = []
    for c in sorted(answer.candidates, key=lambda c: c is not answer.chosen):
        rows.append({
            "setting": c.setting.label + ("  ← answer" if c is answer.chosen else ""),
            "tokens/call": round(c.tokens_per_call, 3),
            "emitted KL": round(c.emitted_kl, 4),
            "task score − lossless": _interval(c.diff),
            "loop rate − lossless": _interval(c.loop_diff),
            "verdict": c.verdict,
        })  # fmt: skip
    return rows


def onset_sentence(ref: QualityReference) -> str:
    """Per rule, the smallest swept value at which answers get detectably worse (on the task
    set's tuning split) and at which loops rise (on the long answers), in words."""
    worse = onsets(ref.tune, "task_score_diff", ref.rows("tune"))
    loops = onsets(ref.long, "loop_rate_diff", ref.rows("long"))
    parts = []
    for rule in worse | loops:
        w, lp = worse.get(rule), loops.get(rule)
        w_text = f"worse from {w:g}" if w is not None else "never detectably worse"
        l_text = f"loops rise from {lp:g}" if lp is not None else "no detectable rise in loops"
        parts.append(f"{rule}: {w_text}; {l_text}")
    return "; ".join(parts) + "." if parts else ""


def _interval(d: PairedDifference) -> str:
    return f"{d.mean:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}]"
