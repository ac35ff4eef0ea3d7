"""Draft trees grown by the feature draft, EAGLE-2 style (Li et al. 2024, arXiv 2406.16858).

A round drafts a tree instead of a chain: at each depth the `width` frontier nodes of highest
cumulative draft probability (the product of p along their path) are expanded, each drawing
`branch` children (the root `root_branch`) without replacement from its own p, until the node
budget or the depth is reached. The verifier then scores every node in one pass with a tree
attention mask (`SequenceCache.step_tree`), the rule walks the tree (`maths.tree.verify_tree`),
and both KV caches keep only the accepted path.

Exactness at T > 0: whether a node is in the tree must never depend on that node's own drawn
value. Expanding a node because of the cumulative probability of nodes already drawn (itself
and its ancestors, drawn at earlier depths) is fine: the decision is made before its children
are drawn, and given it they are a plain draw without replacement from its p, which is what
multi-candidate recursive rejection sampling needs. EAGLE-2's last step, re-ranking all drawn
nodes by their own scores and pruning to the budget, keeps a child because of its own value
and biases the law of the verified candidates, so it is not done here at T > 0. At T = 0 any
candidate set gives the verifier's greedy output, and the children are the draft's top
`branch` tokens.

The draft runs the new nodes of one depth in one batched call over its own KV cache, each node
attending to the committed positions and to its ancestors (a tree mask) at the position of
its depth. After verification the draft's cache is cut back to the committed positions and
reads the verifier's features of the accepted path (`FeatureDrafter.feed`), as after a chain.
One sequence at a time.
"""

from __future__ import annotations

import math

import torch

from cactus_core.engine.drafting.drafter import ProbsFn
from cactus_core.engine.drafting.feature_drafting import FeatureDrafter, FeatureDrafters
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.tree import DraftTree, sample_without_replacement


class TreeDrafter:
    """The feature draft growing one tree per round for one sequence: a `Drafter` whose
    `propose` returns a `DraftTree`. coins [1, settings.nodes]: one inverse-CDF coin per
    child drawn, in the order the children are drawn (unused ones are still drawn, so the
    coins of later rounds do not depend on this round's tree)."""

    def __init__(self, draft: FeatureDraft, vocab: int, settings: TreeSettings, greedy: bool):
        self.rows = FeatureDrafters(draft, vocab, 1)
        self.settings = settings
        self.greedy = greedy

    def prefill(self, tokens: list[list[int]], verifier: SequenceCache) -> None:
        if len(tokens) != 1:
            raise ValueError("tree drafting decodes one sequence at a time; pass one prompt")
        self.rows.prefill(tokens, verifier)

    def after_verify(self, verifier: SequenceCache, emitted: list[list[int]]) -> None:
        """The verifier's cache kept the accepted path (`keep_path`), features included: the
        draft reads them as after a chain."""
        self.rows.after_verify(verifier, emitted)

    def select(self, rows: list[int]) -> None:
        self.rows.select(rows)

    def propose(self, coins: torch.Tensor, probs: ProbsFn) -> DraftTree:
        """Grow the round's tree (module docstring); coins [1, nodes]."""
        row = self.rows.rows[0]
        if row.logits is None or row.feature is None:
            raise ValueError("a tree drafter proposes after its prefill")
        s = self.settings
        base = row.cache.length  # committed positions the draft has read
        p_rows = [probs(row.logits)[0]]  # [V] each: p at the root, then after each node
        tokens: list[int] = []
        parents: list[int] = []
        logcum: list[float] = []  # log of the draft probability of each node's path
        feature = {-1: row.feature}  # the draft's predicted feature after a node, [1, 1, D]
        column: dict[int, int] = {}  # a node's position in the draft's cache
        frontier, used = [-1], 0
        for depth in range(1, s.depth + 1):
            if len(tokens) >= s.nodes or not frontier:
                break
            new: list[int] = []
            best = sorted(frontier, key=lambda i: -(logcum[i] if i >= 0 else 0.0))[: s.width]
            for node in best:
                want = s.root_branch if node < 0 else s.branch
                count = min(want, s.nodes - len(tokens))
                if count <= 0:
                    break
                kids = self._children(p_rows[node + 1], coins[0, used : used + count], count)
                used += count
                for token, prob in kids:
                    tokens.append(token)
                    parents.append(node)
                    logcum.append((logcum[node] if node >= 0 else 0.0) + math.log(prob))
                    new.append(len(tokens) - 1)
            last = depth == s.depth or len(tokens) >= s.nodes
            if last:
                # No node of this depth is expanded: the rows after them are never read by
                # the verification, so they hold the root's p (any distribution would do).
                p_rows += [p_rows[0]] * len(new)
            else:
                p_rows += self._level(
                    row, new, tokens, parents, feature, column, base, depth, probs
                )
            frontier = new
        return DraftTree(
            tokens=torch.tensor(tokens, dtype=torch.long, device=p_rows[0].device),
            parents=torch.tensor(parents, dtype=torch.long, device=p_rows[0].device),
            draft_probs=torch.stack(p_rows),
        )

    def _children(
        self, p: torch.Tensor, coins: torch.Tensor, count: int
    ) -> list[tuple[int, float]]:
        """count distinct children of a node with p [V]: the top ones at T = 0, else drawn
        without replacement; (token, p of it) each."""
        drawn = p.topk(count).indices if self.greedy else sample_without_replacement(p, coins)
        ids: list[int] = drawn[drawn >= 0].tolist()  # fewer when p has fewer tokens than count
        probs: list[float] = p[ids].tolist()
        # A one-hot p at T = 0 gives the other top tokens p = 0: their path is least likely.
        return [(t, max(pr, 1e-30)) for t, pr in zip(ids, probs, strict=True)]

    def _level(
        self,
        row: FeatureDrafter,
        new: list[int],
        tokens: list[int],
        parents: list[int],
        feature: dict[int, torch.Tensor],
        column: dict[int, int],
        base: int,
        depth: int,
        probs: ProbsFn,
    ) -> list[torch.Tensor]:
        """One draft call over the new nodes of a depth (a tree mask over the draft's cache)
        -> p after each of them [V]; records their predicted features and cache columns."""
        device = row.draft.fc.weight.device
        start, t = row.cache.length, len(new)
        mask = torch.zeros(t, start + t, dtype=torch.bool, device=device)
        mask[:, :base] = True
        for r, node in enumerate(new):
            mask[r, start + r] = True
            up = parents[node]
            while up >= 0:
                mask[r, column[up]] = True
                up = parents[up]
            column[node] = start + r
        feats = torch.cat([feature[parents[i]] for i in new], 1)  # [1, T, D]
        ids = torch.tensor([[tokens[i] for i in new]], device=device)
        positions = torch.full((t,), base + depth - 1, device=device)
        out = row.draft.predict(feats, ids, row.cache, positions, mask)  # [1, T, D]
        logits = row.draft.logits(out)[0, :, : row.vocab].float()  # [T, V]
        for r, node in enumerate(new):
            feature[node] = out[:, r : r + 1]
        return list(probs(logits))
