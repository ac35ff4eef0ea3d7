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

It is off-policy: the positions came from one rule's text, and another rule would have written
other text. It is an estimate, and docs/benchmarks.md measures its error against the shipped
reference sweep.

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
    from cactus_core.engine.trace import Trace

DEFAULT_COUNT = 50  # parameter values per rule
DEFAULT_TAIL_BUCKETS = 1  # tail buckets per compact row (see the module docstring)


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
    p = p.detach().to("cpu", torch.float64)
    q = q.detach().to("cpu", torch.float64)
    m = min(top_m, p.shape[1])
    ids = torch.cat([p.topk(m, -1).indices, q.topk(m, -1).indices], -1)  # [N, 2m]
    ids, _ = ids.sort(-1)
    # A repeated id keeps its first copy; the others become zero entries.
    first = torch.ones_like(ids, dtype=torch.bool)
    first[:, 1:] = ids[:, 1:] != ids[:, :-1]
    kept_p = torch.where(first, p.gather(-1, ids), 0.0)
    kept_q = torch.where(first, q.gather(-1, ids), 0.0)
    return _with_tail(kept_p, kept_q, tail_buckets)


def _with_tail(
    kept_p: torch.Tensor, kept_q: torch.Tensor, buckets: int
) -> tuple[torch.Tensor, torch.Tensor]:
    def tail(x: torch.Tensor) -> torch.Tensor:
        left = (1.0 - x.sum(-1, keepdim=True)).clamp_min(0.0)
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
        if rnd.k == 0 or not rnd.positions:
            continue
        decided = min(rnd.k, len(rnd.emitted_ids), rnd.num_accepted + 1)
        for pos in rnd.positions[:decided]:
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
        xs = self.values
        spec = rule_class(self.rule).swept()
        if spec is not None and spec.log and xs[0] >= 0:
            floor = xs[xs > 0].min() if np.any(xs > 0) else 1.0
            xs = np.log(np.maximum(xs, floor / 10))
            value = math.log(max(float(value), floor / 10))
        order = np.argsort(xs)
        return float(np.interp(float(value), xs[order], ys[order]))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "param": self.param}
        for name in _ARRAYS:
            out[name] = [_json_float(x) for x in getattr(self, name).tolist()]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EstimatedCurve:
        arrays = {
            n: np.asarray([math.nan if x is None else x for x in d[n]], dtype=np.float64)
            for n in _ARRAYS
        }
        return cls(rule=str(d["rule"]), param=d["param"], **arrays)


_ARRAYS = (
    "values",
    "acceptance",
    "kl_position",
    "kl_token",
    "tokens_per_call",
    "limit_acceptance",
    "limit_tokens_per_call",
)


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


def estimate_frontier(
    p: torch.Tensor,
    q: torch.Tensor,
    k: int,
    rules: Sequence[str] | None = None,
    count: int = DEFAULT_COUNT,
) -> EstimatedFrontier:
    """Every rule's estimated curve (see the module docstring) on rows p, q [N, W].

    rules: names (default every rule in RULES); count: values of each swept parameter, from
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
    curves = {name: _curve(name, p, q, k, count, limit) for name in names}
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
        judge = make_rule(LOSSLESS_RULE) if getattr(cls, "round_level", False) else rule
        a, pi = judge.accept_probs_all_and_emitted(p, q, validate=False)
        acc.append(float((p * a.double()).sum(-1).mean()))
        div.append(0.0 if rule.lossless else float(kl(pi.double(), q).mean()))
    alpha = np.asarray(acc)
    kl_pos = np.asarray(div)
    lim = np.asarray([limit.at(x) for x in kl_pos])
    return EstimatedCurve(
        rule=name,
        param=None if spec is None else spec.name,
        values=np.asarray(values, dtype=np.float64),
        acceptance=alpha,
        kl_position=kl_pos,
        kl_token=kl_pos * decided_per_token(alpha, k),
        tokens_per_call=tokens_per_call(alpha, k),
        limit_acceptance=lim,
        limit_tokens_per_call=tokens_per_call(lim, k),
    )


def _as(spec: Any, value: float) -> float | int:
    return round(value) if spec.integer else float(value)
