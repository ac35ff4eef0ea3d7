"""The token inspector: one row of a round's tree as the Decode page opens it, whatever the
draft's shape.

A row with candidates (a chain's slot, a tree's node on the walk) shows p, q and, for its first
candidate (the one the rule judges with its own a(n); later ones are judged against residuals),
the rule's h and residual, from the trace's kept rows; every candidate's p, q, what it was
judged against, a(n), coin and fate; and, for the token marked, a(n) against its coin and both
KLs. A row without candidates (where a bonus was drawn, or a verifier-only step) shows q, the
distribution its token was drawn from. Emitted token j of a round was drawn at row
`verdict.path_rows[j]`; a drafted node is opened at the row it was judged at.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cactus_core.app.shared.positions import display_indices, trace_row_position
from cactus_core.app.shared.round_view import judging_rule, node_pq, row_place
from cactus_core.app.shared.rule_rows import compare_rules
from cactus_core.app.shared.transcript import FATE_LABELS, node_fates, num, show_text
from cactus_core.app.shared.tree_figure import TreeFrame
from cactus_core.engine.decoding.replay import row_optimum
from cactus_core.engine.decoding.trace_io import vocab_size
from cactus_core.maths.rules import Rule

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace, Trace


@dataclass
class RowBars:
    """The bars of one row: labels, series (p, q, h, residual; q alone without candidates),
    the marked token's index among them (None when it is not shown), and the row's KLs."""

    labels: list[str]
    series: dict[str, list[float]]
    highlight: int | None
    kl_h_q: float | None = None
    kl_pi_q: float | None = None
    lumped: bool = False  # the kept rows leave mass out, lumped as "(rest)"


def row_bars(
    pos: PositionTrace, text: Callable[[int], str], judge: Rule, top: int, token: int
) -> RowBars:
    """One row's bars: p, q and the first candidate's h and residual under `judge` at a row
    with candidates, q alone at one without (where a bonus is drawn from q); `token` marked."""
    if pos.draft_id is None:
        labels = [text(i) for i in pos.q_ids[:top]]
        hi = pos.q_ids.index(token) if token in pos.q_ids[:top] else None
        return RowBars(labels, {"q": list(pos.q_probs[:top])}, hi)
    position = trace_row_position(pos, text, pos.draft_id, "")
    rule_row = compare_rules(position, [judge])[0]
    shown = [i for i in display_indices(position, top) if position.labels[i] != "(rest)"]
    ids = list(dict.fromkeys([*pos.replay_q_ids, *pos.replay_p_ids]))
    at = ids.index(token) if token in ids else None
    if at is not None and at not in shown:
        shown.append(at)  # the marked token is always in the picture
    series = {
        "p": position.p[shown].tolist(),
        "q": position.q[shown].tolist(),
        "h": rule_row.h[shown].tolist(),
        "residual": rule_row.residual[shown].tolist(),
    }
    hi = shown.index(at) if at is not None else None
    lumped = position.labels[-1] == "(rest)"
    labels = [position.labels[i] for i in shown]
    return RowBars(labels, series, hi, pos.kl_h_q, pos.kl_pi_q, lumped)


def candidate_lines(rnd: RoundTrace, row: int) -> list[str]:
    """One line per candidate of a row, in the order tried: p, q, what it was judged against,
    a(n), its coin and its fate."""
    v, fates = rnd.verdict, node_fates(rnd)
    lines = []
    for rank, i in enumerate(v.children[row]):
        token = show_text(rnd.draft_text[i])
        p_n, q_n = node_pq(rnd, i)
        pq = f"p = {_num(p_n)}, q = {_num(q_n)}"
        if fates[i] in ("dropped", "not tried"):
            lines.append(f"{rank + 1}. {token!r}: {pq}; {fates[i]}")
            continue
        if math.isnan(v.h[i]):  # traversal verification (`block` on a tree): a path weight
            lines.append(
                f"{rank + 1}. {token!r}: {pq}, traversal's weight w = {num(v.accept_probs[i])}, "
                f"coin u = {num(v.coins[i])}: {fates[i]}"
            )
            continue
        against = "h" if rank == 0 else "the residual"
        lines.append(
            f"{rank + 1}. {token!r}: {pq}, {against} = {num(v.h[i])}, a(n) = "
            f"{num(v.accept_probs[i])}, coin u = {num(v.coins[i])}: {fates[i]}"
        )
    return lines


def optimum_lines(rnd: RoundTrace, row: int, vocab: int) -> list[str]:
    """The row's acceptance against the best any lossless verifier can do with its candidates
    (`replay.row_optimum`), as one note; none where it is not computed."""
    best = row_optimum(rnd, row, vocab)
    if best is None:
        return []
    rows = "" if best.exact else " (from the trace's top rows of p and q, the rest smeared)"
    return [
        f"With {best.candidates} candidate(s) drawn here, recursive rejection sampling accepts "
        f"one with chance {num(best.rrs)} over the draws; the most any lossless verifier can "
        f"reach is {num(best.optimum)} (the optimal-transport bound){rows}."
    ]


def _num(x: float | None) -> str:
    return "–" if x is None else num(x)


@dataclass
class Inspection:
    """What the token inspector shows for one token of a round."""

    title: str
    labels: list[str]
    series: dict[str, list[float]]
    highlight: int | None
    accept_prob: float | None = None
    coin: float | None = None
    kl_h_q: float | None = None
    kl_pi_q: float | None = None
    p_n: float | None = None
    q_n: float | None = None
    h_n: float | None = None
    notes: list[str] = field(default_factory=list)
    mark: str = "drafted n"  # what the highlighted bar is
    frame: TreeFrame | None = None  # a round whose tree branches: its picture


def inspect_token(
    trace: Trace, round_index: int, row: int, node: int | None = None, top: int = 12
) -> Inspection:
    """The inspector at row `row` of round `round_index`, marking drafted node `node`, or,
    without one, the token emitted at that row (module docstring)."""
    rnd = trace.rounds[round_index]
    v = rnd.verdict
    if not 0 <= row <= v.size:
        raise ValueError(f"row {row} is not a row of round {round_index} ({v.size + 1} rows)")
    if node is not None and not (0 <= node < v.size and rnd.row_of(node) == row):
        raise ValueError(f"node {node} of round {round_index} was not judged at row {row}")
    if not v.children[row]:
        return _inspect_leaf(trace, rnd, row, top)
    return _inspect_row(trace, rnd, row, node, top)


def _emitted_at(rnd: RoundTrace, row: int) -> int | None:
    """Which emitted slot was drawn at this row, if one was."""
    rows = rnd.verdict.path_rows
    return rows.index(row) if row in rows and rows.index(row) < len(rnd.emitted_ids) else None


def _inspect_leaf(trace: Trace, rnd: RoundTrace, row: int, top: int) -> Inspection:
    slot = _emitted_at(rnd, row)
    token = rnd.next_id if slot is None else rnd.emitted_ids[slot]
    fate = rnd.verdict.last if slot is None else rnd.emitted_fates[slot]
    title = f"Round {rnd.index + 1}: {show_text(trace.text(token))!r}, {FATE_LABELS[fate]}"
    pos = rnd.positions[row] if row < len(rnd.positions) else None
    if pos is None or not pos.q_ids:
        return Inspection(title, [], {}, None, notes=["This trace kept no rows here."])
    bars = row_bars(pos, trace.text, judging_rule(trace), top, token)
    return Inspection(
        title,
        bars.labels,
        bars.series,
        bars.highlight,
        notes=["No rule applies to this token: it is drawn from q itself."],
        mark="emitted",
        frame=_frame(trace, rnd),
    )


def _frame(trace: Trace, rnd: RoundTrace) -> TreeFrame | None:
    """The whole round's tree picture, for a round whose tree branches."""
    if not rnd.branching:
        return None
    prev = trace.rounds[rnd.index - 1].emitted_ids[-1] if rnd.index > 0 else None
    root = trace.text(prev) if prev is not None else "(prompt)"
    return TreeFrame(rnd.verdict, list(rnd.draft_text), root, trace.text(rnd.next_id))


def _inspect_row(trace: Trace, rnd: RoundTrace, row: int, node: int | None, top: int) -> Inspection:
    v, fates = rnd.verdict, node_fates(rnd)
    kids = v.children[row]
    slot = _emitted_at(rnd, row)
    if node is None and slot is not None and slot < len(v.path):
        node = v.path[slot]  # the accepted candidate: the token emitted here is a draft
    if node is not None:
        token, fate, mark = v.tokens[node], fates[node], "drafted n"
    elif slot is not None:  # the recovered token drawn after every candidate here failed
        token, fate, mark = rnd.emitted_ids[slot], rnd.emitted_fates[slot], "emitted"
    else:  # a row the walk never stood on: its first candidate
        node = kids[0]
        token, fate, mark = v.tokens[node], fates[node], "drafted n"
    title = (
        f"Round {rnd.index + 1}, {row_place(rnd, row)}: {show_text(trace.text(token))!r}, "
        + FATE_LABELS[fate]
    )
    notes = _row_notes(trace, rnd, row, node, slot)
    pos = rnd.positions[row] if row < len(rnd.positions) else None
    out = Inspection(title, [], {}, None, notes=notes, mark=mark, frame=_frame(trace, rnd))
    if pos is None or pos.draft_id is None:
        notes.append("This trace kept no rows here, so no bars.")
        return out
    bars = row_bars(pos, trace.text, judging_rule(trace), top, token)
    out.labels, out.series, out.highlight = bars.labels, bars.series, bars.highlight
    out.kl_pi_q = bars.kl_pi_q
    if bars.lumped:
        notes.append(
            "Bars and the residual use the trace's top rows of p and q (the rest of the "
            "vocabulary lumped); a(n), u and both KLs are the decoder's exact values."
        )
    if node is not None:
        out.p_n, out.q_n = node_pq(rnd, node)
        out.accept_prob, out.coin = v.accept_probs[node], v.coins[node]
        first = node == kids[0]
        out.h_n = pos.h_n if first else (None if math.isnan(v.h[node]) else v.h[node])
        out.kl_h_q = bars.kl_h_q if first else None
    return out


def _row_notes(
    trace: Trace, rnd: RoundTrace, row: int, node: int | None, slot: int | None
) -> list[str]:
    v, fates = rnd.verdict, node_fates(rnd)
    notes: list[str] = []
    last_row = slot is not None and slot == len(v.path)
    if last_row and v.last == "recovered" and slot < len(rnd.emitted_ids):
        where = "every candidate here was" if len(v.children[row]) > 1 else "the draft was"
        notes.append(
            f"Rejected: {where} rejected, so the round ended with "
            f"{show_text(rnd.emitted_text[slot])!r} drawn from the residual (coin u' = "
            f"{num(v.emit_coin)})."
        )
    if node is not None and fates[node] == "dropped":
        notes.append("Drafted after a rejection in this round: never judged, never emitted.")
    if node is not None and fates[node] == "not tried":
        notes.append("The walk took another branch: this candidate was never judged.")
    if node is not None and v.q[node] == 0.0:
        notes.append(
            "q_n = 0: the verifier's truncation (top-k / top-p) cut this token, so no delta "
            "can accept it."
        )
    if len(v.children[row]) > 1:
        notes.append("The candidates here, in the order tried:")
        notes += candidate_lines(rnd, row)
    if rnd.branching:
        notes += optimum_lines(rnd, row, vocab_size(trace.meta))
    if float(trace.meta["temperature"]) == 0.0:
        notes.append("T = 0: p and q are one-hot and every rule is exact-match verification.")
    return notes
