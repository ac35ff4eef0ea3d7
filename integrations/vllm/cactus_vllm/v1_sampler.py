"""vLLM V1's `rejection_sample` (vllm/v1/sample/rejection_sampler.py) under the lab's rules.

`wrap(stock)` returns a function with the stock signature. Per request of the batch:

- greedy rows (temperature 0), rows of requests without a rule, and rules whose h is q
  (δ = 0): exactly the stock call, on the stock logits;
- "log_h" rules: the stock call, with log h in place of the target logits at the request's
  drafted positions (vLLM's kernels then run the rule: rules.py);
- "pointwise" rules: the stock call fills the other requests, and `kernels.pointwise_sample`
  (the lab's `verify`) overwrites the rows of these.

Padded drafts (id −1) keep their stock logits: vLLM decides them as it would. The bonus
rows (target logits of position k + 1) never reach this function: vLLM samples them apart.
Then every request's round is counted in `metrics` (one host sync).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from cactus_vllm import kernels, metrics, request_rules, rounds
from cactus_vllm.rules import LOG_H, POINTWISE, STOCK, PlannedRule

StockFn = Callable[..., torch.Tensor]


def wrap(stock: StockFn) -> StockFn:
    """The patched `rejection_sample`, calling `stock` for everything it leaves as it is."""

    def rejection_sample(
        draft_token_ids: torch.Tensor,  # [T]
        num_draft_tokens: list[int],  # [R]
        max_spec_len: int,
        cu_num_draft_tokens: torch.Tensor,  # [R]
        draft_probs: torch.Tensor | None,  # [T, V]
        target_logits: torch.Tensor,  # [T, V]
        bonus_token_ids: torch.Tensor,  # [R, 1]
        sampling_metadata: Any,
        synthetic_mode: bool = False,
        synthetic_conditional_rates: torch.Tensor | None = None,
        use_fp64_gumbel: bool = False,
    ) -> torch.Tensor:
        def call(logits: torch.Tensor) -> torch.Tensor:
            return stock(
                draft_token_ids,
                num_draft_tokens,
                max_spec_len,
                cu_num_draft_tokens,
                draft_probs,
                logits,
                bonus_token_ids,
                sampling_metadata,
                synthetic_mode=synthetic_mode,
                synthetic_conditional_rates=synthetic_conditional_rates,
                use_fp64_gumbel=use_fp64_gumbel,
            )

        if synthetic_mode:  # vLLM's synthetic acceptance replaces every rule by design
            return call(target_logits)
        batch = Batch(draft_token_ids, num_draft_tokens, sampling_metadata, target_logits)
        plans = request_rules.rules_for_batch(sampling_metadata, len(num_draft_tokens))
        runs = batch.runs(plans)
        logits = target_logits
        if LOG_H in runs:
            logits = target_logits.clone()
            for planned, reqs in runs[LOG_H].items():
                rows = batch.valid_rows(reqs)
                p = kernels.draft_rows(
                    batch.pick(draft_probs, rows), draft_token_ids[rows], batch.v
                )
                logits[rows] = kernels.log_h_logits(
                    planned.rule, target_logits[rows], p, draft_token_ids[rows]
                )
        out = call(logits)
        for planned, reqs in runs.get(POINTWISE, {}).items():
            _pointwise(planned, reqs, batch, draft_probs, target_logits, bonus_token_ids, out)
        if metrics.counting():
            _count(batch, plans, out, draft_probs, target_logits)
        return out

    rejection_sample.__wrapped__ = stock  # type: ignore[attr-defined]
    rejection_sample.__name__ = "rejection_sample"
    return rejection_sample


class Batch:
    """Where each request's drafted positions lie in the flattened layout."""

    def __init__(
        self,
        draft_token_ids: torch.Tensor,
        num_draft: list[int],
        sampling_metadata: Any,
        target_logits: torch.Tensor,
    ) -> None:
        self.num_draft = num_draft
        self.n = draft_token_ids
        self.v = target_logits.shape[-1]
        self.device = target_logits.device
        self.starts = [0]
        for count in num_draft:
            self.starts.append(self.starts[-1] + count)
        self.meta = sampling_metadata
        temperature = sampling_metadata.temperature
        if sampling_metadata.all_greedy or temperature is None:
            self.random = [False] * len(num_draft)
        else:
            self.random = (temperature != 0).tolist()

    def rows(self, reqs: list[int], first: list[int] | None = None) -> torch.Tensor:
        """The flattened positions of requests reqs [Rs] -> [Ts] (int64), in order; only the
        first `first[j]` of request reqs[j] when given."""
        counts = first if first is not None else [self.num_draft[i] for i in reqs]
        return kernels.spans([self.starts[i] for i in reqs], counts, self.device)

    def valid_rows(self, reqs: list[int]) -> torch.Tensor:
        rows = self.rows(reqs)
        return rows[self.n[rows] >= 0]

    @staticmethod
    def pick(draft_probs: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor | None:
        return None if draft_probs is None else draft_probs[rows]

    def runs(self, plans: list[PlannedRule | None]) -> dict[str, dict[PlannedRule, list[int]]]:
        """Requests grouped by path and rule; only random rows with drafts under a rule that
        changes anything (greedy rows are exact match under every rule)."""
        out: dict[str, dict[PlannedRule, list[int]]] = {}
        for i, planned in enumerate(plans):
            if planned is None or planned.path == STOCK:
                continue
            if self.random[i] and self.num_draft[i] > 0:
                out.setdefault(planned.path, {}).setdefault(planned, []).append(i)
        return out

    def coins(self, reqs: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(accept coins [Ts] float64, recovered-token coins [Rs]), from each request's own
        generator when it has a seed, else from torch's global one."""
        us, ss = [], []
        for i in reqs:
            g = self.meta.generators.get(i)
            device = g.device if g is not None else self.device
            draws = torch.rand(
                self.num_draft[i] + 1, dtype=torch.float64, generator=g, device=device
            )
            us.append(draws[:-1])
            ss.append(draws[-1:])
        return torch.cat(us).to(self.device), torch.cat(ss).to(self.device)


def _pointwise(
    planned: PlannedRule,
    reqs: list[int],
    batch: Batch,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """Overwrite the output rows [Rs, K+1] of requests reqs with their round under the rule."""
    rows = batch.rows(reqs)
    n = batch.n[rows]
    q = torch.softmax(target_logits[rows].float(), dim=-1)
    p = kernels.draft_rows(Batch.pick(draft_probs, rows), n, batch.v)
    uniforms, sample_uniforms = batch.coins(reqs)
    index = torch.tensor(reqs, device=out.device)
    tokens = kernels.pointwise_sample(
        planned.rule,
        q,
        p,
        n.long(),
        [batch.num_draft[i] for i in reqs],
        uniforms,
        sample_uniforms,
        bonus_token_ids[index].view(-1),
    )
    width = tokens.shape[1]
    out[index] = kernels.PLACEHOLDER
    out[index, :width] = tokens.to(out.dtype)


def _count(
    batch: Batch,
    plans: list[PlannedRule | None],
    out: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
) -> None:
    """Each request's round into the metrics (accepted = emitted − 1), with the exact KL of
    its decided positions from the stock target logits (q) and p."""

    def rows_of(reqs: list[int], decided: list[int], planned: PlannedRule):
        rows = batch.rows(reqs, decided)
        n = batch.n[rows]
        q = torch.softmax(target_logits[rows].float(), dim=-1)
        p = kernels.draft_rows(Batch.pick(draft_probs, rows), n, batch.v)
        return p, q, n if draft_probs is None and planned.path == LOG_H else None

    emitted = (out != kernels.PLACEHOLDER).sum(-1).tolist()  # the host sync
    rounds.record(plans, batch.num_draft, emitted, batch.random, rows_of)
