"""The estimated frontier: every rule's trade-off curve from recorded (p, q) rows, no decoding.

Given the draft's p and the verifier's q at positions a run or a sweep recorded, each rule at
each of `count` values of its swept parameter (`Param.values`) gets, exactly on those rows:

- the expected acceptance alpha = mean over positions of sum_n p(n)·a(n);
- the mean KL(pi ‖ q) per decided position, from the rule's exact emitted pi;
- the limit: the best mean acceptance any rule could reach on the same rows at that KL
  (`maths.limit`, one price per nat).

Tokens per verifier call and KL per emitted token then come from the acceptance-by-position
model of speculative decoding, each drafted position accepted with chance alpha independently
(Leviathan et al. 2023): a round of k drafts emits (1 − alpha^(k+1)) / (1 − alpha) tokens on
average and decides (1 − alpha^k) / (1 − alpha) positions, so the KL per emitted token is the
KL per decided position times their ratio (the bonus token is drawn from q and adds none).

On one run's rows it is off-policy: the positions came from one rule's text, and another rule
would have written other text (a rule that accepts more writes text on which draft and
verifier agree more). `from_own_runs` corrects for that where a sweep ran the rule itself: the
curve at each value blends the curves estimated on the positions of the rule's own runs at the
two swept values around it, so at a swept value it is on-policy and between them it leans on
the nearer run. docs/benchmarks.md measures both against the shipped reference sweep, the
second with each measured value's own run held out.

Rows may be full ([N, V]) or compact: a decode trace keeps the top M entries of p and of q
per position and a tail (the mass left over). `compact_rows` and `rows_from_trace` turn either
into rows over the kept ids plus tail buckets, which is what makes a whole curve for every rule
take seconds: a rule's emitted pi is O(W log W) per row with W ≈ 2M instead of V = 49,152. A
bucket stands for many tail tokens with one larger one, which overstates what the rules that
accept by ratio can rescue there (docs/benchmarks.md measures by how much).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from cactus_core.maths.divergence import kl
from cactus_core.maths.limit import LimitCurve, limit_sums
from cactus_core.maths.rules import LOSSLESS_RULE, RULES, make_rule, rule_class

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import Trace

DEFAULT_COUNT = 50  # parameter values per rule
DEFAULT_TAIL_BUCKETS = 1  # tail buckets per compact row (see the module docstring)
_ROUNDING = 1e-6  # a compact row's leftover mass up to this is rounding (float32 rows)


# ------------------------------------------------------------------------------ the model


def tokens_per_call(alpha: np.ndarray | float, k: int) -> np.ndarray:
    """Expected tokens per verifier call, (1 − alpha^(k+1)) / (1 − alpha), k + 1 at alpha = 1."""
    a = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (1.0 - a ** (k + 1)) / (1.0 - a)
    return np.where(a >= 1.0 - 1e-12, float(k + 1), out)


def decided_per_token(alpha: np.ndarray | float, k: int) -> np.ndarray:
    """Expected decided positions per emitted token: (1 − alpha^k) / (1 − alpha^(k+1))."""
    a = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (1.0 - a**k) / (1.0 - a ** (k + 1))
    return np.where(a >= 1.0 - 1e-12, k / (k + 1), out)


# ------------------------------------------------------------------------------ rows


def compact_rows(
    p: torch.Tensor, q: torch.Tensor, top_m: int, tail_buckets: int = DEFAULT_TAIL_BUCKETS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Full rows [N, V] -> compact rows [N, 2·top_m + tail_buckets] (float64): per row the
    union of p's and q's top `top_m` ids (padded with zero entries), then the tail mass of
    each split evenly into `tail_buckets` entries."""
    if p.shape != q.shape or p.dim() != 2:
        raise ValueError(f"p and q must both be [N, V], got {tuple(p.shape)}, {tuple(q.shape)}")
    if top_m < 1 or tail_buckets < 1:
        raise ValueError("top_m and tail_buckets must be >= 1")
    p, q = p.detach(), q.detach()
    m = min(top_m, p.shape[1])
    ids = torch.cat([p.topk(m, -1).indices, q.topk(m, -1).indices], -1)  # [N, 2m]
    ids, _ = ids.sort(-1)
    # A repeated id keeps its first copy; the others become zero entries.
    first = torch.ones_like(ids, dtype=torch.bool)
    first[:, 1:] = ids[:, 1:] != ids[:, :-1]
    # Only the kept entries go to float64, not the whole [N, V] rows.
    first = first.cpu()
    kept_p = torch.where(first, p.gather(-1, ids).to("cpu", torch.float64), 0.0)
    kept_q = torch.where(first, q.gather(-1, ids).to("cpu", torch.float64), 0.0)
    return _with_tail(kept_p, kept_q, tail_buckets)


def _with_tail(
    kept_p: torch.Tensor, kept_q: torch.Tensor, buckets: int
) -> tuple[torch.Tensor, torch.Tensor]:
    def tail(x: torch.Tensor) -> torch.Tensor:
        left = 1.0 - x.sum(-1, keepdim=True)
        # What is left of a row whose kept entries hold all its mass is float32 rounding, not
        # a tail: kept as mass it would be a token with q > 0, which the threshold and
        # deferral rules can send all their residual to when p and q are disjoint.
        left = torch.where(left > _ROUNDING, left, 0.0)
        return (left / buckets).expand(-1, buckets)

    p = torch.cat([kept_p, tail(kept_p)], -1)
    q = torch.cat([kept_q, tail(kept_q)], -1)
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def rows_from_trace(
    trace: Trace, tail_buckets: int = DEFAULT_TAIL_BUCKETS
) -> tuple[torch.Tensor, torch.Tensor]:
    """The compact (p, q) rows [N, W] of a trace's decided positions whose token was kept (the
    positions a sweep scores), from the replay rows (top-M of p and q and the tail)."""
    rows: list[tuple[dict[int, float], dict[int, float]]] = []
    for rnd in trace.rounds:
        for pos in rnd.decided_positions():
            p = dict(zip(pos.replay_p_ids, pos.replay_p_probs, strict=True))
            q = dict(zip(pos.replay_q_ids, pos.replay_q_probs, strict=True))
            rows.append((p, q))
    if not rows:
        raise ValueError("the trace has no decided positions with replay rows")
    width = max(len(set(p) | set(q)) for p, q in rows)
    kept_p = torch.zeros(len(rows), width, dtype=torch.float64)
    kept_q = torch.zeros_like(kept_p)
    for i, (p, q) in enumerate(rows):
        ids = sorted(set(p) | set(q))
        kept_p[i, : len(ids)] = torch.tensor([p.get(t, 0.0) for t in ids], dtype=torch.float64)
        kept_q[i, : len(ids)] = torch.tensor([q.get(t, 0.0) for t in ids], dtype=torch.float64)
    return _with_tail(kept_p, kept_q, tail_buckets)


# ------------------------------------------------------------------------------ the curves


@dataclass(frozen=True)
class EstimatedCurve:
    """One rule's estimated trade-off over its swept parameter (one point for a rule without
    one). Arrays are aligned with `values`."""

    rule: str
    param: str | None
    values: np.ndarray  # the swept parameter's values ([nan] for a rule without one)
    acceptance: np.ndarray  # mean expected acceptance per decided position
    kl_position: np.ndarray  # mean KL(pi ‖ q) per decided position (exact on the rows)
    kl_token: np.ndarray  # modelled KL per emitted token
    tokens_per_call: np.ndarray  # modelled
    limit_acceptance: np.ndarray  # the limit at kl_position on the same rows
    limit_tokens_per_call: np.ndarray  # modelled from limit_acceptance

    @property
    def efficiency(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.acceptance / self.limit_acceptance

    def at(self, value: float | None, field: str) -> float:
        """`field` at parameter `value`, interpolated along the curve (log-spaced parameters
        in log space); the end values beyond its range."""
        ys = getattr(self, field)
        if self.param is None or value is None or len(self.values) == 1:
            return float(ys[0])
        axis = _ParamAxis(self.rule, self.values)
        xs = axis(self.values)
        order = np.argsort(xs)
        return float(np.interp(axis(value), xs[order], ys[order]))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "param": self.param}
        for name in CURVE_ARRAYS:
            out[name] = [_json_float(x) for x in getattr(self, name).tolist()]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EstimatedCurve:
        arrays = {
            n: np.asarray([math.nan if x is None else x for x in d[n]], dtype=np.float64)
            for n in CURVE_ARRAYS
        }
        return cls(rule=str(d["rule"]), param=d["param"], **arrays)


# The per-value lists of a curve, in its dict form (`to_dict`, `from_dict`).
CURVE_ARRAYS = (
    "values",
    "acceptance",
    "kl_position",
    "kl_token",
    "tokens_per_call",
    "limit_acceptance",
    "limit_tokens_per_call",
)


class _ParamAxis:
    """The scale a rule's parameter is interpolated in: log for a log-spaced parameter (a zero
    sits a decade below the smallest positive value), linear otherwise."""

    def __init__(self, rule: str, values: np.ndarray) -> None:
        spec = rule_class(rule).swept()
        self.log = bool(spec is not None and spec.log and np.nanmin(values) >= 0)
        positive = values[values > 0]
        self.floor = float(positive.min()) / 10 if positive.size else 0.1

    def __call__(self, x: Any) -> Any:
        x = np.asarray(x, dtype=np.float64)
        return np.log(np.maximum(x, self.floor)) if self.log else x


def _json_float(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class EstimatedFrontier:
    """Every rule's estimated curve on the same rows, and the limit there."""

    k: int
    positions: int
    curves: dict[str, EstimatedCurve]
    limit: LimitCurve

    def limit_points(self) -> tuple[np.ndarray, np.ndarray]:
        """The limit as (KL per emitted token, tokens per call), both modelled at k."""
        alpha = self.limit.mean_acceptance
        return self.limit.mean_kl * decided_per_token(alpha, self.k), tokens_per_call(alpha, self.k)

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "positions": self.positions,
            "curves": {name: c.to_dict() for name, c in self.curves.items()},
            "limit": {
                "mean_kl": self.limit.mean_kl.tolist(),
                "mean_acceptance": self.limit.mean_acceptance.tolist(),
                "count": self.limit.count,
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EstimatedFrontier:
        lim = d["limit"]
        return cls(
            k=int(d["k"]),
            positions=int(d["positions"]),
            curves={n: EstimatedCurve.from_dict(c) for n, c in d["curves"].items()},
            limit=LimitCurve(
                np.asarray(lim["mean_kl"]), np.asarray(lim["mean_acceptance"]), int(lim["count"])
            ),
        )


def estimable(rule: str) -> bool:
    """Whether rows give the rule's curve: its pi at a position follows from that position's p
    and q. A rule that overrides sps on what the rows do not hold (FLy's later drafts, the
    learned judge's hidden states) has none; a sweep estimates its pi from its decode instead
    (`experiments.estimates.override`), and its measured points stand for it."""
    return not rule_class(rule).caps.overrides_sps


def estimate_frontier(
    p: torch.Tensor,
    q: torch.Tensor,
    k: int,
    rules: Sequence[str] | None = None,
    count: int = DEFAULT_COUNT,
) -> EstimatedFrontier:
    """Every rule's estimated curve (see the module docstring) on rows p, q [N, W].

    rules: names (default every rule in RULES; those that are not `estimable` get no curve);
    count: values of each swept parameter, from
    `Param.values(count)` (integer parameters give fewer distinct values). The rows are
    checked to be distributions once here, then every rule runs unvalidated in float64.
    """
    if p.shape != q.shape or p.dim() != 2 or p.shape[0] == 0:
        raise ValueError(f"p and q must both be [N, V] with N >= 1, got {tuple(p.shape)}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if count < 2:
        raise ValueError(f"count must be >= 2, got {count}")
    p = p.detach().to("cpu", torch.float64)
    q = q.detach().to("cpu", torch.float64)
    for name, x in (("p", p), ("q", q)):
        if not torch.isfinite(x).all() or (x < 0).any():
            raise ValueError(f"{name} must be finite and non-negative")
        if ((x.sum(-1) - 1).abs() > 1e-3).any():
            raise ValueError(f"every row of {name} must sum to 1")
    limit = limit_sums(p, q).curve()
    names = list(RULES) if rules is None else list(rules)
    curves = {name: _curve(name, p, q, k, count, limit) for name in names if estimable(name)}
    return EstimatedFrontier(k=k, positions=int(p.shape[0]), curves=curves, limit=limit)


def _curve(
    name: str, p: torch.Tensor, q: torch.Tensor, k: int, count: int, limit: LimitCurve
) -> EstimatedCurve:
    cls = rule_class(name)
    spec = cls.swept()
    values = [math.nan] if spec is None else spec.values(count)
    acc, div = [], []
    for v in values:
        rule = make_rule(name) if spec is None else make_rule(name, **{spec.name: _as(spec, v)})
        # A round-level rule (block verification) decides on the whole draft; per position
        # it is judged here by the per-position lossless acceptance, a lower bound on it.
        judge = make_rule(LOSSLESS_RULE) if cls.caps.round_level else rule
        a, pi = judge.accept_probs_all_and_emitted(p, q, validate=False)
        acc.append(float((p * a.double()).sum(-1).mean()))
        div.append(0.0 if rule.caps.lossless else float(kl(pi.double(), q).mean()))
    return _modelled(
        name,
        None if spec is None else spec.name,
        np.asarray(values, dtype=np.float64),
        np.asarray(acc),
        np.asarray(div),
        limit,
        k,
    )


def _modelled(
    rule: str,
    param: str | None,
    values: np.ndarray,
    alpha: np.ndarray,
    kl_pos: np.ndarray,
    limit: LimitCurve | np.ndarray,
    k: int,
) -> EstimatedCurve:
    """A curve from its per-position means; limit is the limit curve of the rows or, already
    read off at each kl_pos, the limit acceptances."""
    lim = np.asarray([limit.at(x) for x in kl_pos]) if isinstance(limit, LimitCurve) else limit
    return EstimatedCurve(
        rule=rule,
        param=param,
        values=values,
        acceptance=alpha,
        kl_position=kl_pos,
        kl_token=kl_pos * decided_per_token(alpha, k),
        tokens_per_call=tokens_per_call(alpha, k),
        limit_acceptance=lim,
        limit_tokens_per_call=tokens_per_call(lim, k),
    )


# ------------------------------------------------------------------------------ own runs

# The per-position means a curve is made of; the other fields are modelled from them.
_MEANS = ("acceptance", "kl_position", "limit_acceptance")

# One run of a rule: its swept parameter's value (None for a rule without one) and the rule's
# curve estimated on the positions that run decoded.
OwnRun = tuple[float | None, EstimatedCurve]


def pool_curves(
    curves: Sequence[EstimatedCurve], weights: Sequence[float], k: int
) -> EstimatedCurve:
    """One rule's curves on several sets of positions (a sweep's chunks) as one: the
    per-position means weighted by each set's positions (the limit acceptance too, which is
    then an average of limits rather than the limit of the pooled rows)."""
    if not curves or len(curves) != len(weights):
        raise ValueError("need one weight per curve, and at least one curve")
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    first = curves[0]
    means = {f: sum(wi * getattr(c, f) for wi, c in zip(w, curves, strict=True)) for f in _MEANS}
    return _modelled(
        first.rule,
        first.param,
        first.values,
        means["acceptance"],
        means["kl_position"],
        means["limit_acceptance"],
        k,
    )


def own_runs_at(runs: Sequence[OwnRun], value: float | None) -> dict[str, float]:
    """The per-position means (`_MEANS`) at `value` from a rule's own runs: a blend of the two
    runs whose values bracket it, each read at `value` on its own curve and weighted by its
    nearness (in the parameter's scale); the nearest run's curve outside their range."""
    if not runs:
        raise ValueError("need at least one run")
    ordered = sorted(runs, key=lambda r: -math.inf if r[0] is None else r[0])
    curve = ordered[0][1]
    if value is None or curve.param is None or len(ordered) == 1:
        return {f: curve.at(value, f) for f in _MEANS}
    axis = _ParamAxis(curve.rule, curve.values)
    xs = [float(axis(v)) for v, _ in ordered]
    x = float(axis(value))
    j = int(np.searchsorted(xs, x, side="right")) - 1
    if j < 0 or j >= len(ordered) - 1:
        end = ordered[0 if j < 0 else -1][1]
        return {f: end.at(value, f) for f in _MEANS}
    w = (x - xs[j]) / (xs[j + 1] - xs[j])
    lo, hi = ordered[j][1], ordered[j + 1][1]
    return {f: (1 - w) * lo.at(value, f) + w * hi.at(value, f) for f in _MEANS}


def from_own_runs(runs: Sequence[OwnRun], k: int) -> EstimatedCurve:
    """A rule's curve over the values of its runs' curves and the runs' own values, each value
    from the runs around it (`own_runs_at`): on-policy at every value a run was made at."""
    curve = runs[0][1]
    values = curve.values
    if curve.param is not None:
        values = np.unique(np.concatenate([values, [float(v) for v, _ in runs if v is not None]]))
    at = [own_runs_at(runs, None if curve.param is None else float(v)) for v in values]
    means = {f: np.asarray([a[f] for a in at]) for f in _MEANS}
    return _modelled(
        curve.rule,
        curve.param,
        values,
        means["acceptance"],
        means["kl_position"],
        means["limit_acceptance"],
        k,
    )


def held_out(runs: Sequence[OwnRun], index: int, k: int) -> dict[str, float]:
    """What `from_own_runs` would say at run `index`'s value without that run: the honest test
    of the curve between swept values. Modelled fields included; ValueError for a lone run."""
    value = runs[index][0]
    rest = [r for i, r in enumerate(runs) if i != index]
    if not rest:
        raise ValueError("a rule with one run has nothing to hold it out against")
    means = own_runs_at(rest, value)
    alpha, kl_pos = means["acceptance"], means["kl_position"]
    return {
        **means,
        "kl_token": float(kl_pos * decided_per_token(alpha, k)),
        "tokens_per_call": float(tokens_per_call(alpha, k)),
    }


def _as(spec: Any, value: float) -> float | int:
    return round(value) if spec.integer else float(value)
