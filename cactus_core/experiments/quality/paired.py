"""Does a setting's text get worse? Two answers, read from the decoded text of a sweep:

- **The paired task-score difference.** Every setting of a sweep decodes the same prompts with
  the same seeds, so a setting's checkable answers pair up with the lossless baseline's (sps at
  the same sampling and k; verifier-only sampling, the same law, where the sweep has no sps):
  d_i = passed_i(setting) − passed_i(baseline) ∈ {−1, 0, 1}. Its mean is the difference of the
  two task scores, and its 95% interval is the paired t interval, mean ± t(0.975, n − 1)·sd/√n
  (t's quantiles exact to three decimals up to 4 degrees of freedom, then by their
  Cornish-Fisher expansion, within 0.003 of the exact ones). Only the prompts on which the two
  disagree move it, so it sees a drop that two unpaired Wilson intervals, overlapping, would
  hide. `detectable` is the smallest true
  difference the prompt set finds with 80% power at that level, (t(0.975) + t(0.8))·sd/√n,
  with sd at least √(3/n) (when no prompt disagreed, the rule of three: the chance that one
  disagrees is below 3/n with 95% confidence).
- **Long answers' failure modes.** `eos_rate`: the share of answers that end at the end token
  within the budget (fewer new tokens than it allowed). `loop_rate`: the share that ran to the
  budget with a tail that repeats one span back to back (`loops`), each with its 95% Wilson
  interval over prompts; the loop rate's paired difference from lossless (`loop_rate_diff`,
  the same t interval: loops rise detectably where its low end is above 0); `distinct_4`, the
  share of an answer's word 4-grams that are distinct, averaged over answers (t interval);
  `length_ratio`, the mean new tokens against lossless's on the same prompts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cactus_core.experiments.estimates.override import Interval, wilson_interval

Z975, Z80 = 1.959964, 0.841621
LOOP_MAX_PERIOD = 16  # words in the longest span counted as a loop
LOOP_MIN_WORDS = 12  # the shortest tail a loop must fill (three periods at least)


# Student's t quantiles for 1-4 degrees of freedom, where the expansion below is too short.
_SMALL_DOF = {Z975: (12.706, 4.303, 3.182, 2.776), Z80: (1.376, 1.061, 0.978, 0.941)}


def t_quantile(z: float, dof: int) -> float:
    """Student's t quantile at the normal quantile z (Z975 or Z80 below 5 degrees of freedom)
    with `dof` degrees of freedom: a table below 5, then the Cornish-Fisher expansion (error
    under 0.003 at z = 1.96 from 5 degrees of freedom on)."""
    if dof < 1:
        return math.inf
    if dof < 5 and z in _SMALL_DOF:
        return _SMALL_DOF[z][dof - 1]
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3


@dataclass(frozen=True)
class PairedDifference:
    """mean(setting − baseline) over paired prompts, its 95% interval and what n can detect."""

    mean: float
    lo: float
    hi: float
    n: int
    detectable: float

    def contains(self, value: float) -> bool:
        return self.lo <= value <= self.hi

    @classmethod
    def none(cls) -> PairedDifference:
        return cls(math.nan, math.nan, math.nan, 0, math.nan)


def paired_difference(setting: Sequence[float], baseline: Sequence[float]) -> PairedDifference:
    """The paired difference of two settings' per-prompt scores (module docstring)."""
    if len(setting) != len(baseline):
        raise ValueError(f"{len(setting)} scores against {len(baseline)}: not paired")
    n = len(setting)
    if n == 0:
        return PairedDifference.none()
    d = [a - b for a, b in zip(setting, baseline, strict=True)]
    mean = sum(d) / n
    if n == 1:
        return PairedDifference(mean, -math.inf, math.inf, 1, math.inf)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(Z975, n - 1) * sd / math.sqrt(n)
    power_sd = max(sd, math.sqrt(3 / n))
    detectable = (t_quantile(Z975, n - 1) + t_quantile(Z80, n - 1)) * power_sd / math.sqrt(n)
    return PairedDifference(mean, mean - half, mean + half, n, detectable)


def loops(text: str) -> bool:
    """Whether the text's tail repeats one span of words back to back: for some period
    P ≤ LOOP_MAX_PERIOD, its last max(3P, LOOP_MIN_WORDS) words are periodic with period P."""
    words = text.split()
    for period in range(1, LOOP_MAX_PERIOD + 1):
        span = max(3 * period, LOOP_MIN_WORDS)
        if len(words) < span:
            break
        tail = words[-span:]
        if all(tail[i] == tail[i - period] for i in range(period, span)):
            return True
    return False


def distinct_ngrams(text: str, n: int = 4) -> float:
    """The share of the text's word n-grams that are distinct (NaN with none): 1 for text that
    never repeats a phrase, towards 0 for a loop."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else math.nan


def mean_interval(values: Sequence[float]) -> Interval:
    """The mean of the finite values with its 95% t interval (NaN for none)."""
    xs = [v for v in values if math.isfinite(v)]
    if not xs:
        return Interval(math.nan, math.nan, math.nan)
    mean = sum(xs) / len(xs)
    if len(xs) == 1:
        return Interval(mean, -math.inf, math.inf)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    half = t_quantile(Z975, len(xs) - 1) * sd / math.sqrt(len(xs))
    return Interval(mean, mean - half, mean + half)


def share(flags: Sequence[bool]) -> Interval:
    """The share of true flags with its 95% Wilson interval (NaN in [0, 1] for none)."""
    return wilson_interval(sum(bool(f) for f in flags), len(flags))
