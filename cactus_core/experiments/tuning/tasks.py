"""Per-task tuning: a sweep's records split by the prompts' task tags, and the tuner's answer
("which setting keeps emitted KL ≤ X?") for each task and for all prompts, with intervals.

A task's part of a sweep is the same sweep restricted to that task's prompts: per-prompt
statistics (tokens per call, acceptance, emitted KL, NLL) are exact. Timings and the limit are
per chunk (one batched call decodes a chunk's prompts together): a chunk whose prompts are all
of the task keeps them; a chunk that mixes tasks gives the task its share of the wall time in
proportion to its tokens (so the chunk's tokens/s) and no limit sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from cactus_core.experiments.estimates.frontier import Estimate, interpolate_param_for_budget
from cactus_core.experiments.sweeps.run import ChunkRecord, SettingResult, SweepResult
from cactus_core.maths.rules import rule_class

ALL_TASKS = "all prompts"
# A task's own answer needs this many prompts: with fewer, the t interval over its prompts
# (t = 4.3 at three, 12.7 at two) is wider than the range the answer could take.
MIN_TASK_PROMPTS = 5


def split_by_task(result: SweepResult) -> dict[str, SweepResult]:
    """Each task's part of the sweep (`SweepConfig.task_names` order); {} when untagged."""
    config = result.config
    return {task: task_part(result, task) for task in config.task_names}


def task_part(result: SweepResult, task: str) -> SweepResult:
    """The sweep restricted to the prompts tagged task (see the module docstring)."""
    config = result.config
    if task not in config.task_names:
        raise ValueError(f"no prompt has the task {task!r}; tasks: {', '.join(config.task_names)}")
    keep = [task == config.task(i) for i in range(len(config.prompts))]
    # The same prompt chunks in every setting, so baseline and setting chunks stay paired.
    chunks = [j for j, idx in enumerate(config.chunks()) if any(keep[i] for i in idx)]

    def part(res: SettingResult) -> list[ChunkRecord]:
        return [_chunk_part(res.chunks[j], keep) for j in chunks]

    base = SettingResult(result.baseline.setting, part(result.baseline))
    base.baseline = base.chunks
    settings = [SettingResult(s.setting, part(s), base.chunks) for s in result.settings]
    return SweepResult(config, result.model_identity, settings, base, 0)


def _chunk_part(chunk: ChunkRecord, keep: list[bool]) -> ChunkRecord:
    rows = [r for r in chunk.prompts if keep[r.index]]
    if len(rows) == len(chunk.prompts):
        return chunk
    share = sum(r.tokens for r in rows) / chunk.tokens if chunk.tokens else 0.0
    return replace(chunk, prompts=rows, wall_s=chunk.wall_s * share, limit=None, estimate=None,
                   estimate_positions=0)  # fmt: skip


@dataclass(frozen=True)
class BudgetAnswer:
    """The rule's parameter whose mean emitted KL per token meets the budget on one task's
    prompts, read off the sweep's measured curve (interpolated between the swept values).

    low and high bound it from the 95% intervals of each setting's emitted KL: low is the
    answer on the curve of upper ends (safe if the task's KL is as high as it plausibly is),
    high on the curve of lower ends.
    """

    task: str
    rule: str
    param: str
    kl_budget: float
    value: float
    low: float
    high: float
    tokens_per_call: float  # interpolated at value
    prompts: int
    fits: bool  # False: even the smallest swept value exceeds the budget on this task
    enough: bool = True  # the task has MIN_TASK_PROMPTS prompts or more: an answer of its own
    # against the all-prompts answer: "higher", "lower" (the intervals do not overlap) or
    # "not distinguishable"; "" for the all-prompts row and for a task without an answer
    versus_all: str = ""

    @property
    def answered(self) -> bool:
        return self.fits and self.enough

    def to_dict(self) -> dict[str, object]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in vars(self).items()}  # fmt: skip


def answer_budget(result: SweepResult, rule: str, kl_budget: float, task: str) -> BudgetAnswer:
    """The tuner's answer on one task's part (or on the whole sweep for ALL_TASKS)."""
    spec = rule_class(rule).swept()
    if spec is None:
        raise ValueError(f"{rule} has no parameter to tune")
    part = result if task == ALL_TASKS else task_part(result, task)
    own = sorted(
        (s for s in part.settings if s.setting.rule == rule), key=lambda s: s.setting.value
    )
    if not own:
        raise ValueError(f"the sweep has no {rule} settings to interpolate")
    xs = [float(s.setting.value) for s in own]
    kl: list[Estimate] = [s.estimate("emitted_kl") for s in own]
    tpc = [s.estimate("tokens_per_call").mean for s in own]
    value = interpolate_param_for_budget(xs, [e.mean for e in kl], kl_budget)
    low = interpolate_param_for_budget(xs, [e.hi for e in kl], kl_budget)
    high = interpolate_param_for_budget(xs, [e.lo for e in kl], kl_budget)
    fits = bool(np.nanmin([e.mean for e in kl]) <= kl_budget)
    return BudgetAnswer(
        task=task,
        rule=rule,
        param=spec.name,
        kl_budget=kl_budget,
        value=value,
        low=min(low, value),
        high=max(high, value),
        tokens_per_call=float(np.interp(value, xs, tpc)),
        prompts=len(own[0].prompts),
        fits=fits,
    )


def answers_by_task(result: SweepResult, rule: str, kl_budget: float) -> list[BudgetAnswer]:
    """The answer on all prompts, then on each task's (only the former when untagged). A task
    with fewer than MIN_TASK_PROMPTS prompts gets no answer of its own (`enough`); each task's
    answer says whether its interval sets it apart from the all-prompts one (`versus_all`)."""
    overall = answer_budget(result, rule, kl_budget, ALL_TASKS)
    out = [overall]
    for task in result.config.task_names:
        a = answer_budget(result, rule, kl_budget, task)
        enough = a.prompts >= MIN_TASK_PROMPTS
        versus = ""
        if enough and a.fits and overall.fits:
            versus = (
                "higher"
                if a.low > overall.high
                else "lower"
                if a.high < overall.low
                else "not distinguishable"
            )
        out.append(replace(a, enough=enough, versus_all=versus))
    return out


def spread(answers: list[BudgetAnswer]) -> float:
    """How far apart the tasks' answers are: the largest minus the smallest value among the
    tasks with an answer of their own (the all-prompts answer left out); nan with fewer than
    two."""
    values = [a.value for a in answers if a.task != ALL_TASKS and a.answered]
    return max(values) - min(values) if len(values) >= 2 else math.nan


def answers_table(answers: list[BudgetAnswer]) -> str:
    """A plain-text table of the answers (the CLI prints it)."""
    lines = [f"{'task':<14}{'prompts':>8}  {answers[0].param:>9}  95% interval      tokens/call"]
    for a in answers:
        if not a.enough:
            lines.append(f"{a.task:<14}{a.prompts:>8}  too few prompts for an answer of its own "
                         f"(needs {MIN_TASK_PROMPTS})")  # fmt: skip
            continue
        value = f"{a.value:9.4g}" if a.fits else f"{'none':>9}"
        versus = f"  ({a.versus_all} from all prompts)" if a.versus_all else ""
        lines.append(
            f"{a.task:<14}{a.prompts:>8}  {value}  {a.low:7.4g} – {a.high:<7.4g}"
            f"  {a.tokens_per_call:.2f}{versus}"
        )
    return "\n".join(lines)
