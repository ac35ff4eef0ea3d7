"""The emitted law of a rule that overrides sps rejections, estimated from a decode.

FLy (`fly`: its window reads the later drafts) and a learned judge (a classifier on the
verifier's hidden states) both keep lossless speculative sampling's coin and only ever turn an
sps rejection into an acceptance of the drafted token. What they emit at a position depends on
more than that position's p and q, so no per-position formula gives it; under one assumption
it still has a closed form with a single unknown, which a decode estimates.

The law. At a position with draft p and verifier q [V], the drafted n ~ p. sps accepts it with
a(n) = min(1, q_n / p_n), so n is written by acceptance with probability p_n·a(n) =
min(p_n, q_n), and rejected with probability p_n − min(p_n, q_n) = (p_n − q_n)+. A rejection
draws from sps's residual r = (q − p)+ / Z, with Z = sum (q − p)+ = sum (p − q)+ (p and q both
sum to 1). Suppose the rule overrides a rejection of n with probability omega when q_n > 0 and
never when q_n = 0 (no rule here writes a token the verifier rules out), omega NOT depending on
which n was drafted. With m = p(q = 0) = sum over q_n = 0 of (p_n − q_n)+, the rejections that
stay rejections carry mass Z − omega·(Z − m), so

    pi(x) = min(p_x, q_x) + omega·(p_x − q_x)+·1[q_x > 0] + r(x)·(Z − omega·(Z − m))
          = q_x + omega·(p̃_x − q_x),        p̃ = p·1[q > 0] + (m / Z)·(q − p)+,

using min(p, q) + (q − p)+ = q and min(p, q) + (p − q)+ = p. So pi = (1 − omega)·q + omega·p̃:
a mixture of the verifier and p̃, the law at omega = 1 (`maths.rules.override.overridden_law`).
Without truncation m = 0, p̃ = p and pi = (1 − omega)·q + omega·p.

Monotone in omega. pi is affine in omega and equals q at omega = 0. KL(pi ‖ q) and KL(q ‖ pi)
are convex in pi and 0 at pi = q, so both are non-decreasing on [0, 1]; TV(pi, q) =
omega·TV(p̃, q) is linear. A mean over positions keeps that, so the divergences at the two ends
of omega's interval bracket the one at its estimate (`tests/test_override_estimate.py` checks
it on a grid of omega).

The estimate. Each sps rejection of a draft q allows, at a position where the rule could
override ("eligible": FLy's gate open and a window that fits; a judge: everywhere), is one
Bernoulli(omega) trial: omega-hat = overridden / trials with a 95% Wilson interval. Then pi is
(1 − omega)·q + omega·p̃ at eligible positions and q elsewhere (sps), and the mean KL(pi ‖ q),
TV(pi, q) and KL(q ‖ pi) over the positions are given at omega-hat and at both ends of its
interval: every number is "estimated, with its interval".

What the interval does not cover: (a) omega is one number pooled over the eligible positions
(FLy's chance that the next W − 1 drafts pass varies with the text); (b) omega must not depend
on the drafted token: FLy's later drafts are drawn after n, so their acceptance can depend on
n, and the law above is then an approximation (exact when the later rows do not depend on n, as
in the tests); (c) the rows themselves are taken as given, as a sweep's exact KL takes its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from cactus_core.maths.divergence import kl, reverse_kl, total_variation
from cactus_core.maths.rules.override import overridden_law

# Two-sided 95% normal quantile.
Z95 = 1.959963984540054
# Rows per block when the divergences run over many positions: pi is built three times per
# block (omega-hat and the two ends), so a block of [rows, V] float64 stays near 8 MB.
_BLOCK_ENTRIES = 1 << 20


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95% interval."""

    estimate: float
    lo: float
    hi: float

    def to_dict(self) -> dict[str, float | None]:
        return {k: (v if math.isfinite(v) else None) for k, v in vars(self).items()}


@dataclass(frozen=True)
class OverrideEstimate:
    """omega-hat and the divergences of the estimated pi, each with its interval."""

    omega: Interval  # chance an eligible sps rejection is overridden (Wilson 95%)
    overridden: int  # eligible sps rejections (of drafts q allows) the rule overrode
    trials: int  # eligible sps rejections of drafts q allows
    positions: int  # decided positions
    eligible: int  # of which the rule could override
    kl: Interval  # mean over the positions of KL(pi ‖ q), nats
    tv: Interval  # mean TV(pi, q)
    reverse_kl: Interval  # mean KL(q ‖ pi), nats

    def to_dict(self) -> dict[str, object]:
        return {
            "omega": self.omega.to_dict(),
            "overridden": self.overridden,
            "trials": self.trials,
            "positions": self.positions,
            "eligible": self.eligible,
            "kl": self.kl.to_dict(),
            "tv": self.tv.to_dict(),
            "reverse_kl": self.reverse_kl.to_dict(),
        }


def wilson_interval(successes: int, trials: int, z: float = Z95) -> Interval:
    """successes / trials with its Wilson score interval; NaN in [0, 1] with no trials."""
    if not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return Interval(math.nan, 0.0, 1.0)
    rate = successes / trials
    z2n = z * z / trials
    centre = (rate + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(rate * (1 - rate) / trials + z2n / (4 * trials))
    # at 0 or all successes the ends are 0 and 1 up to rounding: say so exactly
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == trials else min(1.0, centre + half)
    return Interval(rate, lo, hi)


def mean_divergences(
    p: torch.Tensor, q: torch.Tensor, eligible: torch.Tensor, omega: float
) -> tuple[float, float, float]:
    """(mean KL(pi ‖ q), mean TV(pi, q), mean KL(q ‖ pi)) over rows p, q [N, V] with
    pi = (1 − omega)·q + omega·p̃ where eligible [N], q elsewhere; NaNs for omega NaN."""
    n = p.shape[0]
    if n == 0 or math.isnan(omega):
        return math.nan, math.nan, math.nan
    step = max(1, _BLOCK_ENTRIES // max(p.shape[1], 1))
    sums = [0.0, 0.0, 0.0]
    for i in range(0, n, step):
        pb, qb = p[i : i + step].double(), q[i : i + step].double()
        w = omega * eligible[i : i + step].to(torch.float64).unsqueeze(-1)  # [rows, 1]
        pi = qb + w * (overridden_law(pb, qb) - qb)  # [rows, V]
        for j, fn in enumerate((kl, total_variation, reverse_kl)):
            sums[j] += float(fn(pi, qb).sum())
    return sums[0] / n, sums[1] / n, sums[2] / n


def estimate_override(
    p: torch.Tensor,
    q: torch.Tensor,
    qn: torch.Tensor,
    sps_rejected: torch.Tensor,
    overridden: torch.Tensor,
    eligible: torch.Tensor,
    z: float = Z95,
) -> OverrideEstimate:
    """omega-hat and the estimated pi's divergences (module docstring) from a decode's
    decided positions.

    p, q [N, V]: each position's draft and verifier rows (full, or compact rows from
    `estimate.compact_rows`); qn [N]: the verifier's probability of the drafted token (0 marks
    a draft the rule may not accept); sps_rejected [N] bool: sps's coin failed there,
    u ≥ min(1, q_n / p_n); overridden [N] bool: the rule accepted it anyway; eligible [N] bool:
    the rule could override there. ValueError for mismatched shapes or an override that is not
    an eligible sps rejection of a draft q allows.
    """
    if p.dim() != 2 or p.shape != q.shape:
        raise ValueError(f"p and q must both be [N, V], got {tuple(p.shape)}, {tuple(q.shape)}")
    n = p.shape[0]
    for name, t in (
        ("qn", qn),
        ("sps_rejected", sps_rejected),
        ("overridden", overridden),
        ("eligible", eligible),
    ):
        if t.shape != (n,):
            raise ValueError(f"{name} must be [N] = [{n}], got {tuple(t.shape)}")
    for name, t in (
        ("sps_rejected", sps_rejected),
        ("overridden", overridden),
        ("eligible", eligible),
    ):
        if t.dtype != torch.bool:
            raise ValueError(f"{name} must be a bool tensor, got {t.dtype}")
    trial = eligible & sps_rejected & (qn > 0)  # [N]
    if bool((overridden & ~trial).any()):
        raise ValueError(
            "overridden must mark only eligible sps rejections of drafts q allows (q_n > 0)"
        )
    hits, trials = int(overridden.sum()), int(trial.sum())
    omega = wilson_interval(hits, trials, z)
    at = [mean_divergences(p, q, eligible, w) for w in (omega.estimate, omega.lo, omega.hi)]
    return OverrideEstimate(
        omega=omega,
        overridden=hits,
        trials=trials,
        positions=n,
        eligible=int(eligible.sum()),
        kl=Interval(at[0][0], at[1][0], at[2][0]),
        tv=Interval(at[0][1], at[1][1], at[2][1]),
        reverse_kl=Interval(at[0][2], at[1][2], at[2][2]),
    )


# The omega values a sweep's chunk keeps its divergence sums at: merged over chunks, the sums
# are read at omega-hat and at its interval's ends by linear interpolation (each divergence is
# convex in omega, so the interpolated value is at most 1/8 of a grid step squared times its
# curvature above the true one: conservative).
OMEGA_GRID: tuple[float, ...] = tuple(i / 32 for i in range(33))


@dataclass(frozen=True)
class OverrideSums:
    """What a sweep keeps of one chunk's decided positions for `estimate_override`: the trials
    and, per omega of `OMEGA_GRID`, the sums over the positions of the three divergences.
    Chunks add (`+`); `per_token` reads the setting's estimate."""

    overridden: int
    trials: int
    positions: int
    eligible: int
    kl: tuple[float, ...]  # sum over positions of KL(pi_omega ‖ q), one per grid omega
    tv: tuple[float, ...]
    reverse_kl: tuple[float, ...]

    @classmethod
    def empty(cls) -> OverrideSums:
        zeros = (0.0,) * len(OMEGA_GRID)
        return cls(0, 0, 0, 0, zeros, zeros, zeros)

    @classmethod
    def of(
        cls,
        p: torch.Tensor,
        q: torch.Tensor,
        qn: torch.Tensor,
        sps_rejected: torch.Tensor,
        overridden: torch.Tensor,
        eligible: torch.Tensor,
    ) -> OverrideSums:
        """The sums of positions p, q [N, V] with the flags [N] of `estimate_override`."""
        trial = eligible & sps_rejected & (qn > 0)  # [N]
        if bool((overridden & ~trial).any()):
            raise ValueError(
                "overridden must mark only eligible sps rejections of drafts q allows (q_n > 0)"
            )
        n = p.shape[0]
        grid = [mean_divergences(p, q, eligible, w) for w in OMEGA_GRID] if n else []
        sums = [tuple(g[j] * n for g in grid) if n else (0.0,) * len(OMEGA_GRID) for j in range(3)]
        return cls(int(overridden.sum()), int(trial.sum()), n, int(eligible.sum()), *sums)

    def __add__(self, other: OverrideSums) -> OverrideSums:
        def add(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
            return tuple(x + y for x, y in zip(a, b, strict=True))

        return OverrideSums(
            self.overridden + other.overridden,
            self.trials + other.trials,
            self.positions + other.positions,
            self.eligible + other.eligible,
            add(self.kl, other.kl),
            add(self.tv, other.tv),
            add(self.reverse_kl, other.reverse_kl),
        )

    def omega(self, z: float = Z95) -> Interval:
        return wilson_interval(self.overridden, self.trials, z)

    def per_token(self, divergence: str, tokens: int, z: float = Z95) -> Interval:
        """The setting's divergence per emitted token ("kl", "tv" or "reverse_kl") at
        omega-hat and at its interval's ends: the sums over decided positions divided by the
        tokens (a bonus or verifier-only token emits q and adds 0, as for an exact rule)."""
        sums = getattr(self, divergence)
        w = self.omega(z)
        if tokens <= 0:
            return Interval(math.nan, math.nan, math.nan)
        # no trials: nothing was ever overridden, and nothing says how often it would be
        at = [_interpolate(sums, x) if math.isfinite(x) else 0.0 for x in (w.estimate, w.lo, w.hi)]
        return Interval(at[0] / tokens, at[1] / tokens, at[2] / tokens)

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        for key in ("kl", "tv", "reverse_kl"):
            d[key] = [x if math.isfinite(x) else repr(x) for x in d[key]]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OverrideSums:
        def floats(xs: list[Any]) -> tuple[float, ...]:
            return tuple(float(x) for x in xs)

        return cls(
            int(d["overridden"]),
            int(d["trials"]),
            int(d["positions"]),
            int(d["eligible"]),
            floats(d["kl"]),
            floats(d["tv"]),
            floats(d["reverse_kl"]),
        )


def _interpolate(values: tuple[float, ...], omega: float) -> float:
    """values (one per OMEGA_GRID point) read at omega in [0, 1], linearly between points."""
    x = min(max(omega, 0.0), 1.0) * (len(OMEGA_GRID) - 1)
    i = min(int(x), len(OMEGA_GRID) - 2)
    t = x - i
    lo, hi = values[i], values[i + 1]
    if t == 0.0:
        return lo
    return lo + t * (hi - lo) if math.isfinite(hi) else hi
