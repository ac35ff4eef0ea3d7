"""One verification step under the lab's rules, shared by both of vLLM's rejection samplers.

Each sampler's wrapper (`v1_sampler` for the V1 model runner, `mrv2` for Model Runner V2)
describes where its requests' rows lie with a `Layout` and leaves the rest to this module:

- `group`: the requests of the step by path and rule (greedy rows and rules whose h is q are
  left to vLLM, whose exact match and lossless test they are);
- `with_log_h`: the target logits with log h at the drafted rows of the "log_h" requests,
  which the stock call then decides (vLLM's test min(1, h_n / p_n), residual (h − p)+);
- `pointwise`: each "pointwise" request's round through the lab's `verify`, on coins drawn
  from the request's own generator (`Layout.generators`);
- `count`: every request's round into the metrics, with the exact KL of its decided positions.

What p a rule is judged against is the Layout's: the drafter's probabilities when vLLM hands
them over, else one-hot at the drafted token (`Layout.one_hot`; ngram, and a draft model with
vLLM's default greedy drafting, which drafts the argmax). The README's "Which p the rules see"
says which each path gets.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

import torch

from cactus_vllm import kernels, rounds
from cactus_vllm.rules import LOG_H, POINTWISE, STOCK, PlannedRule

# path -> rule -> the requests (indices into the step's batch) under it
Runs = dict[str, dict[PlannedRule, list[int]]]


class Layout(ABC):
    """Where a step's requests lie in the sampler's tensors, and what each was drafted from.

    Subclasses set `num_draft` (drafts per request), `random` (its temperature is not 0), `v`
    (the vocabulary), `device` and `one_hot` (the drafter handed over no p), and say where
    a request's drafted rows are, the drafted ids, p, the coins' generators and the bonus.
    """

    num_draft: list[int]
    random: list[bool]
    v: int
    device: torch.device
    one_hot: bool

    @abstractmethod
    def rows(self, reqs: list[int], first: list[int] | None = None) -> torch.Tensor:
        """The drafted (judged) rows of requests reqs [Ts], in order; only the first
        `first[j]` of request reqs[j] when given."""

    @abstractmethod
    def drafted(self, rows: torch.Tensor) -> torch.Tensor:
        """n at rows [Ts] (int64; −1: a padded draft, always rejected)."""

    @abstractmethod
    def p(self, rows: torch.Tensor) -> torch.Tensor:
        """The draft's distribution at rows [Ts, V]: its probabilities, or one-hot at n."""

    @abstractmethod
    def generators(self, reqs: list[int]) -> list[torch.Generator | None]:
        """Where each request's coins come from (None: torch's global generator)."""

    @abstractmethod
    def bonus(self, reqs: list[int], generators: list[torch.Generator | None]) -> torch.Tensor:
        """The token [Rs] each request emits after all its drafts pass."""


def group(layout: Layout, plans: list[PlannedRule | None]) -> Runs:
    """Requests grouped by path and rule: only random rows with drafts under a rule that
    changes anything (greedy rows are exact match under every rule)."""
    out: Runs = {}
    for i, planned in enumerate(plans):
        if planned is None or planned.path == STOCK:
            continue
        if layout.random[i] and layout.num_draft[i] > 0:
            out.setdefault(planned.path, {}).setdefault(planned, []).append(i)
    return out


def with_log_h(layout: Layout, runs: Runs, target_logits: torch.Tensor) -> torch.Tensor:
    """The logits to hand the stock call: log h (float32) at the drafted rows of the log_h
    requests, the stock logits elsewhere; padded drafts keep theirs, so vLLM decides them as
    it would. The input itself is returned when no request needs log h."""
    if LOG_H not in runs:
        return target_logits
    logits = target_logits.float().clone()
    for planned, reqs in runs[LOG_H].items():
        rows = layout.rows(reqs)
        rows = rows[layout.drafted(rows) >= 0]
        logits[rows] = kernels.log_h_logits(
            planned.rule, target_logits[rows], layout.p(rows), layout.drafted(rows)
        )
    return logits


def coins(
    generators: list[torch.Generator | None], num_draft: list[int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(accept coins [Ts] float64, recovered-token coins [Rs]): request j draws its
    num_draft[j] accept coins, then its recovered token's coin, from generators[j]."""
    us, ss = [], []
    for g, count in zip(generators, num_draft, strict=True):
        where = g.device if g is not None else device
        draws = torch.rand(count + 1, dtype=torch.float64, generator=g, device=where)
        us.append(draws[:-1])
        ss.append(draws[-1:])
    return torch.cat(us).to(device), torch.cat(ss).to(device)


def pointwise(
    layout: Layout, runs: Runs, target_logits: torch.Tensor
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """(requests [Rs], their tokens [Rs, K + 1]) for each pointwise rule of the step: accepted
    drafts, then the recovered or bonus token, then kernels.PLACEHOLDER."""
    for planned, reqs in runs.get(POINTWISE, {}).items():
        rows = layout.rows(reqs)
        n = layout.drafted(rows)
        q = torch.softmax(target_logits[rows].float(), dim=-1)
        counts = [layout.num_draft[i] for i in reqs]
        generators = layout.generators(reqs)
        uniforms, sample_uniforms = coins(generators, counts, layout.device)
        bonus = layout.bonus(reqs, generators)
        tokens = kernels.pointwise_sample(
            planned.rule, q, layout.p(rows), n, counts, uniforms, sample_uniforms, bonus
        )
        yield reqs, tokens


def count(
    layout: Layout,
    plans: list[PlannedRule | None],
    emitted: list[int],
    target_logits: torch.Tensor,
) -> None:
    """Each request's round into the metrics (emitted[i]: its accepted drafts + 1), with the
    exact KL of its decided positions from the stock target logits (q) and p."""

    def rows_of(reqs: list[int], decided: list[int], planned: PlannedRule):
        rows = layout.rows(reqs, decided)
        q = torch.softmax(target_logits[rows].float(), dim=-1)
        one_hot_n = layout.drafted(rows) if layout.one_hot and planned.path == LOG_H else None
        return layout.p(rows), q, one_hot_n

    rounds.record(plans, layout.num_draft, emitted, layout.random, rows_of)
