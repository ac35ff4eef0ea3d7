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

p: softmax(draft_logits[slot, step] / T) with `draft_sample_method: "probabilistic"` (what
vLLM's kernels compute from them), else one-hot at the drafted token (vLLM's default greedy
drafting drafts the argmax; ngram has no logits).

Coins: vLLM's kernels draw a request's coins from its seed and the row's position (every
request has a seed: vLLM draws one for a request that names none). The pointwise rules' coins
come from the same two numbers (`step_generator`), so a seeded request repeats here too.

The same three paths as V1 (`dispatch`): stock, log h, and `kernels.pointwise_sample`
for the other per-token rules, whose rows of `sampled` / `num_sampled` are overwritten.
vLLM's synthetic mode, block verification and watermarking run untouched (`guard` refuses
a rule on deployments that use them).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import struct
from collections.abc import Callable
from typing import Any

import torch

from cactus_core.maths.sampling import inverse_cdf_
from cactus_vllm import dispatch, kernels, metrics, request_rules

StockFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def step_generator(seed: int, position: int, device: torch.device | str) -> torch.Generator:
    """The generator of one request's coins at one step: a function of the request's seed
    and the position of its first judged row, as vLLM's own coins are (distinct pairs give
    unrelated streams; the same pair, the same coins)."""
    digest = hashlib.blake2b(struct.pack("<qq", seed, position), digest_size=8).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest, "little"))


class Layout(dispatch.Layout):
    """Where the drafted rows of each request lie. Host-side lists are built once (one sync)."""

    def __init__(
        self,
        target_logits: torch.Tensor,
        draft_logits: torch.Tensor | None,
        draft_sampled: torch.Tensor,
        cu_num_logits: torch.Tensor,
        pos: torch.Tensor,
        idx_mapping: torch.Tensor,
        expanded_idx_mapping: torch.Tensor,
        temperature: torch.Tensor,
        seed: torch.Tensor,
    ) -> None:
        self.device = target_logits.device
        cu = cu_num_logits.long().tolist()
        self.starts, self.num_draft = cu[:-1], [b - a - 1 for a, b in itertools.pairwise(cu)]
        self.slots = idx_mapping.long().tolist()
        self.random = (temperature[idx_mapping.long()] != 0).tolist()
        self.target_logits = target_logits
        self.draft_logits = draft_logits
        self.one_hot = draft_logits is None
        self.draft_sampled = draft_sampled
        self.temperature = temperature
        self.pos = pos
        self.seed = seed
        self.slot_of_row = expanded_idx_mapping.long()
        cu_t = cu_num_logits.long()
        rows_per_req = cu_t[1:] - cu_t[:-1]
        self.step_of_row = torch.arange(target_logits.shape[0], device=self.device) - (
            torch.repeat_interleave(cu_t[:-1], rows_per_req)
        )  # [num_logits] a row's offset within its request
        self.v = target_logits.shape[-1]

    def rows(self, reqs: list[int], first: list[int] | None = None) -> torch.Tensor:
        counts = first if first is not None else [self.num_draft[i] for i in reqs]
        return kernels.spans([self.starts[i] for i in reqs], counts, self.device)

    def drafted(self, rows: torch.Tensor) -> torch.Tensor:
        return self.draft_sampled[rows + 1].long()

    def p(self, rows: torch.Tensor) -> torch.Tensor:
        n = self.drafted(rows)
        if self.draft_logits is None:
            return kernels.draft_rows(None, n, self.v)
        slots = self.slot_of_row[rows]
        logits = self.draft_logits[slots, self.step_of_row[rows]].float()
        return torch.softmax(logits / self.temperature[slots].float()[:, None], dim=-1)

    def generators(self, reqs: list[int]) -> list[torch.Generator | None]:
        slots = torch.tensor([self.slots[i] for i in reqs], device=self.seed.device)
        first = torch.tensor([self.starts[i] for i in reqs], device=self.pos.device)
        seeds = self.seed[slots].long().tolist()  # one sync for the pointwise requests
        positions = self.pos[first].long().tolist()
        return [step_generator(s, at, self.device) for s, at in zip(seeds, positions, strict=True)]

    def bonus(self, reqs: list[int], generators: list[torch.Generator | None]) -> torch.Tensor:
        # The bonus row is sampled here: V2's stock call draws it only where its own test
        # passed every draft. Its coin follows the request's accept and recovered coins.
        bonus_rows = torch.tensor(
            [self.starts[i] + self.num_draft[i] for i in reqs], device=self.device
        )
        q = torch.softmax(self.target_logits[bonus_rows].float(), dim=-1)
        draws = torch.cat([torch.rand(1, generator=g, device=self.device) for g in generators])
        return inverse_cdf_(q, draws)


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
        a["pos"],
        a["idx_mapping"],
        a["expanded_idx_mapping"],
        a["temperature"],
        a["seed"],
    )
    plans = request_rules.rules_for_slots(layout.slots)
    runs = dispatch.group(layout, plans)
    logits = dispatch.with_log_h(layout, runs, target_logits)
    sampled, num_sampled = stock(**{**a, "target_logits": logits})
    for reqs, tokens in dispatch.pointwise(layout, runs, target_logits):
        index = torch.tensor(reqs, device=layout.device)
        sampled[index] = 0
        sampled[index, : tokens.shape[1]] = tokens.clamp_min(0).to(sampled.dtype)
        num_sampled[index] = (tokens != kernels.PLACEHOLDER).sum(-1).to(num_sampled.dtype)
    if metrics.counting():
        emitted = [int(x) for x in num_sampled.tolist()]  # accepted + 1 per request
        dispatch.count(layout, plans, emitted, target_logits)
    return sampled, num_sampled
