"""vLLM V1's `rejection_sample` (vllm/v1/sample/rejection_sampler.py) under the lab's rules.

`wrap(stock)` returns a function with the stock signature. Per request of the batch:

- greedy rows (temperature 0), rows of requests without a rule, and rules whose h is q
  (δ = 0): exactly the stock call, on the stock logits;
- "log_h" rules: the stock call, with log h in place of the target logits at the request's
  drafted positions (vLLM's kernels then run the rule: rules.py);
- "pointwise" rules: the stock call fills the other requests, and `kernels.pointwise_sample`
  (the lab's `verify`) overwrites the rows of these, on coins from the request's own
  generator (its seed), or torch's global one for a request without a seed.

Padded drafts (id −1) keep their stock logits: vLLM decides them as it would. The bonus
rows (target logits of position k + 1) never reach this function: vLLM samples them apart.
Then every request's round is counted in `metrics` (one host sync). The steps are
`dispatch`'s, shared with Model Runner V2; this module says where V1's rows lie.

p: `draft_probs` [T, V] when the drafter hands them over (a draft model with
`draft_sample_method: "probabilistic"`: softmax(draft logits / T)), else None, which vLLM's
kernels and the rules read as one-hot at the drafted token (ngram; a draft model with vLLM's
default greedy drafting, whose drafted token is the draft's argmax).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from cactus_vllm import dispatch, kernels, metrics, request_rules

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
        layout = Batch(
            draft_token_ids,
            num_draft_tokens,
            sampling_metadata,
            draft_probs,
            target_logits,
            bonus_token_ids,
        )
        plans = request_rules.rules_for_batch(sampling_metadata, len(num_draft_tokens))
        runs = dispatch.group(layout, plans)
        out = call(dispatch.with_log_h(layout, runs, target_logits))
        for reqs, tokens in dispatch.pointwise(layout, runs, target_logits):
            index = torch.tensor(reqs, device=out.device)
            out[index] = kernels.PLACEHOLDER
            out[index, : tokens.shape[1]] = tokens.to(out.dtype)
        if metrics.counting():
            emitted = (out != kernels.PLACEHOLDER).sum(-1).tolist()  # the host sync
            dispatch.count(layout, plans, emitted, target_logits)
        return out

    rejection_sample.__wrapped__ = stock  # type: ignore[attr-defined]
    rejection_sample.__name__ = "rejection_sample"
    return rejection_sample


class Batch(dispatch.Layout):
    """V1's flattened layout: request i's drafts are rows starts[i] .. starts[i + 1] − 1 of
    draft_token_ids, draft_probs and target_logits."""

    def __init__(
        self,
        draft_token_ids: torch.Tensor,
        num_draft: list[int],
        sampling_metadata: Any,
        draft_probs: torch.Tensor | None,
        target_logits: torch.Tensor,
        bonus_token_ids: torch.Tensor,
    ) -> None:
        self.num_draft = num_draft
        self.n = draft_token_ids
        self.v = target_logits.shape[-1]
        self.device = target_logits.device
        self.draft_probs = draft_probs
        self.one_hot = draft_probs is None
        self.bonus_token_ids = bonus_token_ids
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
        counts = first if first is not None else [self.num_draft[i] for i in reqs]
        return kernels.spans([self.starts[i] for i in reqs], counts, self.device)

    def drafted(self, rows: torch.Tensor) -> torch.Tensor:
        return self.n[rows].long()

    def p(self, rows: torch.Tensor) -> torch.Tensor:
        probs = None if self.draft_probs is None else self.draft_probs[rows]
        return kernels.draft_rows(probs, self.n[rows], self.v)

    def generators(self, reqs: list[int]) -> list[torch.Generator | None]:
        # vLLM keeps a generator for each request with a seed; the others draw from torch's
        # global one, as vLLM's own sampler does for them.
        return [self.meta.generators.get(i) for i in reqs]

    def bonus(self, reqs: list[int], generators: list[torch.Generator | None]) -> torch.Tensor:
        index = torch.tensor(reqs, device=self.bonus_token_ids.device)
        return self.bonus_token_ids[index].view(-1)  # vLLM samples the bonus rows apart
