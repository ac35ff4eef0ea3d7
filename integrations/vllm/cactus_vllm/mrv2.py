"""Model Runner V2's `rejection_sample` (vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py)
under the lab's rules; the default runner of GPU vLLM.

Its layout differs from V1's: each request owns num_draft + 1 consecutive logits rows (the
last is the bonus row), the token judged at row i is `draft_sampled[i + 1]` (−1: a
placeholder, rejected), the draft's logits sit in `draft_logits[slot, step]` before
temperature, and a request is known by its slot (`idx_mapping`, `expanded_idx_mapping`).

Temperature: in vLLM 0.32.0 the target logits reach `rejection_sample` already divided by
T (`Sampler.apply_sampling_params` runs `apply_temperature` first; the kernels divide only
the draft's logits by T), so the rule's rows are handed over as log h, whose softmax is h.
Were T applied inside the kernel to the target as well, the rows would have to be T·log h.

The same three paths as V1 (`v1_sampler`): stock, log h, and `kernels.pointwise_sample`
for the other per-token rules, whose rows of `sampled` / `num_sampled` are overwritten.
vLLM's synthetic mode, block verification and watermarking run untouched.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable
from typing import Any

import torch

from cactus_core.maths.sampling import inverse_cdf_
from cactus_vllm import kernels, metrics, request_rules, rounds
from cactus_vllm.rules import LOG_H, POINTWISE, STOCK, PlannedRule

StockFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


class Layout:
    """Where the drafted rows of each request lie. Host-side lists are built once (one sync)."""

    def __init__(
        self,
        target_logits,
        draft_logits,
        draft_sampled,
        cu_num_logits,
        idx_mapping,
        expanded_idx_mapping,
        temperature,
    ) -> None:
        self.device = target_logits.device
        cu = cu_num_logits.long().tolist()
        self.starts, self.num_draft = cu[:-1], [b - a - 1 for a, b in itertools.pairwise(cu)]
        self.slots = idx_mapping.long().tolist()
        self.random = (temperature[idx_mapping.long()] != 0).tolist()
        self.draft_logits = draft_logits
        self.draft_sampled = draft_sampled
        self.temperature = temperature
        self.slot_of_row = expanded_idx_mapping.long()
        cu_t = cu_num_logits.long()
        rows_per_req = cu_t[1:] - cu_t[:-1]
        self.step_of_row = torch.arange(target_logits.shape[0], device=self.device) - (
            torch.repeat_interleave(cu_t[:-1], rows_per_req)
        )  # [num_logits] a row's offset within its request
        self.v = target_logits.shape[-1]

    def rows(self, reqs: list[int], first: list[int] | None = None) -> torch.Tensor:
        """The judged rows (not the bonus rows) of reqs; only the first `first[j]` of request
        reqs[j] when given."""
        counts = first if first is not None else [self.num_draft[i] for i in reqs]
        return kernels.spans([self.starts[i] for i in reqs], counts, self.device)

    def drafted(self, rows: torch.Tensor) -> torch.Tensor:
        return self.draft_sampled[rows + 1].long()

    def p(self, rows: torch.Tensor) -> torch.Tensor:
        """The draft's p at rows [Ts, V]: softmax(draft logits / T), or one-hot."""
        n = self.drafted(rows)
        if self.draft_logits is None:
            return kernels.draft_rows(None, n, self.v)
        slots = self.slot_of_row[rows]
        logits = self.draft_logits[slots, self.step_of_row[rows]].float()
        return torch.softmax(logits / self.temperature[slots].float()[:, None], dim=-1)


def wrap(stock: StockFn) -> StockFn:
    """The patched V2 `rejection_sample`: the stock signature (checked by plugin.py), its
    arguments bound by name, calling `stock`."""
    signature = inspect.signature(stock)

    @functools.wraps(stock)
    def rejection_sample(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return _sample(stock, bound.arguments)

    return rejection_sample


def _sample(stock: StockFn, a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """One verification step; `a` holds the stock arguments by name."""
    target_logits = a["target_logits"]
    special = a["synthetic_conditional_rates"] is not None or a["use_block_verification"]
    if special or a["contexts"] is not None:
        return stock(**a)
    layout = Layout(
        target_logits,
        a["draft_logits"],
        a["draft_sampled"],
        a["cu_num_logits"],
        a["idx_mapping"],
        a["expanded_idx_mapping"],
        a["temperature"],
    )
    plans = request_rules.rules_for_slots(layout.slots)
    runs = _runs(layout, plans)
    logits = target_logits
    if LOG_H in runs:
        logits = target_logits.float().clone()
        for planned, reqs in runs[LOG_H].items():
            rows = layout.rows(reqs)
            rows = rows[layout.drafted(rows) >= 0]
            logits[rows] = kernels.log_h_logits(
                planned.rule, target_logits[rows], layout.p(rows), layout.drafted(rows)
            )
    sampled, num_sampled = stock(**{**a, "target_logits": logits})
    for planned, reqs in runs.get(POINTWISE, {}).items():
        _pointwise(planned, reqs, layout, target_logits, sampled, num_sampled)
    if metrics.counting():
        _count(layout, plans, num_sampled, target_logits)
    return sampled, num_sampled


def _runs(
    layout: Layout, plans: list[PlannedRule | None]
) -> dict[str, dict[PlannedRule, list[int]]]:
    out: dict[str, dict[PlannedRule, list[int]]] = {}
    for i, planned in enumerate(plans):
        if planned is None or planned.path == STOCK:
            continue
        if layout.random[i] and layout.num_draft[i] > 0:
            out.setdefault(planned.path, {}).setdefault(planned, []).append(i)
    return out


def _pointwise(
    planned: PlannedRule,
    reqs: list[int],
    layout: Layout,
    target_logits: Any,
    sampled: torch.Tensor,
    num_sampled: torch.Tensor,
) -> None:
    rows = layout.rows(reqs)
    n = layout.drafted(rows)
    q = torch.softmax(target_logits[rows].float(), dim=-1)
    bonus_rows = torch.tensor(
        [layout.starts[i] + layout.num_draft[i] for i in reqs], device=layout.device
    )
    bonus_q = torch.softmax(target_logits[bonus_rows].float(), dim=-1)
    draws = torch.rand(len(reqs), device=layout.device)
    bonus = inverse_cdf_(bonus_q, draws)
    counts = [layout.num_draft[i] for i in reqs]
    tokens = kernels.pointwise_sample(
        planned.rule,
        q,
        layout.p(rows),
        n,
        counts,
        torch.rand(rows.shape[0], dtype=torch.float64, device=layout.device),
        torch.rand(len(reqs), device=layout.device),
        bonus,
    )
    index = torch.tensor(reqs, device=layout.device)
    sampled[index] = 0
    sampled[index, : tokens.shape[1]] = tokens.clamp_min(0).to(sampled.dtype)
    num_sampled[index] = (tokens != kernels.PLACEHOLDER).sum(-1).to(num_sampled.dtype)


def _count(
    layout: Layout,
    plans: list[PlannedRule | None],
    num_sampled: torch.Tensor,
    target_logits: torch.Tensor,
) -> None:
    def rows_of(reqs: list[int], decided: list[int], planned: PlannedRule):
        rows = layout.rows(reqs, decided)
        q = torch.softmax(target_logits[rows].float(), dim=-1)
        one_hot = layout.draft_logits is None and planned.path == LOG_H
        return layout.p(rows), q, layout.drafted(rows) if one_hot else None

    emitted = [int(x) for x in num_sampled.tolist()]  # accepted + 1 per request
    rounds.record(plans, layout.num_draft, emitted, layout.random, rows_of)
