"""Which rule gives the most tokens per call at a given emitted KL: the comparison of every
rule that docs/rules.md reports, read from sweep rows (the shipped reference sweep's, or any
sweep's `SweepResult.rows()`).

A budget X asks: among every measured setting whose mean emitted KL(pi ‖ q) per token is at
most X, which has the most tokens per verifier call? Lossless settings (KL 0) compete at every
budget. The answer is a step function of X, read off the measured points with no fitting.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cactus_core.maths.rules import RULES

# Budgets of mean emitted KL per token (nats) the comparison table reports.
KL_BUDGETS: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class RulePoint:
    """One measured setting of one rule."""

    rule: str
    label: str
    kl: float  # mean emitted KL(pi ‖ q) per token, nats
    tokens_per_call: float
    tokens_per_call_lo: float
    tokens_per_call_hi: float
    efficiency: float  # expected acceptance ÷ the limit at the same positions and KL


def _num(row: Mapping[str, Any], key: str, default: float = math.nan) -> float:
    """A number from a row (JSON writes NaN as null)."""
    value = row.get(key)
    return default if value is None else float(value)


def rule_points(rows: Sequence[Mapping[str, Any]]) -> list[RulePoint]:
    """The rules' sweep rows as points (the verifier-only baseline and rows without a finite
    KL or tokens per call are left out)."""
    out = []
    for r in rows:
        if r.get("rule") not in RULES:
            continue
        kl, tpc = _num(r, "emitted_kl"), _num(r, "tokens_per_call")
        if not (math.isfinite(kl) and math.isfinite(tpc)):
            continue
        out.append(
            RulePoint(
                rule=str(r["rule"]),
                label=str(r.get("label", r["rule"])),
                kl=max(kl, 0.0),
                tokens_per_call=tpc,
                tokens_per_call_lo=_num(r, "tokens_per_call_lo", tpc),
                tokens_per_call_hi=_num(r, "tokens_per_call_hi", tpc),
                efficiency=_num(r, "efficiency"),
            )
        )
    return out


def by_rule(points: Sequence[RulePoint]) -> dict[str, list[RulePoint]]:
    """Each rule's points, in order of emitted KL."""
    out: dict[str, list[RulePoint]] = {}
    for pt in points:
        out.setdefault(pt.rule, []).append(pt)
    return {rule: sorted(pts, key=lambda p: p.kl) for rule, pts in out.items()}


@dataclass(frozen=True)
class BudgetWinner:
    budget: float
    best: RulePoint | None  # the most tokens per call with KL ≤ budget (None: no such point)
    runner_up: RulePoint | None  # the best point of any other rule
    best_per_rule: dict[str, float]  # each rule's most tokens per call within the budget


def best_at_budgets(
    points: Sequence[RulePoint], budgets: Sequence[float] = KL_BUDGETS
) -> list[BudgetWinner]:
    """For each budget, the winning setting, the best other rule, and every rule's best."""
    out = []
    for budget in budgets:
        inside = [p for p in points if p.kl <= budget + 1e-12]
        per_rule: dict[str, RulePoint] = {}
        for p in inside:
            if p.rule not in per_rule or p.tokens_per_call > per_rule[p.rule].tokens_per_call:
                per_rule[p.rule] = p
        ranked = sorted(per_rule.values(), key=lambda p: -p.tokens_per_call)
        out.append(
            BudgetWinner(
                budget=budget,
                best=ranked[0] if ranked else None,
                runner_up=ranked[1] if len(ranked) > 1 else None,
                best_per_rule={r: p.tokens_per_call for r, p in per_rule.items()},
            )
        )
    return out


def comparison_markdown(winners: Sequence[BudgetWinner]) -> str:
    """The budgets table: the winner with its interval, the runner-up, and their gap."""
    lines = [
        "| emitted KL ≤ (nats/token) | most tokens per call | tokens/call (95% CI) | "
        "KL | best other rule | its tokens/call |",
        "|---:|---|---|---:|---|---:|",
    ]
    for w in winners:
        if w.best is None:
            lines.append(f"| {w.budget:g} | – | – | – | – | – |")
            continue
        b, r = w.best, w.runner_up
        ci = f"{b.tokens_per_call:.3f} [{b.tokens_per_call_lo:.3f}, {b.tokens_per_call_hi:.3f}]"
        other = (r.label, f"{r.tokens_per_call:.3f}") if r is not None else ("–", "–")
        lines.append(f"| {w.budget:g} | {b.label} | {ci} | {b.kl:.4f} | {other[0]} | {other[1]} |")
    return "\n".join(lines) + "\n"


# Emitted KLs this close are the same point (a lossless setting's KL is 0 up to float32 rounding).
_KL_TIE = 1e-6


def tokens_at_kl(points: Sequence[RulePoint], kl: float) -> float:
    """One rule's tokens per call at emitted KL kl, linear between its measured points in
    order of KL; NaN outside their range (no extrapolation)."""
    pts = sorted(points, key=lambda p: p.kl)
    if len(pts) == 1 and abs(pts[0].kl - kl) <= _KL_TIE:
        return pts[0].tokens_per_call
    for a, b in itertools.pairwise(pts):
        if a.kl - _KL_TIE <= kl <= b.kl + _KL_TIE:
            if b.kl - a.kl <= _KL_TIE:
                return max(a.tokens_per_call, b.tokens_per_call)
            w = (kl - a.kl) / (b.kl - a.kl)
            return a.tokens_per_call + w * (b.tokens_per_call - a.tokens_per_call)
    return math.nan


def matched_kl_markdown(points: Sequence[RulePoint], rule: str, against: str) -> str:
    """`rule`'s settings beside `against` at the same emitted KL (interpolated on its curve),
    with both rules' efficiencies: how the two compare at matched divergence."""
    groups = by_rule(points)
    mine, theirs = groups.get(rule, []), groups.get(against, [])
    lines = [
        f"| {rule} setting | KL | tokens/call | efficiency | {against} at that KL |",
        "|---|---:|---:|---:|---:|",
    ]
    for p in mine:
        other = tokens_at_kl(theirs, p.kl)
        shown = f"{other:.3f}" if math.isfinite(other) else "outside its range"
        lines.append(
            f"| {p.label} | {p.kl:.4f} | {p.tokens_per_call:.3f} | {p.efficiency:.3f} | {shown} |"
        )
    return "\n".join(lines) + "\n"


def efficiency_markdown(rows: Sequence[Mapping[str, Any]], rules: Sequence[str]) -> str:
    """Each setting of `rules` against the limit at its own mean KL: the measured acceptance
    rate (with its interval), the exact expected acceptance on the same positions, the limit
    there, and both as a share of the limit."""
    lines = [
        "| setting | KL | measured acceptance (95% CI) | expected | limit at its KL "
        "| expected ÷ limit | measured ÷ limit |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.get("rule") not in rules:
            continue
        limit = _num(r, "limit_acceptance")
        measured = _num(r, "acceptance_rate")
        ci = f"[{_num(r, 'acceptance_rate_lo'):.3f}, {_num(r, 'acceptance_rate_hi'):.3f}]"
        lines.append(
            f"| {r.get('label', r['rule'])} | {_num(r, 'scored_kl'):.4f} | {measured:.3f} {ci} "
            f"| {_num(r, 'expected_acceptance'):.4f} | {limit:.4f} | {_num(r, 'efficiency'):.4f} "
            f"| {measured / limit if limit > 0 else math.nan:.3f} |"
        )
    return "\n".join(lines) + "\n"
