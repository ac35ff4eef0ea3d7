"""One speculative round with a chain of k drafts, for a batch: draft, verify, decide, bring the
numbers to the host, cut the caches back to what was accepted. `ChainRounds.run` mirrors
`tree_round.run_tree_round`; both return a `RoundOutcome`.

Shapes: B = sequences in the batch, k = draft length, V = vocabulary, J = verifier rows computed
(k + 1, or with the lazy head only up to the first rejection any sequence needs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cactus_core.engine.decoding.clock import RoundClock
from cactus_core.engine.decoding.host import check_finite, finite_rows, logprobs, pad_nan, to_host
from cactus_core.engine.decoding.outcome import QRest, RoundOutcome
from cactus_core.engine.drafting.drafter import Draft, Drafter, ProbsFn
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.rules import Rule
from cactus_core.maths.sampling import SamplingSettings
from cactus_core.maths.tree import TreeVerdict
from cactus_core.maths.verify import VerifyResult, verify, verify_sequential


@dataclass
class Coins:
    """A round's uniforms. Each sequence draws all 2k + 1 from its own generator in this
    order whatever happens in the round, so it meets the same coins alone or in a batch."""

    draft: torch.Tensor  # [B, k] inverse-CDF coins of the drafted tokens
    accept: torch.Tensor  # [B, k] accept coins u_i (accepted iff u_i < a(n_i))
    sample: torch.Tensor  # [B] inverse-CDF coin of the recovered or bonus token


def draw_coins(generators: list[torch.Generator], k: int, device: torch.device) -> Coins:
    uniforms = torch.stack([torch.rand(2 * k + 1, generator=g, device=device) for g in generators])
    return Coins(draft=uniforms[:, :k], accept=uniforms[:, k : 2 * k], sample=uniforms[:, 2 * k])


class ChainRounds:
    """A chain drafter's rounds (`caches.Rounds`): k drafts per row of a batch, fewer when the
    context has less room."""

    def __init__(self, drafter: Drafter[Draft]) -> None:
        self.drafter = drafter

    def size(self, k: int, room: int, rows: int) -> int:
        return max(0, min(k, room))

    def draw_coins(
        self, generators: list[torch.Generator], size: int, device: torch.device
    ) -> Coins:
        return draw_coins(generators, size, device)

    @torch.inference_mode()
    def run(
        self,
        judge: Rule,
        verifier: SequenceCache,
        last: list[int],
        coins: Coins,
        sampling: SamplingSettings,
        clock: RoundClock,
        lazy: bool = False,
    ) -> RoundOutcome:
        """Draft k tokens per row, verify them in one pass under the rule, read the round back
        in one host sync, keep the accepted tokens in the verifier's cache, and let the draft
        take in what was committed. last [B]: each row's last committed token."""
        with clock.draft:
            draft = self.drafter.propose(coins.draft, sampling.probs)
        with clock.verify:
            ids = torch.cat([torch.tensor(last, device=draft.ids.device)[:, None], draft.ids], 1)
            result, q, logits, q_rest = verify_draft(
                judge, verifier, ids, draft, coins, sampling.probs, lazy
            )
            verdicts, lps = round_to_host(draft, result, q, logits, coins)
            k = draft.ids.shape[1]  # each row keeps its m accepted drafts of the k fed
            accepted = [len(v.path) for v in verdicts]
            verifier.keep([n - k + m for n, m in zip(verifier.lengths, accepted, strict=True)])
        with clock.draft:
            self.drafter.after_verify(verifier, [list(v.emitted) for v in verdicts])
        draft_s, verify_s = clock.lap()
        return RoundOutcome(verdicts, draft.probs, q, lps, k, draft_s, verify_s, q_rest=q_rest)


def verify_draft(
    judge: Rule,
    cache: SequenceCache,
    ids: torch.Tensor,
    draft: Draft,
    coins: Coins,
    probs: ProbsFn,
    lazy: bool,
) -> tuple[VerifyResult, torch.Tensor, torch.Tensor, QRest | None]:
    """One verifier forward over ids = [last token, n_1 .. n_k] [B, k + 1] gives q at k + 1
    positions; the judge decides: (its result, q [B, J, V], the raw logits behind q, and the
    rows the head left unscored). lazy computes the head only at the positions the decisions
    reach (`verify_sequential`): on a CPU the head over a large vocabulary costs as much per
    row as the layers, so a round that rejects early saves most of it. The rows it skipped are
    returned as a function, which a full trace calls on the recording thread (`RoundOutcome`):
    the decoding thread never waits for them."""
    if lazy:
        hidden = cache.step_hidden(ids)  # [B, k+1, H]
        head_rows: list[torch.Tensor] = []  # [B, 1, V] each

        def q_row(j: int) -> torch.Tensor:
            head_rows.append(cache.logits(hidden[:, j : j + 1]))
            return probs(head_rows[-1])[:, 0]

        judged = hidden if judge.caps.reads_hidden else None
        res, q = verify_sequential(
            judge, draft.probs, draft.ids, q_row, coins.accept, coins.sample, judged
        )
        scored = q.shape[1]
        rest = hidden[:, scored:]  # [B, k+1-J, H]

        def q_rest() -> torch.Tensor:
            return probs(cache.logits(rest))  # [B, k+1-J, V]

        return res, q, torch.cat(head_rows, 1), q_rest if rest.shape[1] else None
    judged = None
    if judge.caps.reads_hidden:  # the judge reads the hidden states the head turns into q
        judged = cache.step_hidden(ids)  # [B, k+1, H]
        logits = cache.logits(judged)
    else:
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
        hidden=judged,
    )
    return res, q, logits, None


def round_to_host(
    draft: Draft, res: VerifyResult, q: torch.Tensor, logits: torch.Tensor, coins: Coins
) -> tuple[list[TreeVerdict], list[list[float]]]:
    """Every row's verdict and the T = 1 log-probabilities of its emitted tokens, in one host
    sync (which also checks that p and q are finite)."""
    k, j = draft.ids.shape[1], q.shape[1]
    at = draft.ids[:, : min(j, k), None]
    q_n = q[:, :k].gather(-1, at)[..., 0]  # [B, min(J, k)]
    p_n = draft.probs.gather(-1, draft.ids[..., None])[..., 0]  # [B, k]
    logp = logprobs(logits, res.output_token_ids[:, :j].clamp_min(0))  # [B, J]
    rows = to_host(
        num_accepted=res.num_accepted,
        output_ids=res.output_token_ids,
        draft_ids=draft.ids,
        accept_probs=res.accept_probs,
        accept_coins=coins.accept,
        sample_coin=coins.sample,
        p_n=p_n,
        q_n=pad_nan(q_n, k),
        logprobs=pad_nan(logp, k + 1),
        p_finite=finite_rows(draft.probs),
        q_finite=finite_rows(q),
    )
    verdicts: list[TreeVerdict] = []
    lps: list[list[float]] = []
    for row in rows:
        check_finite(row.pop("p_finite"), "draft's p")
        check_finite(row.pop("q_finite"), "verifier's q")
        lps.append(row.pop("logprobs")[: row["num_accepted"] + 1])
        verdicts.append(TreeVerdict.of_chain(**row))
    return verdicts, lps
