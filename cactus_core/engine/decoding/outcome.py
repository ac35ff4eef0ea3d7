"""A round as a value: what it proposed, what the verifier said, and what the rule decided.

`ChainRounds.run` (`chain_round`) and `run_tree_round` (`tree_round`) both return a
`RoundOutcome`; the decoder commits its emitted tokens, counts it (`count_round`), hands it to
the recording (`recording.record_round`) and writes its trace (`round_trace`), whatever shape
the draft had.

Every round is a tree: a chain of k drafts is the tree whose node i is draft i, the one child
of node i − 1 (node 0 a child of the root). Rows follow the tree's layout: row 0 is p or q
before the first drafted token (at the root), row i + 1 after node i, so a chain's rows are its
positions 0..k. A node's verdict (`maths.tree_verdict.TreeVerdict`) holds its fate
("accepted", "rejected", "unreached": a chain's drafts after a rejection), a(n), its coin, p and
q at its token, the accepted path and the emitted tokens (the path's, then the recovered or
bonus token).

Shapes: B = sequences (a chain round: the batch; a tree round: one), R = rows with p, J = rows
the verifier scored, V = vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from cactus_core.engine.decoding.generation import GenerationStats
from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace
from cactus_core.maths.tree import TreeVerdict, node_depths

QRest = Callable[[], torch.Tensor]


@dataclass
class RoundOutcome:
    """One round of B sequences, whatever its proposal's shape (a tree round has one)."""

    verdicts: list[TreeVerdict]  # [B] every node's verdict, the path and the emitted tokens
    p: torch.Tensor  # [B, R, V] p at the rows with children (a chain: R = k; a tree: N + 1)
    q: torch.Tensor  # [B, J, V] q at the rows the verifier scored
    logprobs: list[list[float]]  # [B] the verifier's T = 1 log q of each emitted token
    draft_calls: int  # draft forwards per sequence
    draft_s: float  # proposing, and the draft reading what was accepted
    verify_s: float  # the verify pass, the rule's decisions, cutting the caches back
    # q at the rows the lazy head left unscored (a chain's rows past every decision),
    # [B, k + 1 − J, V], computed when called: by the recording of a full trace, on its thread
    q_rest: QRest | None = None

    def full_q(self) -> torch.Tensor:
        """q at every row the verifier's pass covered [B, k + 1, V] (a tree's: [B, J, V]): the
        scored rows, then those the lazy head left, computed here."""
        return self.q if self.q_rest is None else torch.cat([self.q, self.q_rest()], 1)

    @property
    def verdict(self) -> TreeVerdict:
        """The verdict of a one-sequence round."""
        (only,) = self.verdicts
        return only

    @property
    def emitted(self) -> list[list[int]]:
        """[B] the accepted drafts, then the recovered or bonus token."""
        return [list(v.emitted) for v in self.verdicts]

    def decided_rows(self, b: int) -> list[int]:
        """Sequence b's rows on the walk where the rule decided (a chain: positions 0..d − 1,
        d the drafts that got a decision), root first."""
        return self.verdicts[b].decided_rows

    def path_rows(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """p and q [d, V] at sequence b's decided rows: what the decoder's probe sees."""
        rows = self.decided_rows(b)
        return self.p[b, rows], self.q[b, rows]


def count_round(st: GenerationStats, out: RoundOutcome, b: int) -> None:
    """Add sequence b's draft counts (`_commit` adds the emitted ones), in vLLM's definitions
    (`generation.PositionCounts`): every node was drafted, the judged ones got a decision, the
    path was accepted; depth j + 1 was reached when the walk stood on a row with children at
    depth j. The histogram and the per-depth counts span the tree's depth (a chain's k)."""
    v = out.verdicts[b]
    m = len(v.path)
    depth = max(node_depths(v.parents), default=0)
    st.draft_calls += out.draft_calls
    st.drafted_tokens += len(v.tokens)
    st.decided_tokens += sum(1 for f in v.fates if f in ("accepted", "rejected"))
    st.accepted_tokens += m
    rejected = [i for i, f in enumerate(v.fates) if f == "rejected"]
    st.rejected_q_zero += sum(1 for i in rejected if v.q[i] == 0.0)
    if len(st.accepted_histogram) <= depth:
        st.accepted_histogram += [0] * (depth + 1 - len(st.accepted_histogram))
    st.accepted_histogram[m] += 1
    if len(st.position_reached) < depth:
        grow = [0] * (depth - len(st.position_reached))
        st.position_reached += grow
        st.position_accepted += list(grow)
    for j in range(len(out.decided_rows(b))):
        st.position_reached[j] += 1
    for j in range(m):
        st.position_accepted[j] += 1


def round_trace(index: int, out: RoundOutcome, b: int, text: Any) -> RoundTrace:
    """Sequence b's `RoundTrace`, before `_commit` cuts it at EOS or the budget: its verdict,
    whatever the proposal's shape. Its `positions` come with the recording."""
    v = out.verdicts[b]
    m = len(v.path)
    return RoundTrace(
        index=index,
        verdict=v,
        draft_text=[text(t) for t in v.tokens],
        emitted_ids=list(v.emitted),
        emitted_text=[],
        emitted_fates=["accepted"] * m + [v.last],
        draft_s=out.draft_s,
        verify_s=out.verify_s,
        emitted_logprobs=list(out.logprobs[b]),
    )


def plain_round_trace(
    index: int, token: int, coin: float, logprob: float, positions: list[PositionTrace]
) -> RoundTrace:
    """A verifier-only step's trace: one sampled token, no draft (a tree with no nodes)."""
    return RoundTrace(
        index=index,
        verdict=TreeVerdict.of_sampled(token, coin),
        draft_text=[],
        emitted_ids=[token],
        emitted_text=[],
        emitted_fates=["sampled"],
        draft_s=0.0,
        verify_s=0.0,
        positions=positions,
        emitted_logprobs=[logprob],
    )
