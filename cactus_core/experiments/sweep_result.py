"""A sweep's results: per setting (`SettingResult`) the numbers the page and the CLI show, each
with its 95% interval, and the whole sweep (`SweepResult`) with its JSON and CSV forms."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any

from cactus_core.engine.decoding.generation import PositionCounts
from cactus_core.experiments.estimate import EstimatedCurve, pool_curves
from cactus_core.experiments.frontier import Estimate, dominance_check, mean_ci
from cactus_core.experiments.sweep_config import BASELINE, Setting, SweepConfig
from cactus_core.experiments.sweep_records import ChunkRecord, PromptRecord, csv_cell
from cactus_core.maths.limit import LimitCurve, LimitSums
from cactus_core.maths.rules import DEFAULT_RULE


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
        if metric in _PER_PROMPT:
            return mean_ci([getattr(r, metric) for r in self.prompts]).clip(*_BOUNDS[metric])
        if metric == "tokens_per_s":
            return mean_ci([c.tokens_per_s for c in self.chunks]).clip(0.0)
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")

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
        curves pooled by positions), or None where the sweep kept none."""
        done = [c for c in self.chunks if c.estimate is not None and c.estimate_positions]
        if not done:
            return None
        if len(done) == 1:
            return done[0].estimate
        return pool_curves([c.estimate for c in done], [c.estimate_positions for c in done], k)

    def summary(self) -> dict[str, Any]:
        """A flat dict: the setting, each metric's mean and interval, and the limit numbers."""
        row: dict[str, Any] = {
            "setting": self.setting.id,
            "label": self.setting.label,
            "rule": self.setting.rule,
            "param": self.setting.param,
            "value": self.setting.value,
        }
        for metric in METRICS:
            e = self.estimate(metric)
            row[metric] = e.mean
            row[f"{metric}_lo"] = e.lo
            row[f"{metric}_hi"] = e.hi
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


_PER_PROMPT = ("tokens_per_call", "acceptance_rate", "emitted_kl", "nll")
# The values each per-prompt metric can take: its interval is clipped to them.
_BOUNDS: dict[str, tuple[float, float]] = {
    "tokens_per_call": (1.0, math.inf),  # the recovered or bonus token at least
    "acceptance_rate": (0.0, 1.0),
    "emitted_kl": (0.0, math.inf),
    "nll": (0.0, math.inf),
}
METRICS: tuple[str, ...] = (
    "tokens_per_call",
    "acceptance_rate",
    "tokens_per_s",
    "emitted_kl",
    "nll",
)
METRIC_LABELS: dict[str, str] = {
    "tokens_per_call": "tokens per verifier call",
    "acceptance_rate": "acceptance rate",
    "tokens_per_s": "tokens/s (batched chunks)",
    "emitted_kl": "emitted KL per token (nats)",
    "nll": "verifier NLL per token (nats)",
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
        return [self.baseline.summary()] + [s.summary() for s in self.settings]

    def pooled_limit(self) -> LimitCurve | None:
        """The limit curve over every decided position of every setting's run."""
        total = LimitSums.empty()
        for s in self.settings:
            sums = s.limit_sums
            if sums is not None:
                total = total + sums
        return total.curve() if total.count else None

    def compare(self, rule: str = DEFAULT_RULE, metric: str = "tokens_per_call") -> dict[str, list]:
        """rule's step Pareto front against every point of each other rule, at the other
        point's emitted KL (`frontier.dominance_check`); {} when rule was not swept."""

        def points(name: str) -> tuple[list[float], list[float]]:
            own = [s for s in self.settings if s.setting.rule == name]
            return (
                [s.estimate("emitted_kl").mean for s in own],
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
