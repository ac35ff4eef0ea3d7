"""One round with a draft tree (one sequence): draw the coins, grow the tree, score every node
in one verifier pass with a tree attention mask, walk the tree under the rule, keep the
accepted path in the verifier's cache, and record the round.

Shapes: N = nodes of the tree, V = vocabulary. Column 0 of the verify pass is the last
committed token (the root); column i + 1 is node i, so row 0 of q is q at the root and row
i + 1 is q after node i, matching the tree's `draft_probs`. A tree round's trace keeps one
`PositionTrace` per row (`tree_positions`), built by the chain's `position_traces`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from cactus_core.engine.decoding.generation import GenerationStats
from cactus_core.engine.decoding.recording import RoundRecord, ensure_entry, position_traces
from cactus_core.engine.decoding.round import logprobs
from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace
from cactus_core.engine.drafting.tree_drafter import TreeDrafter
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import Rule
from cactus_core.maths.sampling import SamplingSettings
from cactus_core.maths.tree import DraftTree, TreeVerdict, children_of, verify_tree


@dataclass
class TreeCoins:
    """A tree round's uniforms, all drawn whatever the tree looks like (so that later rounds
    meet the same coins): one per child drawn, one accept coin per node, and one inverse-CDF
    coin per depth for the recovered or bonus token."""

    draft: torch.Tensor  # [1, N]
    accept: torch.Tensor  # [N]
    sample: torch.Tensor  # [depth + 1]


@dataclass
class TreeOutcome:
    tree: DraftTree
    verdict: TreeVerdict
    q: torch.Tensor  # [N + 1, V]
    logits: torch.Tensor  # [N + 1, V] the verifier's raw logits behind q
    draft_s: float  # growing the tree, and the draft reading the accepted path
    verify_s: float  # the verify pass, the walk and keeping the path
    draft_calls: int  # draft forwards


def draw_tree_coins(generator: torch.Generator, s: TreeSettings, device) -> TreeCoins:
    u = torch.rand(2 * s.nodes + s.depth + 1, generator=generator, device=device)
    n = s.nodes
    return TreeCoins(draft=u[None, :n], accept=u[n : 2 * n], sample=u[2 * n :])


@torch.inference_mode()
def run_tree_round(
    judge: Rule,
    verifier: SequenceCache,
    drafter: TreeDrafter,
    last: int,
    coins: TreeCoins,
    sampling: SamplingSettings,
) -> TreeOutcome:
    """Draft, verify in one pass, walk, keep the accepted path in the verifier's cache, and
    let the draft read it."""
    t0 = time.perf_counter()
    tree = drafter.propose(coins.draft, sampling.probs)
    t1 = time.perf_counter()
    device = tree.draft_probs.device
    ids = torch.cat([torch.tensor([last], device=device), tree.tokens])[None]  # [1, N + 1]
    parents = [-1] + [p + 1 for p in tree.parents.tolist()]  # columns; -1: the context
    logits = verifier.step_tree(ids, parents)[0]  # [N + 1, V]
    q = sampling.probs(logits)
    # the tree's coin layout (`maths.tree`): an accept coin per node, an emission coin per depth
    uniforms = torch.cat([coins.accept[: tree.size], coins.sample[: tree.depth + 1]])
    verdict = verify_tree(judge, tree, q, uniforms, validate=False)
    verifier.keep_path([0] + [n + 1 for n in verdict.path])
    t2 = time.perf_counter()
    drafter.after_verify(verifier, [list(verdict.emitted)])
    t3 = time.perf_counter()
    # A draft call per depth but the deepest (never expanded), and the feed: the tree's depth.
    calls = max(_depths(tree), default=1)
    return TreeOutcome(tree, verdict, q, logits, t1 - t0 + t3 - t2, t2 - t1, calls)


def tree_round_trace(index: int, out: TreeOutcome, text: Callable[[int], str]) -> RoundTrace:
    """The round as a chain along its accepted path (the m accepted nodes, then the recovered
    or bonus token), with the whole tree and its verdict in `tree`; its `positions` (one per
    row of the tree, `tree_positions`) come with the recording."""
    v = out.verdict
    path_tokens = [int(out.tree.tokens[n]) for n in v.path]
    m = len(path_tokens)
    emitted = list(v.emitted)
    rows = v.path_rows  # the q rows each emitted token was drawn at
    lp = logprobs(out.logits[None, rows], torch.tensor([emitted], device=out.logits.device))
    return RoundTrace(
        index=index,
        k=m,
        draft_ids=path_tokens,
        draft_text=[text(t) for t in path_tokens],
        draft_fates=["accepted"] * m,
        accept_probs=[float(v.accept_probs[n]) for n in v.path],
        accept_coins=[float(v.coins[n]) for n in v.path],
        num_accepted=m,
        next_id=emitted[-1],
        sample_coin=v.emit_coin,
        emitted_ids=emitted,
        emitted_text=[],
        emitted_fates=["accepted"] * m + [v.last],
        draft_s=out.draft_s,
        verify_s=out.verify_s,
        emitted_logprobs=lp[0].tolist(),
        tree=v.to_dict(),
    )


def judged_rows(tree: DraftTree) -> list[int]:
    """The rows with children (0: the root, i + 1: node i): the rows a rule judges at."""
    return [r for r, kids in enumerate(children_of(tree.parents.tolist())) if kids]


def row_kl(
    judge: Rule, out: TreeOutcome, rows: list[int], measure: bool = True
) -> dict[int, float]:
    """KL(pi ‖ q) at each of `rows` (rows with children): the node judged its children with
    the rule, whose emitted pi there is the chain's pi of (p, q) at that row (`maths.tree`).
    0 for a lossless rule; {} when not measured."""
    if not rows or not measure:
        return {}
    if judge.lossless:
        return dict.fromkeys(rows, 0.0)
    at = torch.tensor(rows, device=out.q.device)
    p, q = out.tree.draft_probs[at], out.q[at]
    return dict(zip(rows, kl(emitted_distribution(judge, p, q), q).tolist(), strict=True))


def tree_emitted_kl(
    judge: Rule, out: TreeOutcome, measure: bool = True, known: dict[int, float] | None = None
) -> list[float]:
    """KL(pi ‖ q) at each emitted token's row (`row_kl`, or `known` when given); a token drawn
    at a row without children is a bonus from q (KL 0)."""
    rows = out.verdict.path_rows
    judged = set(judged_rows(out.tree))
    values = (
        known
        if known is not None
        else row_kl(judge, out, [r for r in rows if r in judged], measure)
    )
    return [values.get(r, 0.0) for r in rows]


def tree_positions(
    judge: Rule, out: TreeOutcome, kl_rows: dict[int, float], top_n: int, top_m: int
) -> list[PositionTrace]:
    """One `PositionTrace` per row of the tree [N + 1]: top-N of q and the replay rows of q at
    every row; at a row with children also top-N of p and of the rule's h for its first child
    (the candidate the rule judges; later ones are judged against residuals), KL(h ‖ q),
    KL(pi ‖ q) from `kl_rows`, and the replay rows of p, with every child's exact p and q kept
    so that a replay finds them."""
    tree, v = out.tree, out.verdict
    kids = children_of(v.parents)
    device = out.q.device
    # A leaf's row is never judged: its stand-in token (q's argmax, kept anyway) makes the
    # chain helper's bonus-free layout fit; its p and h fields are cleared below.
    first = [int(tree.tokens[k[0]]) if k else int(out.q[r].argmax()) for r, k in enumerate(kids)]
    n = torch.tensor([first], device=device)  # [1, N + 1]
    q = torch.cat([out.q, out.q[-1:]])[None]  # [1, N + 2, V]: the helper reads a bonus row last
    kl_pi = [[kl_rows.get(r) for r in range(len(kids))]]
    rows = position_traces(judge, tree.draft_probs[None], q, n, kl_pi, top_n, top_m)[0][:-1]
    for r, pos in enumerate(rows):
        if not kids[r]:
            rows[r] = PositionTrace(pos.q_ids, pos.q_probs)
            rows[r].replay_q_ids, rows[r].replay_q_probs = pos.replay_q_ids, pos.replay_q_probs
            continue
        for i in kids[r][1:]:
            ensure_entry(pos.replay_p_ids, pos.replay_p_probs, v.tokens[i], v.p[i])
            ensure_entry(pos.replay_q_ids, pos.replay_q_probs, v.tokens[i], v.q[i])
    return rows


def tree_path_rows(out: TreeOutcome) -> tuple[torch.Tensor, torch.Tensor]:
    """p and q [d, V] at the d judged rows on the path (the chain's decided positions): what
    the decoder's probe sees of a tree round."""
    judged = set(judged_rows(out.tree))
    on_path = [r for r in out.verdict.path_rows if r in judged]
    return out.tree.draft_probs[on_path], out.q[on_path]


def record_tree_round(
    judge: Rule, out: TreeOutcome, measure: bool, top: tuple[int, int] | None
) -> list[RoundRecord]:
    """The round's recording, one sequence's (on the decoder's recording worker): KL(pi ‖ q)
    at each emitted token and, with top = (top-N, top-M), every row's `tree_positions` (and
    KL at every judged row; without, only at the path's)."""
    judged = judged_rows(out.tree)
    on_path = [r for r in out.verdict.path_rows if r in set(judged)]
    kl_rows = row_kl(judge, out, judged if top is not None else on_path, measure)
    kl_pi: list[float | None] = list(tree_emitted_kl(judge, out, measure, kl_rows))
    positions = [] if top is None else tree_positions(judge, out, kl_rows, *top)
    return [RoundRecord(kl_pi, positions)]


def count_tree(st: GenerationStats, out: TreeOutcome) -> None:
    """A tree round's draft counts (`_commit` adds the emitted ones): every node was drafted,
    the judged ones got a decision, the path was accepted."""
    v, m = out.verdict, len(out.verdict.path)
    st.draft_calls += out.draft_calls
    st.drafted_tokens += len(out.tree.tokens)
    st.decided_tokens += sum(1 for f in v.fates if f in ("accepted", "rejected"))
    st.accepted_tokens += m
    # every rejected candidate the verifier gave q_n = 0, as a chain counts its rejected draft
    st.rejected_q_zero += sum(
        f == "rejected" and q == 0.0 for f, q in zip(v.fates, v.q, strict=True)
    )
    if len(st.accepted_histogram) <= m:
        st.accepted_histogram += [0] * (m + 1 - len(st.accepted_histogram))
    st.accepted_histogram[m] += 1
    # Depth d + 1 of the walk "reached a decision" when the walk stood on a row with children
    # there: the tree's per-position counts, in the chain's definitions (`PositionCounts`).
    judged = set(judged_rows(out.tree))
    reached = sum(1 for r in v.path_rows if r in judged)
    if len(st.position_reached) < reached:
        grow = [0] * (reached - len(st.position_reached))
        st.position_reached += grow
        st.position_accepted += list(grow)
    for j in range(reached):
        st.position_reached[j] += 1
    for j in range(m):
        st.position_accepted[j] += 1


def _depths(tree: DraftTree) -> list[int]:
    depth: list[int] = []
    for parent in tree.parents.tolist():
        depth.append(1 if parent < 0 else depth[parent] + 1)
    return depth
