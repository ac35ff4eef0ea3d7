"""A sweep's records, as the cache stores them: one `PromptRecord` per (setting, prompt) run and
one `ChunkRecord` per chunk (a setting on a few prompts, one batched call)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from cactus_core.experiments.estimates.curves import EstimatedCurve
from cactus_core.experiments.estimates.override import OverrideSums
from cactus_core.experiments.sweeps.config import Setting
from cactus_core.maths.limit import LimitSums


@dataclass
class PromptRecord:
    """What one (setting, prompt) run produced; stored in the cache."""

    index: int
    text: str
    tokens: int  # emitted tokens
    verifier_calls: int
    decided: int  # draft tokens that got an accept/reject decision
    accepted: int
    emitted_kl_sum: float  # sum over emitted tokens of KL(pi ‖ q) (the traces' values)
    nll_sum: float  # verifier's NLL (T = 1, no truncation) of the emitted tokens
    scored: int  # positions in the limit sums (decided positions whose token was kept)
    scored_kl_sum: float  # sum of KL(pi ‖ q) over those positions
    expected_accept_sum: float  # sum over them of sum_n p(n)·a(n)
    # per draft position: drafts that got a decision there, and those accepted
    # (`GenerationStats.position_reached` / `position_accepted`)
    position_reached: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    spec_rounds: int = 0
    # sums over the same positions as emitted_kl_sum of TV(pi, q) and of KL(q ‖ pi); NaN in a
    # record written before they were kept (not measured, which a mean then leaves out)
    emitted_tv_sum: float = math.nan
    emitted_reverse_kl_sum: float = math.nan

    @property
    def tokens_per_call(self) -> float:
        return self.tokens / self.verifier_calls if self.verifier_calls else math.nan

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.decided if self.decided else math.nan

    @property
    def emitted_kl(self) -> float:
        return self.emitted_kl_sum / self.tokens if self.tokens else math.nan

    @property
    def emitted_tv(self) -> float:
        """TV(pi, q) per emitted token: a bonus or verifier-only token has pi = q and adds 0."""
        return self.emitted_tv_sum / self.tokens if self.tokens else math.nan

    @property
    def emitted_reverse_kl(self) -> float:
        """KL(q ‖ pi) per emitted token, as emitted_kl (inf if one position's pi misses a token
        q allows)."""
        return self.emitted_reverse_kl_sum / self.tokens if self.tokens else math.nan

    @property
    def nll(self) -> float:
        return self.nll_sum / self.tokens if self.tokens else math.nan


@dataclass
class ChunkRecord:
    setting: Setting
    prompts: list[PromptRecord]
    wall_s: float  # the batched generate call only (no scoring)
    limit: LimitSums | None
    # the rule's estimated curve on this chunk's decided positions (SweepConfig.own_estimate)
    estimate: EstimatedCurve | None = None
    estimate_positions: int = 0
    # a rule that overrides sps (`Rule.caps.overrides_sps`): its trials and divergence sums, from
    # which the setting's pi is estimated (`override_estimate`)
    override: OverrideSums | None = None

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.prompts)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {
            "setting": self.setting.to_dict(),
            "prompts": [encode_floats(vars(r)) for r in self.prompts],
            "wall_s": self.wall_s,
            "limit": self.limit.to_dict() if self.limit is not None else None,
            "estimate": None if self.estimate is None else self.estimate.to_dict(),
            "estimate_positions": self.estimate_positions,
            "override": None if self.override is None else self.override.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChunkRecord:
        s = d["setting"]
        return cls(
            setting=Setting(s["rule"], tuple(sorted(s["params"].items()))),
            prompts=[PromptRecord(**decode_floats(r)) for r in d["prompts"]],
            wall_s=float(d["wall_s"]),
            limit=LimitSums.from_dict(d["limit"]) if d["limit"] is not None else None,
            estimate=EstimatedCurve.from_dict(d["estimate"]) if d.get("estimate") else None,
            estimate_positions=int(d.get("estimate_positions", 0)),
            override=OverrideSums.from_dict(d["override"]) if d.get("override") else None,
        )


def csv_cell(v: Any) -> Any:
    """A list (per-position values) as one cell of ';'-separated values; None as empty."""
    if isinstance(v, list):
        return ";".join("" if x is None else f"{x:g}" for x in v)
    return "" if v is None else v


def encode_floats(d: dict[str, Any]) -> dict[str, Any]:
    # Strict JSON has no inf (an interp pi against a truncated q); keep it as a string.
    return {
        k: (repr(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()
    }


def decode_floats(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (float(v) if v in ("inf", "-inf", "nan") else v) for k, v in d.items()}
