"""The plugin's tensor work, in torch only (no vLLM import), so that it is testable anywhere.

Letters follow the lab (DESIGN.md): p = the draft's distribution, q = the verifier's, n = the
drafted token, h = what a rule verifies against, pi = what is emitted. vLLM calls the draft
"draft" and the verifier "target".

Shapes, in vLLM V1's flattened layout (requests one after another):

    target_logits  [T, V]   the verifier's processed logits at each drafted position
    draft_probs    [T, V]   p there, or None when the drafter gives none (ngram, greedy
                            drafting): one-hot at the drafted token
    draft ids      [T]      n (vLLM pads with -1, which is always rejected)
    num_draft      [R]      drafts per request, summing to T
"""

from __future__ import annotations

import torch

from cactus_core.maths.divergence import kl
from cactus_core.maths.rules import Rule
from cactus_core.maths.sampling import inverse_cdf_
from cactus_core.maths.verify import verify

PLACEHOLDER = -1  # vLLM's PLACEHOLDER_TOKEN_ID: no token at this slot


def expand_batch_to_tokens(
    x: torch.Tensor,
    cu_num_tokens: torch.Tensor,
    num_tokens: int,
    replace_from: int = 0,
    replace_to: int = 0,
) -> torch.Tensor:
    """x [R] -> [num_tokens]: request i's value repeated for its tokens, with values equal to
    replace_from replaced by replace_to (vLLM's `expand_batch_to_tokens`, same arguments).
    cu_num_tokens [R] holds the cumulative token counts. Keeps x's dtype."""
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    values = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    return torch.repeat_interleave(values, counts, output_size=num_tokens)


def spans(starts: list[int], counts: list[int], device: torch.device | str) -> torch.Tensor:
    """The indices starts[j], …, starts[j] + counts[j] − 1 of every j, in order [Σ counts]."""
    first = torch.tensor(starts, dtype=torch.long)
    sizes = torch.tensor(counts, dtype=torch.long)
    offsets = torch.arange(int(sizes.sum())) - torch.repeat_interleave(
        sizes.cumsum(0) - sizes, sizes
    )
    return (torch.repeat_interleave(first, sizes) + offsets).to(device)


def draft_rows(draft_probs: torch.Tensor | None, n: torch.Tensor, vocab: int) -> torch.Tensor:
    """p [T, V] in float32: the draft's rows, or one-hot rows at n for drafters without
    probabilities (a padded n = -1 gets a one-hot row at 0; such a draft is rejected anyway)."""
    if draft_probs is not None:
        return draft_probs.float()
    return torch.nn.functional.one_hot(n.long().clamp_min(0), vocab).float()


def log_h_logits(
    rule: Rule, logits: torch.Tensor, p: torch.Tensor, n: torch.Tensor
) -> torch.Tensor:
    """log h [T, V] (−inf where h = 0) from the processed verifier logits [T, V], p [T, V] and
    n [T]. Handed to vLLM's sampler in place of the logits, softmax gives back h, so its test
    min(1, h_n / p_n) and residual (h − p)+ are the rule's own (rules.py checks which rules
    have that form)."""
    q = torch.softmax(logits.float(), dim=-1)
    h = rule.adjusted_target(q, p, n.long().clamp_min(0), validate=False)
    return torch.log(h.float())


def pointwise_sample(
    rule: Rule,
    q: torch.Tensor,
    p: torch.Tensor,
    n: torch.Tensor,
    num_draft: list[int],
    uniforms: torch.Tensor,
    sample_uniforms: torch.Tensor,
    bonus: torch.Tensor,
) -> torch.Tensor:
    """One round for R requests under any per-token rule, through the lab's `verify`.

    q, p [T, V], n [T] (−1: padded, rejected, its token drawn from q as vLLM does),
    num_draft [R] (each ≥ 1), uniforms [T] (accept coins), sample_uniforms [R] (the coin of the
    recovered token), bonus [R] (vLLM's bonus tokens, taken when every draft passed).
    Returns [R, K + 1] int64, K = max(num_draft): accepted drafts, then the recovered or bonus
    token, then PLACEHOLDER.
    """
    r, k, v = len(num_draft), max(num_draft), q.shape[-1]
    counts = torch.tensor(num_draft, device=q.device)
    slot = torch.arange(k, device=q.device).expand(r, k) < counts[:, None]  # [R, K] real draft
    padded_n = n.new_full((r, k), PLACEHOLDER).masked_scatter_(slot, n)  # [R, K]
    coins = uniforms.new_full((r, k), 2.0).masked_scatter_(slot, uniforms)  # 2: never < a(n)
    coins = torch.where(padded_n < 0, torch.full_like(coins, 2.0), coins)
    p_rows = q.new_full((r, k, v), 1.0 / v)
    p_rows[slot] = p
    q_rows = q.new_full((r, k + 1, v), 1.0 / v)
    q_rows[:, :k][slot] = q
    res = verify(
        rule,
        p_rows,
        padded_n.clamp_min(0),
        q_rows,
        uniforms=coins.float(),
        sample_uniforms=sample_uniforms.float(),
        validate=False,
    )
    out, accepted = res.output_token_ids, res.num_accepted  # [R, K+1], [R]
    rows = torch.arange(r, device=q.device)
    stop = accepted.clamp(max=k - 1)
    padded_stop = (padded_n[rows, stop] < 0) & (accepted < counts)
    if bool(padded_stop.any()):  # a padded draft: vLLM draws its replacement from q itself
        redraw = inverse_cdf_(q_rows[rows, stop].clone(), sample_uniforms.float())
        out[rows, accepted] = torch.where(padded_stop, redraw, out[rows, accepted])
    all_passed = accepted == counts
    out[rows, accepted] = torch.where(all_passed, bonus.long().view(-1), out[rows, accepted])
    return out


def emitted_kl(
    rule: Rule, p: torch.Tensor, q: torch.Tensor, one_hot_n: torch.Tensor | None = None
) -> torch.Tensor:
    """KL(pi ‖ q) [T] in nats at each position, pi the rule's exact emitted distribution for
    draft p and verifier q [T, V] (0 for a lossless rule).

    one_hot_n [T]: the drafts are one-hot at these ids (ngram's) and the rule has the ratio
    form (rules.LOG_H). Then pi is h^(n) itself (accept n with h_n, else draw from h without
    n), an O(V) row instead of the rule's general pi (a sort per row for the Cactus family).
    """
    if rule.caps.lossless or p.shape[0] == 0:
        return q.new_zeros(q.shape[0])
    q = q.float()
    if one_hot_n is not None:
        pi = rule.adjusted_target(q, p.float(), one_hot_n.long().clamp_min(0), validate=False)
    else:
        pi = rule.emitted(p.float(), q)
    return kl(pi, q)
