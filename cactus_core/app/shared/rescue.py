"""Why drafts get rejected: every rejected draft of a run (finished, or so far), the smallest
Cactus delta that would have accepted it for sure, the share rescued as delta grows, and where
the rejected drafts sat in q, and their two charts. Shared by the Decode and Step through
pages."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from cactus_core.app.shared import figures
from cactus_core.app.shared.round_view import node_pq, row_place
from cactus_core.app.shared.transcript import show_text
from cactus_core.maths.rescue import NEVER, rescue_delta, rescued_share
from cactus_core.maths.rules import DEFAULT_RULE, RULES

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import RoundTrace

# The look of the other figures (figures.py, which also makes plotly_white the default).
_LAYOUT = {"margin": {"l": 50, "r": 20, "t": 50, "b": 40}}
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
    row: int  # the row of its round's tree it was judged at (a chain's slot)
    token: str
    p_n: float
    q_n: float
    q_rank: int | None  # 1 = q's top token; None when q_n = 0
    delta: float  # the smallest rescuing Cactus delta; NEVER (inf) when q_n = 0
    rank_is_bound: bool = False  # the draft sat below every kept entry: its rank is at least this
    place: str = ""  # where in its round, in words (a chain's slot, a tree's depth)

    @property
    def delta_text(self) -> str:
        if self.delta == NEVER:
            return "never"
        top = slider_top()
        return f"> {top:g} (past the slider)" if self.delta > top else f"{self.delta:.3g}"


def q_rank(kept_q: Sequence[float], q_n: float) -> int | None:
    """The drafted token's rank in q (1 = q's top token, ties share the better rank) among a
    row's kept q entries; None when q_n = 0. The trace keeps q's top-M entries plus every
    candidate, so a draft below them gets M + 1, which still falls in the last bin."""
    if not q_n:
        return None
    return 1 + sum(v > q_n for v in kept_q)


def rejected_drafts(
    rounds: Sequence[RoundTrace],
    text: Callable[[int], str] | None = None,
    last_decided: Collection[int] | None = None,
) -> list[RejectedDraft]:
    """Every rejected draft, in order: a chain's rejected draft, every candidate a tree's walk
    rejected. The rescuing delta is the one that accepts it as its row's first candidate (a
    later one is judged against the residual of those before it); its rank in q comes from its
    row's kept q, when the trace kept rows. `last_decided`: of the last round, only these
    nodes (the decisions a page has shown so far); None: all of them."""
    out = []
    for n, rnd in enumerate(rounds):
        v = rnd.verdict
        for i, fate in enumerate(v.fates):
            if fate != "rejected":
                continue
            if last_decided is not None and n == len(rounds) - 1 and i not in last_decided:
                continue
            p_n, q_n = node_pq(rnd, i)
            if p_n is None or q_n is None:
                continue
            row = rnd.row_of(i)
            kept = rnd.positions[row].replay_q_probs if row < len(rnd.positions) else []
            rank = q_rank(kept, q_n) if kept else None
            # the drafted token is appended to the kept rows when it is not among them
            bound = rank is not None and rank == len(kept) > RANK_BINS[-1][1]
            token = text(v.tokens[i]) if text is not None else rnd.draft_text[i]
            delta = rescue_delta(q_n, p_n)
            place = row_place(rnd, row)
            out.append(RejectedDraft(rnd.index, row, token, p_n, q_n, rank, delta, bound, place))
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
            "where": d.place or f"row {d.row + 1}",
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


def rescue_curve_figure(deltas: Sequence[float], shares: Sequence[float]) -> go.Figure:
    """The share of the rejected drafts Cactus would have accepted for sure, against delta."""
    if len(deltas) != len(shares):
        raise ValueError("deltas and shares differ in length")
    fig = go.Figure()
    fig.add_scatter(
        x=list(deltas),
        y=list(shares),
        mode="lines",
        line={"shape": "hv", "width": 3, "color": figures.SERIES_COLOURS["h"]},
        name="rescued",
        hovertemplate="delta = %{x:.3g}: %{y:.0%} rescued<extra></extra>",
    )
    fig.update_layout(
        _LAYOUT,
        title="Rescue curve: share accepted for sure",
        xaxis_title="Cactus delta (nats, log scale)",
        yaxis_title="share rescued",
        height=300,
    )
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%")
    fig.update_xaxes(type="log")
    return fig


def rank_histogram_figure(labels: Sequence[str], counts: Sequence[int]) -> go.Figure:
    """Where the rejected drafts sat in q: counts per rank bin, q_n = 0 last."""
    if len(labels) != len(counts):
        raise ValueError("labels and counts differ in length")
    colours = [figures.FATE_COLOURS["rejected"]] * (len(labels) - 1) + ["#999999"]
    fig = go.Figure()
    fig.add_bar(x=list(labels), y=list(counts), marker_color=colours, name="rejected drafts")
    fig.update_layout(
        _LAYOUT,
        title="Where the rejected drafts sat in q (rank)",
        xaxis_title="rank of the draft in q",
        yaxis_title="rejected drafts",
        height=300,
        showlegend=False,
    )
    fig.update_xaxes(type="category")
    return fig
