"""Speedup: its one definition, the one way the lab measures it, and its prediction.

    speedup = tokens/s of speculative decoding ÷ tokens/s of verifier-only sampling

on the same prompt, settings and seed, one sequence at a time, both measured in one run
(DESIGN.md, "Metrics"). Tokens/s is the decoding phase's: new tokens ÷ the seconds from the
end of the prefill to the last token (`decoding_seconds`). Left out of those seconds:

- one-time work (the first calls at a prompt's shapes, caches built on first use): a
  measurement runs each decoder once before its clock starts;
- the prefill: the prompt read once, whatever k or the rule, and shown on its own;
- the lab's recording (trace rows, the exact emitted KL): instrumentation, not decoding.

Measured: the Decode page's race (`app/race.py`) decodes the prompt both ways with the clocks
taking turns round by round, so a swing in the machine's load lands on both, and states the
spread over stretches of the race (`spread`). A batched sweep's throughput ratio is another
number (a batch pads every row to its slowest, and a verifier-only batch amortises better
than a speculative one), so sweeps do not report a speedup of their own.

Predicted: a run's tokens per round × one verifier-only step ÷ one speculative round, in the
pair's measured costs (`predicted`; the costs and the rounds at every k are the k tuner's,
`k_tuner.predict_k`). The Frontier, the tuner's table and the k tuner all show this one
prediction, labelled "predicted". With the costs a run itself measured (its round and its
verifier-only step), the prediction is the run's measured speedup: both are the same quotient.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cactus_core.experiments.estimates.frontier import Estimate

MEASURED_HELP = (
    "Tokens/s of speculative decoding ÷ tokens/s of verifier-only sampling: the same prompt, "
    "settings and seed, one sequence at a time, measured in one run with the two clocks taking "
    "turns round by round. Tokens/s counts the decoding after the prefill; one-time work and "
    "the lab's recording stay outside the clocks."
)
PREDICTED_HELP = (
    "Predicted, not measured: the setting's tokens per round (from its acceptance at each "
    "draft position) × one verifier-only step ÷ one speculative round at this k, in the "
    "pair's costs measured on this machine (the k tuner's). The race on the Decode page "
    "measures it."
)
LABEL = "speedup vs verifier-only"
PREDICTED_LABEL = "predicted speedup vs verifier-only"
# Stretches of a race the spread is taken over, and the rounds each needs at least.
SPREAD_PARTS = 5
MIN_ROUNDS_PER_PART = 2


def decoding_seconds(stats: Any) -> float:
    """A run's decoding time: its wall time less the prefill and the recording's waits
    (`GenerationStats`: one sequence, or a batch's one clock)."""
    return max(0.0, stats.wall_s - stats.prefill_s - stats.record_s)


def decoding_rate(stats: Any) -> float:
    """New tokens ÷ decoding seconds (0 for a run with no decoding time)."""
    seconds = decoding_seconds(stats)
    return stats.new_tokens / seconds if seconds > 0 else 0.0


def measured(speculative: Any, verifier_only: Any) -> float:
    """The speedup of two runs' GenerationStats (same prompt, settings and seed)."""
    return ratio(
        speculative.new_tokens,
        decoding_seconds(speculative),
        verifier_only.new_tokens,
        decoding_seconds(verifier_only),
    )


def ratio(tokens: int, seconds: float, base_tokens: int, base_seconds: float) -> float:
    """(tokens ÷ seconds) ÷ (base tokens ÷ base seconds), each over its decoding phase; 0 when
    either rate is undefined."""
    if seconds <= 0 or base_seconds <= 0 or base_tokens <= 0:
        return 0.0
    return (tokens / seconds) / (base_tokens / base_seconds)


def predicted(tokens_per_round: float, round_cost: float, step_cost: float) -> float:
    """tokens per round × a verifier-only step ÷ a speculative round (costs in any one unit)."""
    if round_cost <= 0 or step_cost <= 0:
        raise ValueError(f"costs must be > 0, got round {round_cost}, step {step_cost}")
    return tokens_per_round * step_cost / round_cost


@dataclass(frozen=True)
class Spread:
    """The speedup's spread over stretches of one run: each stretch's speedup from the rounds
    both lanes ran in it (the run's tokens per round, the stretch's round and step times)."""

    low: float
    high: float
    parts: int

    def covers(self, value: float) -> bool:
        return self.low <= value <= self.high

    def including(self, value: float) -> Spread:
        """The spread widened to hold `value` (the whole run's speedup, which also counts the
        rounds one lane ran after the other had finished, outside every stretch)."""
        return Spread(min(self.low, value), max(self.high, value), self.parts)

    def text(self) -> str:
        return f"{self.low:.2f}–{self.high:.2f}× over {self.parts} stretches of the race"


def spread(
    tokens_per_round: float,
    rounds: Sequence[tuple[float, float]],
    steps: Sequence[tuple[float, float]],
    parts: int = SPREAD_PARTS,
) -> Spread | None:
    """The spread of a race. `rounds` and `steps`: (when it ended on the wall clock, how long
    it took) for each speculative round and verifier-only step. The lanes take turns, so in
    any stretch of wall-clock time both ran rounds under the same load. The time both lanes
    ran is cut into `parts` stretches holding the same number of speculative rounds, and each
    stretch's speedup is tokens per round × its mean step ÷ its mean round. None when the race
    is too short for two stretches."""
    end = min(max((t for t, _ in rounds), default=0.0), max((t for t, _ in steps), default=0.0))
    paired = sorted(r for r in rounds if r[0] <= end)
    parts = min(parts, len(paired) // MIN_ROUNDS_PER_PART)
    if parts < 2:
        return None
    groups = [
        paired[i * len(paired) // parts : (i + 1) * len(paired) // parts] for i in range(parts)
    ]
    values, start = [], -math.inf
    for i, group in enumerate(groups):
        stop = end if i == parts - 1 else group[-1][0]
        s = [d for t, d in steps if start < t <= stop]
        if s:
            r = [d for _, d in group]
            values.append(predicted(tokens_per_round, sum(r) / len(r), sum(s) / len(s)))
        start = stop
    if len(values) < 2:
        return None
    return Spread(min(values), max(values), len(values))


def predicted_estimate(value: float, tokens: Estimate) -> Estimate:
    """A predicted speedup with the interval its tokens per call carry (the costs' own
    uncertainty is not in it): the prediction scales with tokens per round at a fixed k."""
    if not (math.isfinite(tokens.mean) and tokens.mean > 0):
        return Estimate(value, value, value, tokens.n)
    lo = value * tokens.lo / tokens.mean if math.isfinite(tokens.lo) else value
    hi = value * tokens.hi / tokens.mean if math.isfinite(tokens.hi) else value
    return Estimate(value, lo, hi, tokens.n)
