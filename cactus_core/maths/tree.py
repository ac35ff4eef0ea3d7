"""Verifying a draft tree: the interface the engine uses (`DraftTree`, `TreeVerdict`,
`verify_tree`, `sample_without_replacement`). Recursive rejection sampling over children drawn
without replacement (Recursive SD, arXiv 2402.14160), lossless against q; at T = 0 (one-hot q)
exact match. A relaxed rule is verified losslessly here (its h is not used on trees yet): the
tree maths owned by the issue's maths half replaces this module under the same names."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from cactus_core.maths.sampling import sample_from_probs


@dataclass
class DraftTree:
    tokens: torch.Tensor  # [N]
    parents: torch.Tensor  # [N]
    draft_probs: torch.Tensor  # [N+1, V]


@dataclass
class TreeVerdict:
    path: list[int]
    emitted: list[int]
    accept_probs: list[float]
    coins: list[float]
    fates: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TreeVerdict:
        return cls(**d)


def sample_without_replacement(p: torch.Tensor, coins: torch.Tensor) -> torch.Tensor:
    p = p.clone().double()
    out = []
    for u in coins.tolist():
        p = p / p.sum()
        n = int(sample_from_probs(p[None], torch.tensor([u], dtype=p.dtype))[0])
        out.append(n)
        p[n] = 0
    return torch.tensor(out, dtype=torch.long)


def verify_tree(rule, tree: DraftTree, target_probs, accept_coins, sample_coins) -> TreeVerdict:
    n = tree.tokens.shape[0]
    parents = tree.parents.tolist()
    tokens = tree.tokens.tolist()
    a = [float("nan")] * n
    coins = [float("nan")] * n
    fates = ["unreached"] * n
    node, path, depth = -1, [], 0
    greedy = bool(((target_probs == 0) | (target_probs == 1)).all())
    while True:
        kids = [i for i in range(n) if parents[i] == node]
        q = target_probs[node + 1].double()
        if not kids:
            emit = int(sample_from_probs(q[None], sample_coins[depth : depth + 1].double())[0])
            return TreeVerdict(path, [tokens[i] for i in path] + [emit], a, coins, fates)
        if greedy:
            best = int(q.argmax())
            hit = [i for i in kids if tokens[i] == best]
            for i in kids:
                fates[i] = "accepted" if hit and i == hit[0] else "rejected"
                a[i] = 1.0 if fates[i] == "accepted" else 0.0
                coins[i] = float(accept_coins[i])
            if hit:
                node = hit[0]
                path.append(node)
                depth += 1
                continue
            return TreeVerdict(path, [tokens[i] for i in path] + [best], a, coins, fates)
        p = tree.draft_probs[node + 1].double().clone()
        r = q.clone()
        accepted = None
        for i in kids:
            p = p / p.sum()
            t = tokens[i]
            acc = min(1.0, float(r[t] / p[t])) if p[t] > 0 else 0.0
            a[i], coins[i] = acc, float(accept_coins[i])
            if coins[i] < acc:
                fates[i] = "accepted"
                accepted = i
                break
            fates[i] = "rejected"
            r = (r - p).clamp_min(0)
            r = r / r.sum()
            p[t] = 0
        if accepted is None:
            emit = int(sample_from_probs(r[None], sample_coins[depth : depth + 1].double())[0])
            return TreeVerdict(path, [tokens[i] for i in path] + [emit], a, coins, fates)
        node = accepted
        path.append(node)
        depth += 1
