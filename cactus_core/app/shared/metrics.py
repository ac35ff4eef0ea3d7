"""The metrics the pages show, defined once (docs: DESIGN.md, "Metrics"), and the speed model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cactus_core.experiments.estimates.speedup import MEASURED_HELP, Spread, decoding_rate
from cactus_core.experiments.estimates.speedup import PREDICTED_HELP as PREDICTED_HELP

METRIC_HELP: dict[str, str] = {
    "tokens per call": (
        "Emitted tokens ÷ verifier forward passes, including the recovered or bonus token "
        "(vLLM's mean acceptance length). At most k + 1."
    ),
    "acceptance rate": (
        "Accepted draft tokens ÷ draft tokens that got an accept/reject decision; drafts after "
        "a rejection in the same round get none."
    ),
    "tokens/s": "Emitted tokens ÷ wall-clock seconds of the generation, on this machine.",
    "emitted KL": (
        "Mean over positions of KL(pi ‖ q) in nats, computed exactly from the full p and q, "
        "not estimated from samples."
    ),
    "emitted KL, not measured": (
        "This rule keeps drafts sps rejected by looking at the whole round (FLy: the later "
        "drafts; the learned judge: the verifier's hidden states), so no position's p and q give "
        "its pi. A Frontier sweep estimates its KL, with an interval."
    ),
    "speedup": MEASURED_HELP,
}


def prob_text(x: float | None) -> str:
    """A probability for a label: three decimals, but never a rounded-off "0.000" for a
    small positive one (q_n = 0.0004 is not q_n = 0, which no rule can rescue); "–" for none."""
    if x is None:
        return "–"
    if x == 0 or abs(x) >= 0.001:
        return f"{x:.3f}"
    return f"{x:.2g}"


@dataclass(frozen=True)
class Headline:
    """One metric card: label, value, and the change to show under it."""

    label: str
    value: str
    delta: str | None = None
    help: str | None = None


@dataclass
class SpeedComparison:
    """Speculative against verifier-only decoding, same prompt and settings, in one race: the
    measured speedup (`experiments.estimates.speedup`) and its spread over stretches of the race."""

    speculative_tokens_per_s: float  # decoding tokens/s, the prefill apart
    verifier_only_tokens_per_s: float
    tokens_per_call: float
    k: int
    spread: Spread | None = None
    spec_stats: Any = None  # the two runs' GenerationStats (the cost's parts)
    base_stats: Any = None
    # The equal work the rates are over (the race's `EqualWork`): tokens both wrote and the
    # speculative rounds that wrote them; 0: the two runs whole.
    tokens: int = 0
    rounds: int = 0

    @property
    def speedup(self) -> float:
        if self.verifier_only_tokens_per_s <= 0:
            return 0.0
        return self.speculative_tokens_per_s / self.verifier_only_tokens_per_s

    def verdict(self) -> str:
        s = self.speedup
        over = f"over the same {self.tokens} tokens" if self.tokens else "while decoding"
        rates = (
            f"{_rate(self.speculative_tokens_per_s)} against "
            f"{_rate(self.verifier_only_tokens_per_s)} tokens/s {over}"
        )
        spread = f"; {self.spread.text()}" if self.spread is not None else ""
        if self.spread is not None and self.spread.covers(1.0):
            return f"Neither is clearly faster here: {s:.2f}× ({rates}{spread})."
        if s < 1:
            slower = f"{s:.2f}× the verifier-only speed"
            return f"Speculation is slower here: {slower} ({rates}{spread})."
        return f"Speculation is faster here: {s:.2f}× ({rates}{spread})."


def _rate(x: float) -> str:
    """Tokens/s with enough digits that two different rates never read the same."""
    return f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def speed_comparison(
    spec_stats: Any, base_stats: Any, k: int, spread: Spread | None = None
) -> SpeedComparison:
    """The comparison from a speculative and a verifier-only run's GenerationStats."""
    return SpeedComparison(
        speculative_tokens_per_s=decoding_rate(spec_stats),
        verifier_only_tokens_per_s=decoding_rate(base_stats),
        tokens_per_call=spec_stats.tokens_per_call,
        k=k,
        spread=spread,
        spec_stats=spec_stats,
        base_stats=base_stats,
    )
