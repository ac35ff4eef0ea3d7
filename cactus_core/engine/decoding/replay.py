"""Replaying a trace under another rule: the same drafts, the same coins, another verdict.

Replay (`reverify`) asks what another rule would have decided on each round. It needs p and q
at the verified positions. Storing them whole (V = 49,152 floats each) would make a trace
hundreds of MB, so each position keeps its top-M entries of p and of q (M = `replay_top_m`, 128
by default) plus the drafted token's exact p_n and q_n, and the mass left over (the tail) is
spread evenly over the other tokens when the rows are rebuilt. Hence:
- the replay is exact whenever the tails are empty (top-k ≤ M, or a top-p nucleus of ≤ M
  tokens), which `RoundReplay.exact` reports;
- otherwise accept decisions are still exact for the rules whose a(n) needs only p_n and q_n
  (`Rule.caps.needs_rows` False) and for those whose rows-statistic survives the cut (a rule says
  so in `Rule.decisions_replay_exactly`); the others are approximate, and so is every
  recovered token (the residual's tail is smeared). `python -m cactus_core rules` lists which.
Replay judges each round on its own: the later rounds keep the drafts that were actually made.

Every round is replayed the same way: its rows rebuilt (p at the rows with children, q at
every row), then its tree walked again with its own coins (`maths.tree.verify_tree`): the tree
and q at every node do not depend on the rule, only the walk does, and a chain is the one-child
tree it is (the walk of a one-child tree is `verify` on the chain, coin for coin: tested). A
rule that decides on a whole draft at once (`Rule.caps.round_level`, which has no per-node form)
judges a chain through `verify`, and `block` a tree by its traversal (`maths.traversal`).
With a tail, a node's first child is judged from values the cut keeps (p_n, q_n); a later
candidate's decision and the last token read residuals, which need whole rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace, Trace
from cactus_core.engine.decoding.trace_io import is_num, vocab_size
from cactus_core.maths.rules import Rule, lossless_rule, make_rule
from cactus_core.maths.tree import DraftTree, TreeVerdict, unjudged_first_accepts, verify_tree
from cactus_core.maths.tree_optimum import multidraft_optimum, rrs_acceptance
from cactus_core.maths.verify import verify

# Below this the tail of a kept row is treated as empty (float32 rounding of the kept mass).
_TAIL_EPS = 1e-6
# A round's rows are rebuilt whole: rows × vocabulary cells of float64, twice (p and q). A file
# claims both numbers, so they are capped before anything is allocated (a 12 KiB trace once
# asked for 2.8 GB). 2^23 cells (64 MiB a row set) holds 170 rows of a 49,152-token vocabulary.
MAX_REPLAY_CELLS = 1 << 23


@dataclass
class RoundReplay:
    """One round's verdict as decoded and as the replay's rule walks it, node by node."""

    index: int
    before: TreeVerdict
    after: TreeVerdict
    decisions_exact: bool  # the accept/reject fates are exactly what the full rows give
    exact: bool  # ... and so is next_after (the kept rows held all the mass)

    @property
    def fates_before(self) -> list[str]:
        return self.before.fates

    @property
    def fates_after(self) -> list[str]:
        return self.after.fates

    @property
    def accept_probs_after(self) -> list[float]:
        return self.after.accept_probs

    @property
    def num_accepted_before(self) -> int:
        return len(self.before.path)

    @property
    def num_accepted_after(self) -> int:
        return len(self.after.path)

    @property
    def next_before(self) -> int:
        """The token emitted after the accepted drafts (recovered or bonus), as decoded."""
        return self.before.emitted[-1]

    @property
    def next_after(self) -> int:
        return self.after.emitted[-1]

    @property
    def flipped(self) -> list[int]:
        """Drafted nodes whose fate changed."""
        pairs = zip(self.fates_before, self.fates_after, strict=True)
        return [j for j, (a, b) in enumerate(pairs) if a != b]

    @property
    def tokens_before(self) -> int:
        return self.num_accepted_before + 1

    @property
    def tokens_after(self) -> int:
        return self.num_accepted_after + 1


@dataclass
class Replay:
    rule: str
    rule_params: dict[str, Any]
    rounds: list[RoundReplay]

    @property
    def flips(self) -> int:
        return sum(len(r.flipped) for r in self.rounds)

    @property
    def tokens_per_call_before(self) -> float:
        return sum(r.tokens_before for r in self.rounds) / max(len(self.rounds), 1)

    @property
    def tokens_per_call_after(self) -> float:
        return sum(r.tokens_after for r in self.rounds) / max(len(self.rounds), 1)

    @property
    def exact(self) -> bool:
        return all(r.exact for r in self.rounds)

    @property
    def decisions_exact(self) -> bool:
        return all(r.decisions_exact for r in self.rounds)


def _rebuild(ids: list[int], probs: list[float], vocab: int) -> tuple[torch.Tensor, bool]:
    """A full row [V] (float64) from its kept entries; the tail is spread over the rest."""
    row = torch.zeros(vocab, dtype=torch.float64)
    row[torch.tensor(ids, dtype=torch.long)] = torch.tensor(probs, dtype=torch.float64)
    tail = 1.0 - float(row.sum())
    others = vocab - len(set(ids))
    if tail > _TAIL_EPS and others > 0:
        kept = torch.zeros(vocab, dtype=torch.bool)
        kept[torch.tensor(ids, dtype=torch.long)] = True
        row[~kept] = tail / others
        return row / row.sum(), False
    return row / row.sum(), True


def position_rows(pos: PositionTrace, vocab: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """p and q [V] (float64) of a drafted position, rebuilt from its replay rows as `reverify`
    rebuilds them, and whether both are exact (no tail was smeared)."""
    p, ok_p = _rebuild(pos.replay_p_ids, pos.replay_p_probs, vocab)
    q, ok_q = _rebuild(pos.replay_q_ids, pos.replay_q_probs, vocab)
    return p, q, ok_p and ok_q


def reverify(trace: Trace, rule: Rule | str) -> Replay:
    """Judge every round's drafts again under `rule`, with the same coins.

    At temperature 0 the decoder verifies by exact match whatever the rule, and so does the
    replay. See the module docstring for what is exact.
    """
    if isinstance(rule, str):
        rule = make_rule(rule)
    if rule.caps.reads_hidden:
        raise ValueError(
            f"rule {rule.name!r} reads the verifier's hidden states, which a trace does not "
            "keep: decode with it instead of replaying"
        )
    vocab = vocab_size(trace.meta)
    temperature = trace.meta.get("temperature")
    if not is_num(temperature):
        raise ValueError("not a trace: meta.temperature is missing or not a number")
    judge = lossless_rule() if temperature == 0 else rule
    out = []
    for rnd in trace.rounds:
        if rnd.sampled:
            continue
        if not rnd.positions:
            raise ValueError("this trace was recorded without positions (record_trace=False)")
        out.append(replay_round(judge, rnd, vocab))
    return Replay(rule=rule.name, rule_params=dict(rule.params), rounds=out)


def replay_round(judge: Rule, rnd: RoundTrace, vocab: int) -> RoundReplay:
    """One round judged again under `judge` with its own coins (module docstring)."""
    before = _checked_verdict(rnd, vocab)
    kids = before.children
    p_rows, q_rows, exact = _rows(rnd, kids, vocab)
    if judge.caps.round_level and not (before.branching and judge.caps.judges_trees_by_traversal):
        after = _judge_chain(judge, before, p_rows, q_rows)
    else:
        tree = DraftTree(
            torch.tensor(before.tokens, dtype=torch.long),
            torch.tensor(before.parents, dtype=torch.long),
            p_rows,
        )
        after = verify_tree(judge, tree, q_rows, before.uniforms.float())
        for i, a in unjudged_first_accepts(judge, after, p_rows, q_rows).items():
            after.accept_probs[i] = a
    firsts = {k[0] for k in kids if k}
    judged = {i for w in (before, after) for i, f in enumerate(w.fates) if f != "unreached"}
    kept = len(rnd.positions[0].replay_q_ids)
    pointwise = judge.decisions_replay_exactly(judge.params, kept) and judged <= firsts
    return RoundReplay(rnd.index, before, after, decisions_exact=exact or pointwise, exact=exact)


def _checked_verdict(rnd: RoundTrace, vocab: int) -> TreeVerdict:
    """The round's verdict, once its positions fit it: one per row with its replay rows,
    token ids inside the vocabulary."""
    verdict = rnd.verdict
    rows = verdict.size + 1
    if len(rnd.positions) != rows:
        raise ValueError(
            f"not a trace: round {rnd.index} needs the replay rows of its {rows} rows, got "
            f"{len(rnd.positions)} positions"
        )
    if any(not pos.replay_q_ids for pos in rnd.positions):
        raise ValueError(f"not a trace: round {rnd.index} lacks the replay rows")
    if any(not 0 <= t < vocab for t in verdict.tokens):
        raise ValueError(f"not a trace: round {rnd.index} holds a token id outside [0, {vocab})")
    if rows * vocab > MAX_REPLAY_CELLS:
        raise ValueError(
            f"round {rnd.index} has {rows} rows of {vocab:,} tokens: more than the "
            f"{MAX_REPLAY_CELLS:,} cells a replay rebuilds at once"
        )
    return verdict


def _rows(
    rnd: RoundTrace, kids: list[list[int]], vocab: int
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """p and q at every row [R, V] float32, rebuilt from the replay rows (a leaf's p, never
    read, is its q), and whether every rebuilt row was exact."""
    p_rows, q_rows, exact = [], [], True
    for r, pos in enumerate(rnd.positions):
        q, ok_q = _rebuild(pos.replay_q_ids, pos.replay_q_probs, vocab)
        p, ok_p = q, True
        if kids[r]:
            if not pos.replay_p_ids:
                raise ValueError(f"not a trace: round {rnd.index} lacks p at row {r}")
            p, ok_p = _rebuild(pos.replay_p_ids, pos.replay_p_probs, vocab)
        p_rows.append(p)
        q_rows.append(q)
        exact &= ok_q and ok_p
    return torch.stack(p_rows).float(), torch.stack(q_rows).float(), exact


@dataclass
class RowOptimum:
    """A tree row's acceptance against the most any lossless verifier reaches there
    (`maths.tree_optimum`), both over the draws of its candidates."""

    candidates: int
    rrs: float  # recursive rejection sampling (`sps`), the lab's walk
    optimum: float  # the optimal-transport bound
    exact: bool  # the trace kept the row's whole p and q (else the tail is smeared)


def row_optimum(rnd: RoundTrace, row: int, vocab: int) -> RowOptimum | None:
    """Row `row` of a recorded round against its optimum, from the trace's replay rows; None
    where the row has no candidates or more than two, or the trace kept no rows there."""
    kids = rnd.verdict.children
    m = len(kids[row]) if row < len(kids) else 0
    if m not in (1, 2) or row >= len(rnd.positions):
        return None
    pos = rnd.positions[row]
    if not pos.replay_p_ids or not pos.replay_q_ids:
        return None
    p, ok_p = _rebuild(pos.replay_p_ids, pos.replay_p_probs, vocab)
    q, ok_q = _rebuild(pos.replay_q_ids, pos.replay_q_probs, vocab)
    p, q = p.double(), q.double()
    rrs, best = float(rrs_acceptance(p, q, m)), float(multidraft_optimum(p, q, m))
    return RowOptimum(m, rrs, best, ok_p and ok_q)


def _judge_chain(
    judge: Rule, before: TreeVerdict, p_rows: torch.Tensor, q_rows: torch.Tensor
) -> TreeVerdict:
    """A chain judged again as a chain (`verify`) by a rule that decides on the whole draft,
    with its coins."""
    if before.branching:
        raise ValueError("a rule that decides on a whole draft judges chains, not draft trees")
    k = len(before.tokens)
    drafts = torch.tensor([before.tokens], dtype=torch.long)
    res = verify(
        judge,
        p_rows[None, :k],
        drafts,
        q_rows[None],
        uniforms=torch.tensor([before.coins], dtype=torch.float32),
        sample_uniforms=torch.tensor([before.emit_coin], dtype=torch.float32),
    )
    m = int(res.num_accepted[0])
    nan = [float("nan")] * k
    return TreeVerdict.of_chain(
        before.tokens,
        m,
        res.output_token_ids[0].tolist(),
        res.accept_probs[0].tolist(),
        before.coins,
        before.emit_coin,
        nan,
        nan,
    )
