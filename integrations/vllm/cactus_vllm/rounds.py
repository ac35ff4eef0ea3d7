"""Counting a step's rounds into the metrics, for both of vLLM's samplers (`v1_sampler`,
`mrv2`): per request its rule's label, drafts and accepted drafts; per rule, in one pass over
the batch, the exact KL(pi ‖ q) of every position that got a decision."""

from __future__ import annotations

from collections.abc import Callable

import torch

from cactus_vllm import kernels, metrics
from cactus_vllm.rules import STOCK, STOCK_LABEL, PlannedRule

# (requests, how many leading drafts of each, their rule) -> (p, q [T, V], one-hot ids [T] or
# None): the rows of those positions, q from the stock target logits
RowsFn = Callable[
    [list[int], list[int], PlannedRule], tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
]


def record(
    plans: list[PlannedRule | None],
    num_draft: list[int],
    emitted: list[int],
    random: list[bool],
    rows_of: RowsFn,
) -> None:
    """emitted[i]: the tokens request i emitted this step (its accepted drafts + 1). Greedy
    requests and lossless rules are counted with KL 0 (pi = q)."""
    rounds = []  # (label, rule name, drafts, accepted, request)
    by_rule: dict[PlannedRule, list[int]] = {}
    for i, count in enumerate(num_draft):
        if count <= 0:
            continue
        planned = plans[i]
        label, name = (planned.label, planned.name) if planned else (STOCK_LABEL, STOCK_LABEL)
        rounds.append((label, name, count, max(emitted[i] - 1, 0), i))
        if planned is not None and planned.path != STOCK and random[i]:
            by_rule.setdefault(planned, []).append(i)
    kls: dict[int, list[float]] = {}
    for planned, reqs in by_rule.items() if metrics.measuring_kl() else ():
        decided = [min(emitted[i], num_draft[i]) for i in reqs]
        p, q, one_hot_n = rows_of(reqs, decided, planned)
        values = kernels.emitted_kl(planned.rule, p, q, one_hot_n).tolist()
        for i, d in zip(reqs, decided, strict=True):
            kls[i], values = values[:d], values[d:]
    for label, name, count, accepted, i in rounds:
        decided = min(accepted + 1, count)
        metrics.RECORDER.observe(label, name, count, accepted, kls.get(i, [0.0] * decided))
    metrics.RECORDER.step_done()
