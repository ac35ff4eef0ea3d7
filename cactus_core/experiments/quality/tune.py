"""The tuner that keeps quality: "which setting keeps emitted KL ≤ X, with answers not
detectably worse than lossless and no more loops?", answered on a sweep of the task set's
tuning split, then confirmed on its held-out split.

On the tuning sweep every setting of a tunable rule is a candidate. It keeps quality when

- its mean emitted KL per token is within the budget,
- its task score's paired difference from lossless (`quality.paired_difference`) does not lie
  wholly below 0 (the answers are not detectably worse), and
- its loop rate's paired difference does not lie wholly above 0 (no detectable rise in loops).

Among the candidates that keep quality, the answer is the one with the most tokens per verifier
call (per rule: the largest value that keeps it). "Not detectable" is only as strong as the
prompt set: `detectable` is the smallest drop the set finds with 80% power, and when it exceeds
the drop the user asked about (`max_drop`) the answer says so plainly. `confirm` then decodes
the held-out split, never used to tune, with the answer and with sps: the answer is confirmed
when the held-out paired interval does not lie wholly below 0 either.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cactus_core.experiments.quality.paired import PairedDifference
from cactus_core.experiments.sweeps.config import Setting, SweepConfig
from cactus_core.experiments.tuning.refine import TUNABLE_RULES
from cactus_core.maths.rules import LOSSLESS_RULE

if TYPE_CHECKING:
    from cactus_core.engine.loading.models import ModelPair
    from cactus_core.experiments.sweeps.cache import SweepCache
    from cactus_core.experiments.sweeps.run import Progress, SweepResult

DEFAULT_MAX_DROP = 0.05  # a drop in task score worth catching: 5 points of answers


@dataclass(frozen=True)
class Candidate:
    """One setting of the tuning sweep with what decides whether it keeps quality."""

    setting: Setting
    tokens_per_call: float
    emitted_kl: float
    diff: PairedDifference  # task score − lossless, paired
    loop_diff: PairedDifference  # loop rate − lossless, paired
    verdict: str  # "keeps quality" or why not

    @property
    def keeps(self) -> bool:
        return self.verdict == KEEPS

    def to_dict(self) -> dict[str, Any]:
        return {
            "setting": self.setting.id,
            "label": self.setting.label,
            "tokens_per_call": self.tokens_per_call,
            "emitted_kl": self.emitted_kl,
            "task_score_diff": _interval(self.diff),
            "loop_rate_diff": _interval(self.loop_diff),
            "verdict": self.verdict,
        }


KEEPS = "keeps quality"


@dataclass(frozen=True)
class QualityAnswer:
    kl_budget: float
    max_drop: float
    candidates: tuple[Candidate, ...]
    chosen: Candidate | None
    prompts: int  # checkable prompts of the tuning sweep
    # the held-out split's paired difference (chosen − sps), once `confirm` has run
    confirmation: PairedDifference | None = None
    heldout_prompts: int = 0
    heldout_kl: float = math.nan

    @property
    def per_rule(self) -> dict[str, Candidate]:
        """Each rule's largest value that keeps quality."""
        best: dict[str, Candidate] = {}
        for c in self.candidates:
            if c.keeps and (
                c.setting.rule not in best
                or (c.setting.value or 0) > (best[c.setting.rule].setting.value or 0)
            ):
                best[c.setting.rule] = c
        return best

    @property
    def detectable(self) -> float:
        """The smallest drop the tuning set finds with 80% power, at the answer (or, with
        none, the smallest over the candidates)."""
        if self.chosen is not None:
            return self.chosen.diff.detectable
        values = [c.diff.detectable for c in self.candidates if math.isfinite(c.diff.detectable)]
        return min(values) if values else math.nan

    @property
    def underpowered(self) -> bool:
        return not self.detectable <= self.max_drop

    @property
    def confirmed(self) -> bool | None:
        """None before `confirm`; then whether the held-out interval holds 0 or more."""
        if self.confirmation is None:
            return None
        return bool(self.confirmation.hi >= 0)

    def message(self) -> str:
        """The answer in words, with what the prompt set can and cannot see."""
        if self.chosen is None:
            text = (
                f"No tunable setting of this sweep keeps emitted KL ≤ {self.kl_budget:g} with "
                "answers not detectably worse than lossless: use sps (lossless)."
            )
        else:
            c = self.chosen
            text = (
                f"{c.setting.label}: {c.tokens_per_call:.2f} tokens per call at emitted KL "
                f"{c.emitted_kl:.3g} (≤ {self.kl_budget:g}); task score − lossless "
                f"{_fmt(c.diff)} on {self.prompts} prompts, loop rate − lossless "
                f"{_fmt(c.loop_diff)}."
            )
        if self.underpowered:
            text += (
                f" This prompt set detects a drop of {self.detectable:.3f} or more (80% power); "
                f"a drop of {self.max_drop:g}, the size asked about, may go unseen: add prompts "
                "or seeds."
            )
        if self.confirmation is not None:
            verdict = "confirmed" if self.confirmed else "NOT confirmed"
            text += (
                f" Held out ({self.heldout_prompts} prompts, never tuned on): task score − sps "
                f"{_fmt(self.confirmation)}, emitted KL {self.heldout_kl:.3g}: {verdict}."
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "kl_budget": self.kl_budget,
            "max_drop": self.max_drop,
            "answer": None if self.chosen is None else self.chosen.to_dict(),
            "detectable": _finite(self.detectable),
            "underpowered": self.underpowered,
            "confirmation": None if self.confirmation is None else _interval(self.confirmation),
            "confirmed": self.confirmed,
            "heldout_prompts": self.heldout_prompts,
            "candidates": [c.to_dict() for c in self.candidates],
            "message": self.message(),
        }


def quality_answer(
    result: SweepResult,
    kl_budget: float,
    max_drop: float = DEFAULT_MAX_DROP,
    rows: list[dict[str, Any]] | None = None,
) -> QualityAnswer:
    """The quality-constrained answer on a sweep whose prompts carry answers (module
    docstring; rows: the sweep's `rows()`, where the caller has them already); ValueError when
    they carry none or no tunable rule was swept."""
    if not any(result.config.answers):
        raise ValueError("the quality tuner needs prompts with checkable answers (the task set)")
    if not (kl_budget >= 0 and math.isfinite(kl_budget)):
        raise ValueError(f"the KL budget must be a number ≥ 0, got {kl_budget}")
    if not 0 < max_drop < 1:
        raise ValueError(f"the drop to detect must lie in (0, 1), got {max_drop}")
    results = [result.baseline, *result.settings]
    candidates: list[Candidate] = []
    for res, row in zip(results, result.rows() if rows is None else rows, strict=True):
        if res.setting.rule not in (*TUNABLE_RULES, LOSSLESS_RULE):
            continue
        diff = _paired(row, "task_score_diff", row["task_prompts"], row["task_score_detectable"])
        loop_diff = _paired(row, "loop_rate_diff", row["prompts"], math.nan)
        kl = float(row["emitted_kl"])
        if not kl <= kl_budget:
            verdict = f"emitted KL {kl:.3g} over the budget"
        elif diff.hi < 0:
            verdict = f"answers detectably worse ({_fmt(diff)})"
        elif loop_diff.lo > 0:
            verdict = f"detectably more loops ({_fmt(loop_diff)})"
        else:
            verdict = KEEPS
        candidates.append(
            Candidate(res.setting, float(row["tokens_per_call"]), kl, diff, loop_diff, verdict)
        )
    kept = [c for c in candidates if c.keeps]
    chosen = max(kept, key=lambda c: c.tokens_per_call) if kept else None
    prompts = sum(1 for a in result.config.answers if a)
    return QualityAnswer(kl_budget, max_drop, tuple(candidates), chosen, prompts)


def confirm(
    pair: ModelPair | None,
    answer: QualityAnswer,
    tuned: SweepConfig,
    heldout: tuple[Sequence[str], Sequence[str], Sequence[str]],
    cache: SweepCache | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> QualityAnswer:
    """The answer with its held-out confirmation: the held-out prompts (prompts, tasks,
    answers) decoded with the chosen setting and sps at the tuning sweep's sampling, k and
    budget. An answer of sps itself (or none) needs no run: it is lossless."""
    from cactus_core.experiments.sweeps.run import run_sweep

    prompts, tasks, answers = heldout
    if not any(answers):
        raise ValueError("the held-out prompts carry no checkable answers")
    if answer.chosen is None or answer.chosen.setting.rule == LOSSLESS_RULE:
        return answer
    sps = Setting.of(LOSSLESS_RULE)
    config = replace(
        tuned,
        prompts=tuple(prompts),
        settings=(answer.chosen.setting, sps),
        tasks=tuple(tasks) if any(tasks) else (),
        answers=tuple(answers),
    )
    return confirmed_by(answer, run_sweep(pair, config, cache, on_progress=on_progress))


def confirmed_by(
    answer: QualityAnswer, heldout: SweepResult, rows: list[dict[str, Any]] | None = None
) -> QualityAnswer:
    """The answer with the confirmation read off a sweep of held-out prompts that decoded the
    chosen setting and sps (the shipped quality reference's held-out sweep decodes every
    setting of its tuning sweep, so any answer it gives is confirmed without a run)."""
    if answer.chosen is None or answer.chosen.setting.rule == LOSSLESS_RULE:
        return answer
    if not any(s.setting.rule == LOSSLESS_RULE for s in heldout.settings):
        raise ValueError("the held-out sweep has no sps to pair the answer with")
    rows = heldout.rows() if rows is None else rows
    row = next((r for r in rows if r["setting"] == answer.chosen.setting.id), None)
    if row is None:
        raise ValueError(f"the held-out sweep did not decode {answer.chosen.setting.label}")
    diff = _paired(row, "task_score_diff", row["task_prompts"], row["task_score_detectable"])
    return replace(
        answer,
        confirmation=diff,
        heldout_prompts=int(row["task_prompts"]),
        heldout_kl=float(row["emitted_kl"]),
    )


def onsets(
    result: SweepResult, metric: str, rows: list[dict[str, Any]] | None = None
) -> dict[str, float | None]:
    """Per tunable rule of the sweep, the smallest swept value at which `metric`'s paired
    difference from lossless is detectable: "task_score_diff" wholly below 0 (answers get
    worse), "loop_rate_diff" wholly above 0 (loops rise); None where no swept value shows it."""
    if metric not in ("task_score_diff", "loop_rate_diff"):
        raise ValueError(f"no onset for {metric!r}")
    out: dict[str, float | None] = {}
    rows = result.rows() if rows is None else rows
    for res, row in zip([result.baseline, *result.settings], rows, strict=True):
        rule, value = res.setting.rule, res.setting.value
        if rule not in TUNABLE_RULES or value is None:
            continue
        seen = row[f"{metric}_hi"] < 0 if metric == "task_score_diff" else row[f"{metric}_lo"] > 0
        out.setdefault(rule, None)
        if seen and (out[rule] is None or value < out[rule]):
            out[rule] = value
    return out


def _paired(row: dict[str, Any], key: str, n: int, detectable: float) -> PairedDifference:
    return PairedDifference(
        float(row[key]), float(row[f"{key}_lo"]), float(row[f"{key}_hi"]), int(n), float(detectable)
    )


def _fmt(d: PairedDifference) -> str:
    return f"{d.mean:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}]"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _interval(d: PairedDifference) -> dict[str, float | None]:
    return {"mean": _finite(d.mean), "lo": _finite(d.lo), "hi": _finite(d.hi)}
