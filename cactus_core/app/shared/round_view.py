"""A decoded round as the pages show it, whatever its draft's shape: the live counters, a
round's label, its table of drafted tokens, each node's fate in words, and the rows a person
can open (`RowChoice`: a round and a row of its tree, the one index of every view).

A round's verdict is a tree (`RoundTrace.verdict`: a chain is a one-child tree, a verifier-only
step a tree with no nodes); only the wording follows `RoundTrace.branching`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cactus_core.app.shared.metrics import prob_text
from cactus_core.app.shared.positions import Position, trace_row_position
from cactus_core.app.shared.tables import MISSING, cell
from cactus_core.app.shared.transcript import node_fates, show_text
from cactus_core.maths.rules import Rule, lossless_rule

if TYPE_CHECKING:
    from cactus_core.engine.decoding.generation import GenerationOutput
    from cactus_core.engine.decoding.trace import RoundTrace, Trace


@dataclass(frozen=True)
class LiveStats:
    tokens: int
    tokens_per_call: float
    acceptance_rate: float | None
    tokens_per_s: float
    emitted_kl: float | None  # None for a rule whose pi a decode does not give (overrides_sps)
    verifier_calls: int = 0


def live_stats(rounds: list[RoundTrace], elapsed_s: float, kl_exact: bool = True) -> LiveStats:
    """The counters while rounds stream in, with the same definitions as GenerationStats
    (kl_exact False: a rule that overrides sps, whose KL is not measured)."""
    tokens = sum(len(r.emitted_ids) for r in rounds)
    calls = len(rounds)
    decided = sum(r.verdict.decided for r in rounds)  # every candidate the walk tried
    accepted = sum(r.num_accepted for r in rounds)  # 0 for a verifier-only step
    kl_sum = 0.0
    for r in rounds:
        for pos in r.decided_positions():
            if pos.kl_pi_q is not None:
                kl_sum += pos.kl_pi_q
    return LiveStats(
        tokens=tokens,
        tokens_per_call=tokens / calls if calls else 0.0,
        acceptance_rate=accepted / decided if decided else None,
        tokens_per_s=tokens / elapsed_s if elapsed_s > 0 else 0.0,
        emitted_kl=(kl_sum / tokens if tokens else 0.0) if kl_exact else None,
        verifier_calls=calls,
    )


def final_stats(output: GenerationOutput) -> LiveStats:
    """The finished run's counters, in the live counters' shape."""
    s = output.stats
    return LiveStats(
        tokens=s.new_tokens,
        tokens_per_call=s.tokens_per_call,
        acceptance_rate=s.acceptance_rate,
        tokens_per_s=s.tokens_per_s,
        emitted_kl=s.mean_emitted_kl,
        verifier_calls=s.verifier_calls,
    )


def round_label(rnd: RoundTrace, flipped: bool) -> str:
    """A round's expander label: how many drafts passed and how it ended."""
    m = rnd.num_accepted
    if rnd.sampled:
        accepted = "verifier only"
    elif rnd.branching:
        accepted = f"{m} accepted in a {rnd.k}-node tree"
    else:
        accepted = f"{m}/{rnd.k} accepted"
    label = f"Round {rnd.index + 1} · {accepted} · +{len(rnd.emitted_ids)} ({rnd.verdict.last})"
    return label + (" · flips under replay" if flipped else "")


def timeline(rounds: list[RoundTrace]) -> tuple[list[int], list[int], list[bool]]:
    """Accepted drafts, drafted tokens and whether a bonus was drawn, per round."""
    return (
        [r.num_accepted for r in rounds],
        [r.k for r in rounds],
        [r.verdict.last == "bonus" for r in rounds],
    )


def node_pq(rnd: RoundTrace, node: int) -> tuple[float | None, float | None]:
    """(p_n, q_n) at a node: the walk's own values, else (where the lazy head scored q only up
    to the decisions) the recorded row's, which holds its first candidate's."""
    v = rnd.verdict
    p, q = v.p[node], v.q[node]
    row = rnd.row_of(node)
    pos = rnd.positions[row] if row < len(rnd.positions) else None
    if pos is not None and pos.draft_id == v.tokens[node]:
        p = p if not math.isnan(p) else (pos.p_n if pos.p_n is not None else math.nan)
        q = q if not math.isnan(q) else (pos.q_n if pos.q_n is not None else math.nan)
    return (None if math.isnan(p) else p), (None if math.isnan(q) else q)


def round_table(rnd: RoundTrace) -> list[dict[str, object]]:
    """One row per drafted node of a round, for st.dataframe (h_n is in the inspector); a
    tree's rows say where each node hangs."""
    rows = []
    fates = node_fates(rnd)
    v = rnd.verdict
    for i in range(rnd.k):
        p_n, q_n = node_pq(rnd, i)
        row: dict[str, object] = {"drafted": show_text(rnd.draft_text[i]), "fate": fates[i]}
        if rnd.branching:
            parent = v.parents[i]
            row["after"] = "the root" if parent < 0 else show_text(rnd.draft_text[parent])
        row |= {
            "p_n": MISSING if p_n is None else prob_text(p_n),
            "q_n": MISSING if q_n is None else prob_text(q_n),
            "a(n)": cell(rnd.accept_probs[i]),  # "–" for a draft never judged
            "u": cell(rnd.accept_coins[i]),
        }
        rows.append(row)
    return rows


def row_place(rnd: RoundTrace, row: int) -> str:
    """Where a row sits, in words: a chain's slot, a tree's depth."""
    if rnd.branching:
        depth = 0 if row == 0 else rnd.verdict.depths[row - 1]
        return f"depth {depth + 1}"
    return f"slot {row + 1}"


def judging_rule(trace: Trace) -> Rule:
    """The rule the decoder judged with: exact match (the lossless rule) at T = 0, else the
    trace's rule."""
    if float(trace.meta["temperature"]) == 0.0:
        return lossless_rule()
    return trace.rule


def trace_position(trace: Trace, round_index: int, row: int) -> Position:
    """A row of a round with candidates, as a Position over a reduced vocabulary
    (`positions.trace_row_position`) marking its first candidate (the one the rule judges
    with its own a(n)); ValueError for a row without candidates or without recorded rows."""
    rnd = trace.rounds[round_index]
    kids = rnd.verdict.children
    if not 0 <= row < len(kids) or not kids[row]:
        raise ValueError(f"row {row} of round {round_index} has no drafted token to judge")
    pos = rnd.positions[row] if row < len(rnd.positions) else None
    if pos is None or pos.draft_id is None:
        raise ValueError(f"round {round_index}, row {row}: the trace kept no rows there")
    first = kids[row][0]
    note = (
        f"Round {round_index + 1}, {row_place(rnd, row)} of the last decode run (drafted "
        f"{show_text(rnd.draft_text[first])!r}, {node_fates(rnd)[first]})."
    )
    return trace_row_position(pos, trace.text, pos.draft_id, note)


@dataclass(frozen=True)
class RowChoice:
    """A row of a decoded round that a person can open (Playground, inspector)."""

    title: str
    round_index: int
    row: int

    def position(self, trace: Trace) -> Position:
        return trace_position(trace, self.round_index, self.row)


def decided_rows(trace: Trace) -> list[RowChoice]:
    """Every row where the rule decided, in every round, for a picker: a chain's judged drafts,
    and a tree's rows on the walk, the one whose every candidate was rejected included."""
    out = []
    for rnd in trace.rounds:
        if not rnd.positions:
            continue
        kids, fates = rnd.verdict.children, node_fates(rnd)
        for row in rnd.verdict.decided_rows:
            tried = [i for i in kids[row] if fates[i] in ("accepted", "rejected")]
            what = ", ".join(f"{show_text(rnd.draft_text[i])!r} ({fates[i]})" for i in tried)
            title = f"round {rnd.index + 1}, {row_place(rnd, row)}: {what}"
            out.append(RowChoice(title, rnd.index, row))
    return out
