"""Why drafts get rejected: every rejected draft of a run (finished, or so far), the smallest
Cactus delta that would have accepted it for sure, the share rescued as delta grows, and where
the rejected drafts sat in q. Shared by the Decode and Step through pages."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cactus_core.app.shared.transcript import show_text
from cactus_core.maths.rescue import NEVER, rescue_delta, rescued_share
from cactus_core.maths.rules import DEFAULT_RULE, RULES
from cactus_core.maths.tree_verdict import TreeVerdict, node_depths

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace

# Where a rejected draft sat in q: rank bins, then a bin for the ones outside q's support
# altogether (cut by top-k / top-p).
RANK_BINS: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 10), (11, 20))
Q_ZERO = "q_n = 0"
CURVE_POINTS = 60


def slider_top() -> float:
    """The top of the default rule's delta slider: the deltas a visitor can set. A rescue that
    needs more is said to, never quoted in nats no widget offers."""
    return float(RULES[DEFAULT_RULE].swept().ui[1])


@dataclass(frozen=True)
class RejectedDraft:
    round_index: int
    slot: int
    token: str
    p_n: float
    q_n: float
    q_rank: int | None  # 1 = q's top token; None when q_n = 0
    delta: float  # the smallest rescuing Cactus delta; NEVER (inf) when q_n = 0
    rank_is_bound: bool = False  # the draft sat below every kept entry: its rank is at least this

    @property
    def delta_text(self) -> str:
        if self.delta == NEVER:
            return "never"
        top = slider_top()
        return f"> {top:g} (past the slider)" if self.delta > top else f"{self.delta:.3g}"


def q_rank(pos: PositionTrace) -> int | None:
    """The drafted token's rank in q (1 = q's top token, ties share the better rank); None when
    q_n = 0. The trace keeps q's top-M entries plus the drafted one, so a draft below them gets
    M + 1, which still falls in the last bin."""
    if not pos.q_n:
        return None
    return 1 + sum(v > pos.q_n for v in pos.replay_q_probs)


def rejected_drafts(
    rounds: Sequence[RoundTrace], text: Callable[[int], str] | None = None
) -> list[RejectedDraft]:
    """The rejected draft of every round that had one, in order; in a tree round, every
    candidate the walk rejected."""
    out = []
    for rnd in rounds:
        if rnd.tree is not None:
            out += _rejected_in_tree(rnd, text)
            continue
        if not rnd.k or rnd.num_accepted >= rnd.k or len(rnd.positions) <= rnd.num_accepted:
            continue
        m = rnd.num_accepted
        pos = rnd.positions[m]
        token = text(rnd.draft_ids[m]) if text is not None else rnd.draft_text[m]
        rank = q_rank(pos)
        # the drafted token is appended to the kept rows when it is not among them
        bound = rank is not None and rank == len(pos.replay_q_ids) > RANK_BINS[-1][1]
        out.append(
            RejectedDraft(
                rnd.index, m, token, pos.p_n, pos.q_n, rank, rescue_delta(pos.q_n, pos.p_n), bound
            )
        )
    return out


def _rejected_in_tree(rnd: RoundTrace, text: Callable[[int], str] | None) -> list[RejectedDraft]:
    """A tree round's rejected candidates: p and q at each from the walk's verdict, its rank
    in q from its parent row's kept q (when the trace kept rows), slot = its depth − 1. The
    rescuing delta is the one that accepts it as its row's first candidate (a later one is
    judged against the residual of those before it)."""
    v = TreeVerdict.from_dict(rnd.tree)
    depths = node_depths(v.parents)
    out = []
    for i, fate in enumerate(v.fates):
        if fate != "rejected":
            continue
        q_n, p_n = v.q[i], v.p[i]
        row = v.parents[i] + 1
        kept = rnd.positions[row].replay_q_probs if row < len(rnd.positions) else []
        rank = 1 + sum(x > q_n for x in kept) if q_n and kept else None
        token = text(v.tokens[i]) if text is not None else str(v.tokens[i])
        out.append(
            RejectedDraft(rnd.index, depths[i] - 1, token, p_n, q_n, rank, rescue_delta(q_n, p_n))
        )
    return out


def q_zero_caption(drafts: Sequence[RejectedDraft]) -> str | None:
    """How many rejected drafts no delta can rescue (q_n = 0), said under a finished run."""
    if not drafts:
        return None
    zero = sum(d.q_n == 0 for d in drafts)
    return (
        f"{zero} of {len(drafts)} rejected drafts sat outside q's support (q_n = 0, cut by "
        "top-k / top-p): no delta can rescue those."
    )


def rescue_grid() -> list[float]:
    """The deltas of the rescue curve, log-spaced over the default rule's delta slider: from a
    thousandth of its top to its top, so the curve ends at what the slider can buy."""
    high = slider_top()
    low = high / 1000
    step = (math.log(high) - math.log(low)) / (CURVE_POINTS - 1)
    return [math.exp(math.log(low) + i * step) for i in range(CURVE_POINTS)]


def rescue_curve(drafts: Sequence[RejectedDraft]) -> tuple[list[float], list[float]]:
    """(deltas, share of the rejected drafts rescued at each)."""
    grid = rescue_grid()
    return grid, rescued_share([d.delta for d in drafts], grid)


def rank_label(rank: int | None, q_n: float) -> str:
    if q_n == 0 or rank is None:
        return Q_ZERO
    for lo, hi in RANK_BINS:
        if lo <= rank <= hi:
            return str(lo) if lo == hi else f"{lo}–{hi}"
    return f"> {RANK_BINS[-1][1]}"


def rank_histogram(drafts: Sequence[RejectedDraft]) -> tuple[list[str], list[int]]:
    """Counts of rejected drafts per bin of their rank in q, every bin listed."""
    labels = [str(lo) if lo == hi else f"{lo}–{hi}" for lo, hi in RANK_BINS]
    labels += [f"> {RANK_BINS[-1][1]}", Q_ZERO]
    counts = dict.fromkeys(labels, 0)
    for d in drafts:
        counts[rank_label(d.q_rank, d.q_n)] += 1
    return labels, list(counts.values())


def rescue_table(drafts: Sequence[RejectedDraft]) -> list[dict[str, object]]:
    return [
        {
            "round": d.round_index + 1,
            "slot": d.slot + 1,  # the draft's place in its round
            "drafted token": show_text(d.token),
            "p_n": d.p_n,
            "q_n": d.q_n,
            "rank in q": "–"
            if d.q_rank is None
            else f"{'≥ ' if d.rank_is_bound else ''}{d.q_rank}",
            "smallest rescuing delta": d.delta_text,
        }
        for d in drafts
    ]


def rescue_summary(drafts: Sequence[RejectedDraft]) -> str:
    """One sentence: how many were rejected, how many no delta rescues, and how many of the
    others the delta slider rescues (with the median delta when it is on the slider)."""
    if not drafts:
        return "No draft was rejected."
    never = sum(d.delta == NEVER for d in drafts)
    finite = sorted(d.delta for d in drafts if d.delta != NEVER)
    out = f"{len(drafts)} draft(s) rejected; {never} had q_n = 0, which no delta rescues."
    if finite:
        top = slider_top()
        within = sum(x <= top for x in finite)
        out += f" Of the other {len(finite)}, {within} pass for sure at some delta ≤ {top:g}"
        median = statistics.median(finite)
        if median <= top:
            out += f", half of them by delta = {median:.3g}."
        else:
            out += "; the rest need more than the slider offers."
    return out
