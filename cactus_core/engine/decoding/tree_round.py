"""One round with a draft tree (one sequence): draw the coins, grow the tree, score every node
in one verifier pass with a tree attention mask, walk the tree under the rule, keep the
accepted path in the verifier's cache, and record the round.

Shapes: N = nodes of the tree, V = vocabulary. Column 0 of the verify pass is the last
committed token (the root); column i + 1 is node i, so row 0 of q is q at the root and row
i + 1 is q after node i, matching the tree's `draft_probs`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from cactus_core.engine.decoding.generation import GenerationStats
from cactus_core.engine.decoding.round import logprobs
from cactus_core.engine.decoding.trace import RoundTrace
from cactus_core.engine.drafting.tree_drafter import TreeDrafter
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import Rule
from cactus_core.maths.sampling import SamplingSettings
from cactus_core.maths.tree import DraftTree, TreeVerdict, verify_tree


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
    or bonus token), with the whole tree and its verdict in `tree`."""
    v = out.verdict
    path_tokens = [int(out.tree.tokens[n]) for n in v.path]
    m = len(path_tokens)
    emitted = list(v.emitted)
    rows = [0] + [n + 1 for n in v.path]  # the q rows each emitted token was drawn at
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
        sample_coin=float("nan"),
        emitted_ids=emitted,
        emitted_text=[],
        emitted_fates=["accepted"] * m + [v.last],
        draft_s=out.draft_s,
        verify_s=out.verify_s,
        emitted_logprobs=lp[0].tolist(),
        tree=v.to_dict(),
    )


def tree_emitted_kl(judge: Rule, out: TreeOutcome, measure: bool = True) -> list[float]:
    """KL(pi ‖ q) at each emitted token's position: the node it was drawn after judged its
    children with the rule, whose emitted pi there is the chain's pi of (p, q) at that node
    (`maths.tree`); a token drawn after a node without children is a bonus from q (KL 0)."""
    v = out.verdict
    nodes = [-1, *v.path]
    judged = [n for n in nodes if _has_children(out.tree, n)]
    values: dict[int, float] = {}
    if judged and measure and not judge.lossless:
        rows = torch.tensor([n + 1 for n in judged], device=out.q.device)
        p, q = out.tree.draft_probs[rows], out.q[rows]
        values = dict(zip(judged, kl(emitted_distribution(judge, p, q), q).tolist(), strict=True))
    return [values.get(n, 0.0) for n in nodes]


def count_tree(st: GenerationStats, out: TreeOutcome) -> None:
    """A tree round's draft counts (`_commit` adds the emitted ones): every node was drafted,
    the judged ones got a decision, the path was accepted."""
    v, m = out.verdict, len(out.verdict.path)
    st.draft_calls += out.draft_calls
    st.drafted_tokens += len(out.tree.tokens)
    st.decided_tokens += sum(1 for f in v.fates if f in ("accepted", "rejected"))
    st.accepted_tokens += m
    if len(st.accepted_histogram) <= m:
        st.accepted_histogram += [0] * (m + 1 - len(st.accepted_histogram))
    st.accepted_histogram[m] += 1


def _depths(tree: DraftTree) -> list[int]:
    depth: list[int] = []
    for parent in tree.parents.tolist():
        depth.append(1 if parent < 0 else depth[parent] + 1)
    return depth


def _has_children(tree: DraftTree, node: int) -> bool:
    return bool((tree.parents == node).any())
