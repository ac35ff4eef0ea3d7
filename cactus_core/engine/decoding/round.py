"""The steps of one speculative round, in order: draw the coins, draft, verify, bring the
results to the host. `SpeculativeDecoder` strings them together and records what they return.

Shapes: B = sequences in the batch, k = draft length, V = vocabulary, J = verifier rows computed
(k + 1, or with the lazy head only up to the first rejection any sequence needs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cactus_core.engine.drafting.drafter import Draft, ProbsFn
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.rules import Rule
from cactus_core.maths.verify import VerifyResult, verify, verify_sequential


@dataclass
class Coins:
    """A round's uniforms. Each sequence draws all 2k + 1 from its own generator in this
    order whatever happens in the round, so it meets the same coins alone or in a batch."""

    draft: torch.Tensor  # [B, k] inverse-CDF coins of the drafted tokens
    accept: torch.Tensor  # [B, k] accept coins u_i (accepted iff u_i < a(n_i))
    sample: torch.Tensor  # [B] inverse-CDF coin of the recovered or bonus token


@dataclass
class Verdict:
    result: VerifyResult  # the rule's decisions: num_accepted [B], output_token_ids [B, k+1]
    q: torch.Tensor  # [B, J, V] the verifier's q at the first J positions
    logits: torch.Tensor  # [B, J, V] the raw logits behind q (for the T = 1 log-probabilities)


@dataclass
class HostRound:
    """One sequence's round as plain numbers: what the bookkeeping needs, fetched together."""

    num_accepted: int  # m, 0..k
    output_ids: list[int]  # [k+1] the m accepted drafts, the recovered/bonus token, then -1
    draft_ids: list[int]  # [k]
    accept_probs: list[float]  # [k] a(n_i); NaN after the decision with the lazy head
    accept_coins: list[float]  # [k]
    sample_coin: float
    q_n: list[float]  # [k] q at the drafted token; NaN where the verifier computed no row
    logprobs: list[float]  # [k+1] T = 1 log q of output_ids; NaN likewise

    @property
    def k(self) -> int:
        return len(self.draft_ids)

    @property
    def decided(self) -> int:
        """Drafted tokens that got an accept/reject decision (the rest were dropped)."""
        return min(self.num_accepted + 1, self.k)

    @property
    def emitted_ids(self) -> list[int]:
        return self.output_ids[: self.num_accepted + 1]


def draw_coins(generators: list[torch.Generator], k: int, device: torch.device) -> Coins:
    uniforms = torch.stack([torch.rand(2 * k + 1, generator=g, device=device) for g in generators])
    return Coins(draft=uniforms[:, :k], accept=uniforms[:, k : 2 * k], sample=uniforms[:, 2 * k])


def verify_draft(
    judge: Rule,
    cache: SequenceCache,
    last: torch.Tensor,
    draft: Draft,
    coins: Coins,
    probs: ProbsFn,
    lazy: bool,
) -> Verdict:
    """One verifier forward over [last token, n_1 .. n_k] (last: [B, 1]) gives q at k + 1
    positions; the judge decides. lazy computes the head only at the positions the decisions
    reach (`verify_sequential`): on a CPU the head over a large vocabulary costs as much per
    row as the layers, so a round that rejects early saves most of it."""
    ids = torch.cat([last, draft.ids], 1)  # [B, k+1]
    if lazy:
        hidden = cache.step_hidden(ids)  # [B, k+1, H]
        head_rows: list[torch.Tensor] = []  # [B, 1, V] each

        def q_row(j: int) -> torch.Tensor:
            head_rows.append(cache.logits(hidden[:, j : j + 1]))
            return probs(head_rows[-1])[:, 0]

        res, q = verify_sequential(judge, draft.probs, draft.ids, q_row, coins.accept, coins.sample)
        return Verdict(result=res, q=q, logits=torch.cat(head_rows, 1))
    logits = cache.step(ids, None, ids.shape[1])  # [B, k+1, V]
    q = probs(logits)
    res = verify(
        judge,
        draft.probs,
        draft.ids,
        q,
        uniforms=coins.accept,
        sample_uniforms=coins.sample,
        validate=False,  # the rows come straight from logits_to_probs
    )
    return Verdict(result=res, q=q, logits=logits)


def round_to_host(draft: Draft, verdict: Verdict, coins: Coins) -> list[HostRound]:
    """The round's numbers for every sequence, in one host sync."""
    res = verdict.result
    k, j = draft.ids.shape[1], verdict.q.shape[1]
    q_n = verdict.q[:, :k].gather(-1, draft.ids[:, : min(j, k), None])[..., 0]  # [B, min(J,k)]
    logp = logprobs(verdict.logits, res.output_token_ids[:, :j].clamp_min(0))  # [B, J]
    rows = to_host(
        num_accepted=res.num_accepted,
        output_ids=res.output_token_ids,
        draft_ids=draft.ids,
        accept_probs=res.accept_probs,
        accept_coins=coins.accept,
        sample_coin=coins.sample,
        q_n=_pad(q_n, k),
        logprobs=_pad(logp, k + 1),
    )
    return [HostRound(**row) for row in rows]


def to_host(**columns: torch.Tensor) -> list[dict[str, Any]]:
    """Named tensors, each [B] or [B, w], -> one {name: value} per sequence, with ONE host sync:
    a [B] column gives a number, a [B, w] one a list; integer tensors come back as ints.

    Every .tolist() is a device sync, so the columns travel as one float64 [B, W] table
    (exact for token ids) and are read back by name, from the spans recorded here.
    """
    parts, spans, start = [], {}, 0
    for name, x in columns.items():
        part = x if x.dim() == 2 else x[:, None]
        width = part.shape[1]
        span = slice(start, start + width) if x.dim() == 2 else start
        spans[name] = (span, not x.is_floating_point())
        parts.append(part.to(torch.float64))
        start += width
    table = torch.cat(parts, 1).tolist()
    return [
        {name: _cast(row[span], integer) for name, (span, integer) in spans.items()}
        for row in table
    ]


def _cast(value: float | list[float], integer: bool) -> Any:
    if not integer:
        return value
    return [int(v) for v in value] if isinstance(value, list) else int(value)


def _pad(x: torch.Tensor, width: int) -> torch.Tensor:
    """[B, w] -> [B, width], NaN after column w (positions that got no verifier row)."""
    return torch.cat([x, x.new_full((x.shape[0], width - x.shape[1]), float("nan"))], 1)


def logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[ids] at T = 1: logits [B, J, V], ids [B, J] -> [B, J] float64."""
    picked = logits.gather(-1, ids[..., None])[..., 0]
    return (picked - torch.logsumexp(logits, -1)).to(torch.float64)
