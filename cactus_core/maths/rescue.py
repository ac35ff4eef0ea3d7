"""What Cactus's divergence budget can buy a rejected draft: the smallest rescuing delta.

Cactus (the paper's closed form) accepts a drafted n for sure once h_n ≥ p_n, where
h_n = min(1, q_n + sqrt(2·delta·q_n·(1 − q_n))) (`cactus_h`). Solving h_n = p_n for delta gives
delta* = (p_n − q_n)² / (2·q_n·(1 − q_n)) when q_n < p_n; no delta is needed when q_n ≥ p_n
(lossless sampling already accepts for sure), and none helps when q_n = 0 (h_n stays 0): a
draft outside the verifier's top-k / top-p nucleus is rejected whatever delta is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from cactus_core.maths.rules.cactus import cactus_h

NEVER = math.inf  # the rescuing delta of a draft with q_n = 0
# Nudges of delta* by one float64 step at most this many times: the closed form can land a
# rounding error below the root, and the answer must make cactus_h itself reach p_n.
_NUDGES = 64


def _h(q_n: float, delta: float) -> float:
    return float(cactus_h(torch.tensor(q_n, dtype=torch.float64), delta))


def rescue_delta(q_n: float, p_n: float) -> float:
    """The smallest delta at which Cactus accepts the draft with probability 1 (h_n ≥ p_n),
    checked against `cactus_h` in float64; `NEVER` (inf) when q_n = 0, 0 when q_n ≥ p_n."""
    for name, x in (("q_n", q_n), ("p_n", p_n)):
        if not (math.isfinite(x) and 0.0 <= x <= 1.0):
            raise ValueError(f"{name} must lie in [0, 1], got {x}")
    if q_n <= 0.0:
        return NEVER
    if q_n >= p_n or q_n >= 1.0:
        return 0.0
    delta = (p_n - q_n) ** 2 / (2.0 * q_n * (1.0 - q_n))
    for _ in range(_NUDGES):
        if _h(q_n, delta) >= p_n:
            return delta
        delta = math.nextafter(delta, math.inf)
    raise ArithmeticError(f"no delta found for q_n = {q_n}, p_n = {p_n}")  # pragma: no cover


def rescued_share(deltas: Sequence[float], grid: Sequence[float]) -> list[float]:
    """The rescue curve: for each delta in `grid`, the share of the rejected drafts (given by
    their rescuing deltas) that Cactus at that delta would accept for sure. Empty input: 0."""
    if not deltas:
        return [0.0 for _ in grid]
    return [sum(d <= g for d in deltas) / len(deltas) for g in grid]
