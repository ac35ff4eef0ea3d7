"""A tree round's rows as the Decode page shows them: the row a token was drawn at as a
Position (p, q, the rule's h and residual for its first candidate), every candidate's p, q, h,
a(n) and coin there, and what a tree run's replay can promise.

A tree round's trace keeps one position per row of its tree (`RoundTrace.positions`: row 0
the root, row i + 1 after node i); emitted token j was drawn at row `TreeVerdict.path_rows[j]`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cactus_core.app.shared.positions import Position, display_indices, trace_row_position
from cactus_core.app.shared.rule_rows import compare_rules
from cactus_core.app.shared.transcript import num, show_text
from cactus_core.maths.rules import Rule
from cactus_core.maths.tree import TreeVerdict, children_of

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace, Trace


def tree_row_position(trace: Trace, rnd: RoundTrace, slot: int) -> Position:
    """The row emitted token `slot` of a tree round was drawn at, as a Position marking the
    row's first candidate (the one the rule judges with its own a(n)); ValueError when that
    row has no candidates or the trace kept no rows."""
    v = TreeVerdict.from_dict(rnd.tree)
    if not 0 <= slot < len(v.emitted):
        raise ValueError(f"slot {slot} is not an emitted slot of round {rnd.index}")
    row = v.path_rows[slot]
    pos = rnd.positions[row] if row < len(rnd.positions) else None
    if pos is None or pos.draft_id is None:
        raise ValueError(f"round {rnd.index}, slot {slot}: no candidates were judged there")
    note = (
        f"Round {rnd.index + 1}, depth {slot + 1} of a draft tree in the last decode run "
        f"(first candidate {show_text(trace.text(pos.draft_id))!r})."
    )
    return trace_row_position(pos, trace.text, pos.draft_id, note)


@dataclass
class TreeBars:
    """The bars of one tree row: labels, series (p, q, h, residual; q alone at a leaf), the
    emitted token's index among them (None when it is not shown), and the row's numbers."""

    labels: list[str]
    series: dict[str, list[float]]
    highlight: int | None
    kl_h_q: float | None = None
    kl_pi_q: float | None = None


def tree_bars(trace: Trace, rnd: RoundTrace, slot: int, judge: Rule, top: int) -> TreeBars | None:
    """The bars at the row emitted token `slot` was drawn at (`row_bars`), that token marked.
    None when the trace kept no rows (record_trace=False)."""
    v = TreeVerdict.from_dict(rnd.tree)
    row = v.path_rows[slot]
    if row >= len(rnd.positions):
        return None
    return row_bars(rnd.positions[row], trace.text, judge, top, v.emitted[slot])


def row_bars(
    pos: PositionTrace, text: Callable[[int], str], judge: Rule, top: int, token: int
) -> TreeBars:
    """One tree row's bars: p, q and the first candidate's h and residual under `judge` at a
    row with candidates, q alone at a leaf (where a bonus is drawn from q); `token` marked."""
    if pos.draft_id is None:
        labels = [text(i) for i in pos.q_ids[:top]]
        hi = pos.q_ids.index(token) if token in pos.q_ids[:top] else None
        return TreeBars(labels, {"q": list(pos.q_probs[:top])}, hi)
    position = trace_row_position(pos, text, pos.draft_id, "")
    rule_row = compare_rules(position, [judge])[0]
    shown = [i for i in display_indices(position, top) if position.labels[i] != "(rest)"]
    ids = list(dict.fromkeys([*pos.replay_q_ids, *pos.replay_p_ids]))
    at = ids.index(token) if token in ids else None
    series = {
        "p": position.p[shown].tolist(),
        "q": position.q[shown].tolist(),
        "h": rule_row.h[shown].tolist(),
        "residual": rule_row.residual[shown].tolist(),
    }
    hi = shown.index(at) if at in shown else None
    return TreeBars([position.labels[i] for i in shown], series, hi, pos.kl_h_q, pos.kl_pi_q)


def candidate_lines(trace: Trace, v: TreeVerdict, row: int) -> list[str]:
    """One line per candidate of a row, in the order tried: p, q, what it was judged against,
    a(n), its coin and its fate."""
    lines = []
    for rank, i in enumerate(children_of(v.parents)[row]):
        token = show_text(trace.text(v.tokens[i]))
        if v.fates[i] == "unreached":
            lines.append(f"{rank + 1}. {token!r}: p = {num(v.p[i])}, q = {num(v.q[i])}; not tried")
            continue
        against = "h" if rank == 0 else "the residual"
        lines.append(
            f"{rank + 1}. {token!r}: p = {num(v.p[i])}, q = {num(v.q[i])}, {against} = "
            f"{num(v.h[i])}, a(n) = {num(v.accept_probs[i])}, coin u = {num(v.coins[i])}: "
            f"{v.fates[i]}"
        )
    return lines


def tree_replay_note(trace: Trace) -> str | None:
    """What a replay of a run with tree rounds does and when it is exact; None for a chain run."""
    if not any(r.tree is not None for r in trace.rounds):
        return None
    return (
        "Tree rounds replay node by node: the same tree, the same q at every node and the same "
        "coins, walked under the other rule. The replay is exact when the trace's rows hold all "
        "the mass (top-k or a top-p nucleus within the trace's kept rows). Otherwise a node's "
        "first candidate is judged exactly for rules whose a(n) needs only p_n and q_n, while "
        "later candidates and the last token read residuals of the cut rows and are approximate."
    )
