"""A sweep's results: per setting (`SettingResult`) the numbers the page and the CLI show, each
with its 95% interval, and the whole sweep (`SweepResult`) with its JSON and CSV forms."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cactus_core.engine.decoding.generation import PositionCounts
from cactus_core.experiments.estimates.curves import EstimatedCurve, estimable, pool_curves
from cactus_core.experiments.estimates.frontier import Estimate, dominance_check, mean_ci
from cactus_core.experiments.estimates.override import OverrideSums
from cactus_core.experiments.quality.paired import (
    distinct_ngrams,
    loops,
    mean_interval,
    paired_difference,
    share,
)
from cactus_core.experiments.quality.task_score import TaskScore, passes, task_score
from cactus_core.experiments.sweeps.config import BASELINE, Setting, SweepConfig
from cactus_core.experiments.sweeps.records import ChunkRecord, PromptRecord, csv_cell
from cactus_core.maths.limit import LimitCurve, LimitSums
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE


@dataclass
class SettingResult:
    """One setting's chunks and the numbers the page and the CLI show."""

    setting: Setting
    chunks: list[ChunkRecord]
    baseline: list[ChunkRecord] | None = None  # the verifier-only chunks, same prompts

    @property
    def prompts(self) -> list[PromptRecord]:
        return [r for c in self.chunks for r in c.prompts]

    def estimate(self, metric: str) -> Estimate:
        """A metric's mean with its 95% interval: over prompts (a per-prompt metric: per
        emitted token within each prompt, then the t interval over prompts), or over chunks
        (tokens/s)."""
        override = self.override
        if override is not None and metric in _ESTIMATED:
            # pooled over the setting's tokens: the estimate is one omega for all its positions
            iv = override.per_token(_ESTIMATED[metric], sum(r.tokens for r in self.prompts))
            return Estimate(iv.estimate, iv.lo, iv.hi, len(self.prompts)).clip(*_BOUNDS[metric])
        if metric in _PER_PROMPT:
            return mean_ci([getattr(r, metric) for r in self.prompts]).clip(*_BOUNDS[metric])
        if metric == "tokens_per_s":
            return mean_ci([c.tokens_per_s for c in self.chunks]).clip(0.0)
        allowed = ", ".join((*METRICS, *DIVERGENCE_METRICS))
        raise ValueError(f"unknown metric {metric!r}; allowed: {allowed}")

    @property
    def override(self) -> OverrideSums | None:
        """For a rule that overrides sps: its chunks' trials and divergence sums, pooled; its
        divergences are then estimated, each with its interval (`override_estimate`)."""
        parts = [c.override for c in self.chunks if c.override is not None]
        return sum(parts[1:], parts[0]) if parts else None

    @property
    def limit_sums(self) -> LimitSums | None:
        sums = [c.limit for c in self.chunks]
        if not sums or any(s is None for s in sums):
            return None
        total = LimitSums.empty()
        for s in sums:
            total = total + s
        return total if total.count else None

    @property
    def scored_kl(self) -> float:
        """Mean KL(pi ‖ q) over the decided positions in the limit sums."""
        n = sum(r.scored for r in self.prompts)
        return sum(r.scored_kl_sum for r in self.prompts) / n if n else math.nan

    @property
    def expected_acceptance(self) -> float:
        """Mean over the same positions of the exact chance sum_n p(n)·a(n) of accepting."""
        n = sum(r.scored for r in self.prompts)
        return sum(r.expected_accept_sum for r in self.prompts) / n if n else math.nan

    @property
    def limit_acceptance(self) -> float:
        """The best mean acceptance any rule could reach on these positions at this KL."""
        sums = self.limit_sums
        if sums is None or self.setting.is_baseline:
            return math.nan
        return sums.curve().at(self.scored_kl)

    @property
    def efficiency(self) -> float:
        lim = self.limit_acceptance
        return self.expected_acceptance / lim if lim > 0 else math.nan

    @property
    def positions(self) -> PositionCounts:
        """Per-position acceptance pooled over the prompts (vLLM's definitions)."""
        return PositionCounts.pooled(
            [
                PositionCounts(tuple(r.position_reached), tuple(r.position_accepted), r.spec_rounds)
                for r in self.prompts
            ]
        )

    def own_curve(self, k: int) -> EstimatedCurve | None:
        """The rule's curve estimated on the positions this setting decoded (its chunks'
        curves pooled by positions), or None where the sweep kept none or rows cannot estimate
        the rule (`estimate.estimable`: a chunk cached before may hold a per-position curve)."""
        if not estimable(self.setting.rule):
            return None
        done = [c for c in self.chunks if c.estimate is not None and c.estimate_positions]
        if not done:
            return None
        if len(done) == 1:
            return done[0].estimate
        return pool_curves([c.estimate for c in done], [c.estimate_positions for c in done], k)

    def passed(self, answers: Sequence[str]) -> dict[int, float]:
        """1.0 or 0.0 for each prompt that carries an answer (by prompt index): its output
        passes, or not."""
        return {
            r.index: float(passes(answers[r.index], r.text))
            for r in self.prompts
            if r.index < len(answers) and answers[r.index]
        }

    def task_score(self, answers: Sequence[str]) -> TaskScore:
        """The share of its prompts that carry an answer (answers, by prompt index) whose
        output passes, with its interval (`task_score`)."""
        judged = [(answers[r.index], r.text) for r in self.prompts if r.index < len(answers)]
        return task_score([a for a, _ in judged], [t for _, t in judged])

    def summary(self, answers: Sequence[str] = ()) -> dict[str, Any]:
        """A flat dict: the setting, each metric's mean and interval, the limit numbers, and
        the task score where the prompts carry answers (NaN where none do)."""
        row: dict[str, Any] = {
            "setting": self.setting.id,
            "label": self.setting.label,
            "rule": self.setting.rule,
            "param": self.setting.param,
            "value": self.setting.value,
        }
        for metric in (*METRICS, *DIVERGENCE_METRICS):
            e = self.estimate(metric)
            row[metric] = e.mean
            row[f"{metric}_lo"] = e.lo
            row[f"{metric}_hi"] = e.hi
        override = self.override
        # every row has the same keys (one CSV header): NaN where nothing was estimated
        row["estimated"] = override is not None
        omega = override.omega() if override is not None else None
        row["omega"] = omega.estimate if omega else math.nan
        row["omega_lo"] = omega.lo if omega else math.nan
        row["omega_hi"] = omega.hi if omega else math.nan
        row["override_trials"] = override.trials if override is not None else 0
        score = self.task_score(answers)
        row["task_score"] = score.mean
        row["task_score_lo"], row["task_score_hi"] = score.interval
        row["task_prompts"] = score.prompts
        row["prompts"] = len(self.prompts)
        row["scored_positions"] = sum(r.scored for r in self.prompts)
        row["scored_kl"] = self.scored_kl
        row["expected_acceptance"] = self.expected_acceptance
        row["limit_acceptance"] = self.limit_acceptance
        row["efficiency"] = self.efficiency
        pos = self.positions
        row["acceptance_by_position"] = pos.conditional()
        row["position_reached"] = list(pos.reached)
        row["position_accepted"] = list(pos.accepted)
        row["mean_acceptance_length"] = pos.mean_acceptance_length
        return row


_PER_PROMPT = (
    "tokens_per_call",
    "acceptance_rate",
    "emitted_kl",
    "nll",
    "emitted_tv",
    "emitted_reverse_kl",
)
# The divergences a rule that overrides sps has estimated, not exact (OverrideSums' names).
_ESTIMATED = {"emitted_kl": "kl", "emitted_tv": "tv", "emitted_reverse_kl": "reverse_kl"}
# The values each per-prompt metric can take: its interval is clipped to them.
_BOUNDS: dict[str, tuple[float, float]] = {
    "tokens_per_call": (1.0, math.inf),  # the recovered or bonus token at least
    "acceptance_rate": (0.0, 1.0),
    "emitted_kl": (0.0, math.inf),
    "nll": (0.0, math.inf),
    "emitted_tv": (0.0, 1.0),
    "emitted_reverse_kl": (0.0, math.inf),
}
METRICS: tuple[str, ...] = (
    "tokens_per_call",
    "acceptance_rate",
    "tokens_per_s",
    "emitted_kl",
    "nll",
)
# The other divergences of the same exact pi, beside emitted_kl, with the same interval. Kept
# apart from METRICS: a sweep cached before they were kept has none (NaN, so n = 0), and the
# reverse KL is inf for a rule that never writes some token q allows (tas).
DIVERGENCE_METRICS: tuple[str, ...] = ("emitted_tv", "emitted_reverse_kl")
METRIC_LABELS: dict[str, str] = {
    "tokens_per_call": "tokens per verifier call",
    "acceptance_rate": "acceptance rate",
    "tokens_per_s": "tokens/s (batched chunks)",
    "emitted_kl": "emitted KL per token (nats)",
    "emitted_tv": "emitted TV(pi, q) per token",
    "emitted_reverse_kl": "emitted reverse KL(q ‖ pi) per token (nats)",
    "nll": "verifier NLL per token (nats)",
    "task_score": "task score (share of checkable answers right)",
    "task_score_diff": "task score − the lossless baseline's (paired)",
    "eos_rate": "share of answers ending at the end token",
    "loop_rate": "share of answers ending in a loop",
    "loop_rate_diff": "loop rate − the lossless baseline's (paired)",
    "distinct_4": "distinct word 4-grams per answer (share)",
    "length_ratio": "answer length against the lossless baseline's",
    "expected_acceptance": "expected acceptance at decided positions",
    "scored_kl": "KL(pi ‖ q) per decided position (nats)",
}


@dataclass
class SweepResult:
    config: SweepConfig
    model_identity: str
    settings: list[SettingResult]
    baseline: SettingResult
    computed_chunks: int = 0  # chunks run now (0: everything came from the cache)

    def get(self, setting: Setting | str) -> SettingResult:
        sid = setting if isinstance(setting, str) else setting.id
        if sid == BASELINE:
            return self.baseline
        for s in self.settings:
            if s.setting.id == sid:
                return s
        raise KeyError(f"no setting {sid!r} in this sweep")

    def rows(self) -> list[dict[str, Any]]:
        answers = self.config.answers
        results = [self.baseline, *self.settings]
        rows = [res.summary(answers) for res in results]
        lossless = self.lossless()
        for res, row in zip(results, rows, strict=True):
            row.update(self._quality(res, lossless, answers))
        return rows

    def lossless(self) -> SettingResult:
        """What a setting's answers are compared with: sps at this sweep's sampling and k, or,
        in a sweep without it, verifier-only sampling (the same law, other coins)."""
        return next((s for s in self.settings if s.setting.rule == LOSSLESS_RULE), self.baseline)

    def _quality(
        self, res: SettingResult, lossless: SettingResult, answers: Sequence[str]
    ) -> dict[str, Any]:
        """The task score's paired difference from `lossless` (verifier-only against sps: the
        calibration, whose interval should hold 0), and the long answers' eos and loop rates
        (`experiments.quality.paired`)."""
        mine, theirs = res.passed(answers), lossless.passed(answers)
        both = sorted(set(mine) & set(theirs))
        diff = paired_difference([mine[i] for i in both], [theirs[i] for i in both])
        ended = [r.tokens < self.config.max_new_tokens for r in res.prompts]
        looped = self._looped(res)
        theirs_looped = dict(zip((r.index for r in lossless.prompts), self._looped(lossless),
                                 strict=True))  # fmt: skip
        paired = [(float(f), float(theirs_looped[r.index]))
                  for f, r in zip(looped, res.prompts, strict=True)
                  if r.index in theirs_looped]  # fmt: skip
        loop_diff = paired_difference([a for a, _ in paired], [b for _, b in paired])
        own_tokens = {r.index: r.tokens for r in res.prompts}
        base_tokens = [r.tokens for r in lossless.prompts if r.index in own_tokens]
        mine_tokens = [own_tokens[r.index] for r in lossless.prompts if r.index in own_tokens]
        distinct = mean_interval([distinct_ngrams(r.text) for r in res.prompts])
        out: dict[str, Any] = {
            "task_score_diff": diff.mean,
            "task_score_diff_lo": diff.lo,
            "task_score_diff_hi": diff.hi,
            "task_score_detectable": diff.detectable,
            "task_score_against": lossless.setting.label,
        }
        for name, flags in (("eos_rate", ended), ("loop_rate", looped)):
            rate = share(flags)
            out[name], out[f"{name}_lo"], out[f"{name}_hi"] = rate.estimate, rate.lo, rate.hi
        out["loop_rate_diff"] = loop_diff.mean
        out["loop_rate_diff_lo"], out["loop_rate_diff_hi"] = loop_diff.lo, loop_diff.hi
        out["distinct_4"] = distinct.estimate
        out["distinct_4_lo"], out["distinct_4_hi"] = distinct.lo, distinct.hi
        out["length_ratio"] = sum(mine_tokens) / sum(base_tokens) if sum(base_tokens) else math.nan
        return out

    def _looped(self, res: SettingResult) -> list[bool]:
        """Per prompt of res: it ran to the budget and its tail loops (`quality.loops`)."""
        return [r.tokens >= self.config.max_new_tokens and loops(r.text) for r in res.prompts]

    def pooled_limit(self) -> LimitCurve | None:
        """The limit curve over every decided position of every setting's run."""
        total = LimitSums.empty()
        for s in self.settings:
            sums = s.limit_sums
            if sums is not None:
                total = total + sums
        return total.curve() if total.count else None

    def compare(
        self,
        rule: str = DEFAULT_RULE,
        metric: str = "tokens_per_call",
        divergence: str = "emitted_kl",
    ) -> dict[str, list]:
        """rule's step Pareto front against every point of each other rule, at the other
        point's emitted divergence per token (`frontier.dominance_check`; "emitted_kl", or
        "emitted_tv" / "emitted_reverse_kl"); {} when rule was not swept. A row's "kl" is that
        divergence."""

        def points(name: str) -> tuple[list[float], list[float]]:
            own = [s for s in self.settings if s.setting.rule == name]
            return (
                [s.estimate(divergence).mean for s in own],
                [s.estimate(metric).mean for s in own],
            )

        if not any(s.setting.rule == rule for s in self.settings):
            return {}
        a_x, a_y = points(rule)
        others = dict.fromkeys(s.setting.rule for s in self.settings if s.setting.rule != rule)
        return {o: dominance_check(a_x, a_y, *points(o)) for o in others}

    def to_json(self, indent: int | None = 2) -> str:
        curve = self.pooled_limit()
        body = {
            "model": self.model_identity,
            "config": {k: v for k, v in self.config.to_dict().items() if k != "prompts"},
            "prompts": len(self.config.prompts),
            "rows": [_json_row(r) for r in self.rows()],
            "cactus_front_vs": {k: [_json_row(r) for r in v] for k, v in self.compare().items()},
            "limit_curve": None
            if curve is None
            else {
                "mean_kl": curve.mean_kl.tolist(),
                "mean_acceptance": curve.mean_acceptance.tolist(),
            },
        }
        return json.dumps(body, indent=indent, allow_nan=False)

    def to_csv(self) -> str:
        rows = self.rows()
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: csv_cell(v) for k, v in r.items()})
        return buf.getvalue()

    def outputs(self, setting: Setting | str, prompt_index: int) -> tuple[str, str]:
        """(the setting's text, the verifier-only text) for one prompt of the sweep."""

        def find(res: SettingResult) -> str:
            for r in res.prompts:
                if r.index == prompt_index:
                    return r.text
            raise KeyError(f"prompt {prompt_index} is not in this sweep")

        return find(self.get(setting)), find(self.baseline)


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()
    }
