"""Traversal verification: a lossless walk of a draft tree from its leaves back to the root
(Weng et al., Traversal Verification for Speculative Tree Decoding, arXiv 2505.12398). It is
how the `block` rule judges a tree; on a one-child tree it is block verification
(`rules.block`), coin for coin.

RRS (`maths.tree`) decides top-down: a node is kept only if its own coin passes, before
anything under it is looked at. Traversal verification judges the deepest candidates first
and accepts a whole path at once, so a node whose own ratio q/p is low can still be kept for
the path under it. Each node carries a weight, how much of the verifier's mass along its path
the draft has not over-drawn:

    w_root = 1,   w_c = min(1, w_v · q_v(c) / d_c(c))   for a child c of v,

with q_v the node's current target (q, then residuals) and d_c the law c was drawn from (p at
v without the siblings tried before it, renormalised; the point mass on c for a candidate p
gives no mass, as in `maths.tree`). Nodes are judged in post-order (children in the order
tried, a node after everything under it). Node c, once nothing is left under it, is accepted
with chance w_c, which accepts the path root → c; the round then emits that path and a draw
from q_c (a bonus if c never had children, else its residual). A rejected c is removed and
its parent v becomes

    R = max(0, w_v·q_v − d_c),   Z = sum R,   q_v ← R / Z,   w_v ← Z / (Z + 1 − w_v),

and the weights under v are computed again. Once every child of the root is gone the round
emits a draw from the root's residual. On a chain the updated w_v is block verification's h_i
and the residual its normalise(max(0, w_i·q_{i+1} − p_{i+1})).

The events' order is fixed by the tree's shape, and given that the earlier events failed every
weight is a function of the tree and q alone: a round's law is one list of chances, event j
passing with alpha_j once the events before it failed (`traversal_chances`), and its expected
accepted length is sum_j alpha_j · prod_{i<j}(1 − alpha_i) · depth_j, with no coins. The paper
proves the output follows the verifier; tests/test_traversal.py checks it exactly on enumerated
trees and by χ² on sampled ones, with children drawn without replacement as the lab draws them.

Coins: the tree layout of `maths.tree`, [N + D + 1]: uniforms[i] is node i's coin (passed iff
below its chance when it is judged), uniforms[N + d] the inverse-CDF coin of the token emitted
after d accepted nodes.

Shapes: B trees of one shape, N nodes, V vocabulary; p and q [B, N + 1, V] (row 0 the root,
row i + 1 after node i).
"""

from __future__ import annotations

import math

import torch

from cactus_core.maths.sampling import inverse_cdf_
from cactus_core.maths.tree_verdict import TreeBatchResult, children_of, node_depths

_ACCEPTED, _REJECTED = 1, 2


def post_order(parents: list[int]) -> list[int]:
    """The nodes in the order traversal judges them: a row's children in the order tried,
    each node right after everything under it."""
    kids = children_of(parents)
    out: list[int] = []

    def visit(row: int) -> None:  # recursion depth ≤ the tree's depth (16 at most)
        for c in kids[row]:
            visit(c + 1)
            out.append(c)

    visit(0)
    return out


def _ancestors(parents: list[int], depth: int) -> torch.Tensor:
    """[N, D]: each node's path from the root's child down to the node, −1 after it."""
    table = torch.full((len(parents), max(depth, 1)), -1, dtype=torch.long)
    for i, parent in enumerate(parents):
        path = (table[parent][table[parent] >= 0].tolist() if parent >= 0 else []) + [i]
        table[i, : len(path)] = torch.tensor(path)
    return table


class _Walk:
    """The traversal's state for B trees of one shape: the current target q at every row, p
    without the children removed so far, and the weights."""

    def __init__(
        self, tokens: torch.Tensor, parents: list[int], p: torch.Tensor, q: torch.Tensor
    ) -> None:
        self.tokens, self.parents = tokens, parents  # [B, N]
        self.q = q.clone()  # [B, N + 1, V]
        self.left = p.clone()  # [B, N + 1, V] unnormalised
        self.w = torch.ones(q.shape[:2], dtype=q.dtype, device=q.device)  # [B, N + 1]
        self.rows = torch.arange(q.shape[0], device=q.device)
        # nodes under each row, in topological order
        self.under: list[list[int]] = [[] for _ in range(len(parents) + 1)]
        for i in range(len(parents)):
            up = parents[i]
            while True:
                self.under[up + 1].append(i)
                if up < 0:
                    break
                up = parents[up]
        self._reweigh(0)

    def drawn_from(self, c: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(d_c [B, V], d_c(c) [B]): the law node c was drawn from, given the siblings before it."""
        row, tok = self.parents[c] + 1, self.tokens[:, c]
        left = self.left[:, row]  # [B, V]
        mass = left.sum(-1)  # [B]
        at = left[self.rows, tok]
        point = (mass <= 0) | (at <= 0)  # a deterministic candidate: drawn from δ_c
        d = left / mass.clamp_min(1e-300).unsqueeze(-1)
        if bool(point.any()):
            hot = torch.nn.functional.one_hot(tok, left.shape[-1]).to(left.dtype)
            d = torch.where(point.unsqueeze(-1), hot, d)
        return d, torch.where(point, 1.0, at / mass.clamp_min(1e-300))

    def _reweigh(self, row: int) -> None:
        for c in self.under[row]:
            up = self.parents[c] + 1
            _, dc = self.drawn_from(c)
            qc = self.q[self.rows, up, self.tokens[:, c]]
            self.w[:, c + 1] = torch.clamp_max(self.w[:, up] * qc / dc, 1.0)

    def reject(self, c: int) -> None:
        """Remove node c: its parent's residual, weight and draft, then the weights under it."""
        row = self.parents[c] + 1
        d, _ = self.drawn_from(c)
        w_v = self.w[:, row]  # [B]
        r = (w_v.unsqueeze(-1) * self.q[:, row] - d).clamp_min(0.0)  # [B, V]
        z = r.sum(-1)  # [B]
        has = z > 0
        r = r / z.clamp_min(1e-300).unsqueeze(-1)
        self.q[:, row] = torch.where(has.unsqueeze(-1), r, self.q[:, row])
        if row > 0:  # the root is never judged: it keeps weight 1
            self.w[:, row] = torch.where(has, z / (z + 1 - w_v).clamp_min(1e-300), 0.0)
        self.left[self.rows, row, self.tokens[:, c]] = 0.0
        self._reweigh(row)


def traversal_chances(
    tokens: torch.Tensor, parents: list[int], p: torch.Tensor, q: torch.Tensor
) -> torch.Tensor:
    """[B, N]: node i's chance of acceptance at its event, given that every event before it
    (`post_order`) failed; the round's whole law over which path is kept."""
    walk = _Walk(tokens, parents, p, q)
    alpha = torch.empty(tokens.shape, dtype=q.dtype, device=q.device)
    for c in post_order(parents):
        alpha[:, c] = walk.w[:, c + 1]
        walk.reject(c)
    return alpha


def traversal_expected_accepted(
    tokens: torch.Tensor, parents: list[int], p: torch.Tensor, q: torch.Tensor
) -> torch.Tensor:
    """[B]: the expected number of accepted drafts of each tree, over the coins (no sampling)."""
    alpha = traversal_chances(tokens, parents, p, q)
    depths = node_depths(parents)
    reach = torch.ones(tokens.shape[0], dtype=alpha.dtype, device=alpha.device)
    total = torch.zeros_like(reach)
    for c in post_order(parents):
        total += reach * alpha[:, c] * depths[c]
        reach = reach * (1 - alpha[:, c])
    return total


def traverse_batch(
    tokens: torch.Tensor,
    parents: list[int],
    p: torch.Tensor,
    q: torch.Tensor,
    uniforms: torch.Tensor,
) -> TreeBatchResult:
    """Judge B trees of one shape by traversal verification with the coins uniforms
    [B, N + D + 1] (module docstring). Inputs are checked by `maths.tree.verify_tree_batch`."""
    b, n = tokens.shape
    depths = node_depths(parents)
    depth = max(depths)
    dev, dtype = q.device, q.dtype
    has_kids = [bool(k) for k in children_of(parents)[1:]]
    walk = _Walk(tokens, parents, p, q)
    u_accept, u_emit = uniforms[:, :n].to(dtype), uniforms[:, n:]
    alive = torch.ones(b, dtype=torch.bool, device=dev)  # [B] no path accepted yet
    tip = torch.full((b,), -1, dtype=torch.long, device=dev)  # [B] the accepted node
    fates = torch.zeros((b, n), dtype=torch.long, device=dev)
    accept = torch.full((b, n), math.nan, dtype=dtype, device=dev)
    last = torch.zeros(b, dtype=torch.long, device=dev)
    recovered = torch.zeros(b, dtype=torch.bool, device=dev)
    for c in post_order(parents):
        alpha = walk.w[:, c + 1]
        accept[:, c] = torch.where(alive, alpha, accept[:, c])
        passed = alive & (u_accept[:, c] < alpha)
        fates[:, c] = torch.where(alive, torch.where(passed, _ACCEPTED, _REJECTED), 0)
        if bool(passed.any()):
            drawn = inverse_cdf_(walk.q[:, c + 1].clone(), u_emit[:, depths[c]])
            last = torch.where(passed, drawn, last)
            recovered = torch.where(passed, has_kids[c], recovered)
            tip = torch.where(passed, c, tip)
        alive = alive & ~passed
        if not bool(alive.any()):
            break
        walk.reject(c)
    drawn = inverse_cdf_(walk.q[:, 0].clone(), u_emit[:, 0])
    last = torch.where(alive, drawn, last)
    recovered = recovered | alive
    path = _ancestors(parents, depth).to(dev)[tip.clamp_min(0)]  # [B, D]
    path = torch.where((tip >= 0).unsqueeze(-1), path, -1)
    rows = torch.arange(b, device=dev)
    for d in range(depth):  # the accepted node's ancestors are kept with it
        on = path[:, d] >= 0
        fates[rows[on], path[on, d]] = _ACCEPTED
    num_accepted = (path >= 0).sum(-1)
    path_tokens = tokens.gather(1, path.clamp_min(0))
    emitted = torch.cat([torch.where(path >= 0, path_tokens, -1), path.new_full((b, 1), -1)], 1)
    emitted = emitted.scatter(1, num_accepted.unsqueeze(-1), last.unsqueeze(-1))
    nan = torch.full((b, n), math.nan, dtype=dtype, device=dev)
    return TreeBatchResult(
        path, num_accepted, emitted, last, recovered, fates, accept, nan, nan.clone(), uniforms
    )


__all__ = ["post_order", "traversal_chances", "traversal_expected_accepted", "traverse_batch"]
