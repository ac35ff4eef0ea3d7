"""A round's verdict (`TreeVerdict`) and the tree-shape helpers it shares with the walk
(`maths.tree`): plain Python, JSON-safe, checked strictly when read back from a trace.

Every round's verdict is a tree: a draft tree's as the walk decided it, a chain of k drafts as
the one-child tree it is (`of_chain`), a verifier-only step as a tree with no nodes
(`of_sampled`). A tree's shape is its parents list in topological order: parents[i] is −1 (a
child of the root) or an earlier node. Row 0 is the root and row i + 1 is node i, the layout of
the draft's and the verifier's probability rows. What differs between a chain and a tree that
branches is wording only (`branching`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch

FATES = ("accepted", "rejected", "unreached")
# How a round ends: a token from the last residual, a bonus from q, or (no draft) the
# verifier's own sample.
LAST_KINDS = ("recovered", "bonus", "sampled")


def check_parents(parents: list[int]) -> None:
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(
                f"tree parents must list an earlier node or -1 (the root): parents[{i}] = {parent}"
            )


def node_depths(parents: list[int]) -> list[int]:
    """Depth of each node (a child of the root has depth 1), from parents in topological order."""
    depth: list[int] = []
    for parent in parents:
        depth.append(1 if parent < 0 else depth[parent] + 1)
    return depth


def children_of(parents: list[int]) -> list[list[int]]:
    """children_of(parents)[r] = the children of row r (row 0 the root, row i + 1 node i), in
    the order they are tried."""
    kids: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, parent in enumerate(parents):
        kids[parent + 1].append(i)
    return kids


def coin_count(parents: list[int]) -> int:
    """Length of a tree's coin layout: N accept coins, then D + 1 emission coins."""
    return len(parents) + max(node_depths(parents), default=0) + 1


@dataclass
class TreeVerdict:
    """What the walk decided on one round's tree, node by node (lists of length N unless said).

    a(n), h, p_left are NaN for a node that got no decision (fate "unreached"). h is what the
    node was judged against at its token: the rule's h(n) for a node's first child, the
    residual r_i(n) for a later one; p_left is the draft side of that ratio, p renormalised
    over the candidates not yet tried (1 for a candidate outside it: see `maths.tree`).
    """

    tokens: list[int]
    parents: list[int]
    path: list[int]  # accepted nodes, root to tip
    emitted: list[int]  # the path's tokens, then the recovered or bonus token
    last: str  # "recovered" | "bonus"
    accept_probs: list[float]  # a(n)
    coins: list[float]  # each node's accept coin (from the layout, reached or not)
    fates: list[str]  # "accepted" | "rejected" | "unreached"
    p: list[float]  # p at the node's parent, at its token
    q: list[float]  # q at the node's parent, at its token
    h: list[float]
    p_left: list[float]
    emit_coins: list[float]  # [D + 1] the emission coin after d accepted nodes

    @classmethod
    def of_chain(
        cls,
        draft_ids: list[int],
        num_accepted: int,
        output_ids: list[int],
        accept_probs: list[float],
        accept_coins: list[float],
        sample_coin: float,
        p_n: list[float],
        q_n: list[float],
        h_n: list[float] | None = None,
    ) -> TreeVerdict:
        """A chain round's verdict as the one-child tree it is: draft i is node i, the child of
        node i − 1; the m accepted drafts are the path, the drafts after the first rejection
        are unreached. A chain draws one emission coin whatever the path's length, so every
        depth's emission coin is that one. h_n NaN when not given."""
        k, m = len(draft_ids), num_accepted
        fates = ["accepted"] * m + (["rejected"] if m < k else []) + ["unreached"] * (k - m - 1)
        return cls(
            tokens=list(draft_ids),
            parents=list(range(-1, k - 1)),
            path=list(range(m)),
            emitted=list(output_ids[: m + 1]),
            last="recovered" if m < k else "bonus",
            accept_probs=list(accept_probs),
            coins=list(accept_coins),
            fates=fates,
            p=list(p_n),
            q=list(q_n),
            h=list(h_n) if h_n is not None else [math.nan] * k,
            p_left=list(p_n),
            emit_coins=[sample_coin] * (k + 1),
        )

    @classmethod
    def of_sampled(cls, token: int, coin: float) -> TreeVerdict:
        """A verifier-only step: no node, the verifier's own sample with its coin."""
        return cls(
            tokens=[],
            parents=[],
            path=[],
            emitted=[token],
            last="sampled",
            accept_probs=[],
            coins=[],
            fates=[],
            p=[],
            q=[],
            h=[],
            p_left=[],
            emit_coins=[coin],
        )

    @property
    def size(self) -> int:
        """Drafted nodes (0 for a verifier-only step)."""
        return len(self.tokens)

    @property
    def branching(self) -> bool:
        """Whether some node has more than one candidate child: a draft tree proper, rather
        than a chain (a one-child tree) or a verifier-only step. Only wording depends on it."""
        return any(len(kids) > 1 for kids in children_of(self.parents))

    @property
    def children(self) -> list[list[int]]:
        """children[r]: the children of row r, in the order tried (`children_of`)."""
        return children_of(self.parents)

    @property
    def depths(self) -> list[int]:
        """Each node's depth (a child of the root has depth 1)."""
        return node_depths(self.parents)

    @property
    def decided_rows(self) -> list[int]:
        """The rows on the walk where the rule decided (rows with children), root first: a
        chain's positions 0..d − 1, d the drafts that got a decision."""
        kids = self.children
        return [r for r in self.path_rows if kids[r]]

    def coin_judged(self, node: int) -> bool:
        """Whether node's own coin was read: a decision recorded with its chance a(n)."""
        return self.fates[node] != "unreached" and not math.isnan(self.accept_probs[node])

    @property
    def decided(self) -> int:
        """Candidates that got a decision (accepted or rejected)."""
        return sum(f != "unreached" for f in self.fates)

    @property
    def uniforms(self) -> torch.Tensor:
        """The round's coin layout [N + D + 1] (float64): pass it back to replay."""
        return torch.tensor(self.coins + self.emit_coins, dtype=torch.float64)

    @property
    def path_rows(self) -> list[int]:
        """The rows the walk stood on, root first: emitted token j was drawn at row
        path_rows[j] (0: the root, i + 1: after node i)."""
        return [0] + [n + 1 for n in self.path]

    @property
    def emit_coin(self) -> float:
        """The coin of the token drawn at the end of the path."""
        return self.emit_coins[len(self.path)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: NaN becomes None."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if _is_float_field(f.name):
                value = [_json_float(x) for x in value]
            out[f.name] = list(value) if isinstance(value, list) else value
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> TreeVerdict:
        """From `to_dict`'s form, checked strictly: ValueError naming what is wrong."""
        if not isinstance(raw, dict):
            raise ValueError("a tree verdict must be an object")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in raw]
        extra = sorted(set(raw) - set(names))
        if missing or extra:
            raise ValueError(
                f"a tree verdict has missing fields {missing} / unknown fields {extra}"
            )
        if raw["last"] not in LAST_KINDS:
            raise ValueError(f"tree verdict last must be one of {', '.join(LAST_KINDS)}")
        values: dict[str, Any] = {"last": raw["last"]}
        for name in names:
            if name == "last":
                continue
            seq = raw[name]
            if not isinstance(seq, list):
                raise ValueError(f"tree verdict {name} must be a list")
            if _is_float_field(name):
                values[name] = [_float_from(name, x) for x in seq]
            elif name == "fates":
                if any(f not in FATES for f in seq):
                    raise ValueError(f"tree verdict fates must be among {', '.join(FATES)}")
                values[name] = list(seq)
            else:
                if any(isinstance(x, bool) or not isinstance(x, int) for x in seq):
                    raise ValueError(f"tree verdict {name} must hold integers")
                values[name] = list(seq)
        verdict = cls(**values)
        verdict._check()
        return verdict

    def _check(self) -> None:
        n = len(self.tokens)
        if (n == 0) != (self.last == "sampled"):
            raise ValueError("a tree verdict ends 'sampled' exactly when it has no node")
        for name in ("parents", "accept_probs", "coins", "fates", "p", "q", "h", "p_left"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"tree verdict {name} must have one entry per node ({n})")
        check_parents(self.parents)
        if len(self.emit_coins) != max(node_depths(self.parents), default=0) + 1:
            raise ValueError("tree verdict emit_coins must have depth + 1 entries")
        if any(t < 0 for t in self.tokens) or any(t < 0 for t in self.emitted):
            raise ValueError("tree verdict token ids must be ≥ 0")
        up = -1
        for node in self.path:
            if not 0 <= node < n or self.parents[node] != up:
                raise ValueError("tree verdict path must run from the root down parent links")
            up = node
        if self.emitted[:-1] != [self.tokens[i] for i in self.path] or not self.emitted:
            raise ValueError("tree verdict emitted must be the path's tokens and one more")
        if [i for i, f in enumerate(self.fates) if f == "accepted"] != sorted(self.path):
            raise ValueError("tree verdict fates must mark exactly the path accepted")
        coins = self.coins + self.emit_coins
        if any(not 0 <= c < 1 for c in coins):
            raise ValueError("tree verdict coins must lie in [0, 1)")


def _is_float_field(name: str) -> bool:
    return name in ("accept_probs", "coins", "p", "q", "h", "p_left", "emit_coins")


def _json_float(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _float_from(name: str, x: Any) -> float:
    if x is None:
        return math.nan
    try:  # an integer too large for a float (1e400 written out) is no probability either
        value = float(x) if isinstance(x, int | float) and not isinstance(x, bool) else math.inf
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise ValueError(f"tree verdict {name} must hold finite numbers or null")
    return value


@dataclass
class TreeBatchResult:
    """`verify_tree_batch`'s result for B trees of one shape (N nodes, depth D)."""

    path: torch.Tensor  # [B, D] accepted nodes root to tip, −1 after the path
    num_accepted: torch.Tensor  # [B] path length
    emitted: torch.Tensor  # [B, D + 1] path tokens, then the recovered/bonus token, then −1
    last: torch.Tensor  # [B] the recovered or bonus token
    recovered: torch.Tensor  # [B] bool: the last token was recovered (else bonus)
    fates: torch.Tensor  # [B, N] int: 1 accepted, 2 rejected, 0 unreached
    accept_probs: torch.Tensor  # [B, N] a(n), NaN where unreached
    h: torch.Tensor  # [B, N] what each node was judged against at its token (NaN unreached)
    p_left: torch.Tensor  # [B, N] the draft side of that ratio (NaN unreached)
    uniforms: torch.Tensor  # [B, N + D + 1] the coin layout
