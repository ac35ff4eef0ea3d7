"""One verification round of speculative sampling under any acceptance rule.

Letters follow the paper: p = draft, q = verifier. vLLM's rejection_sampler (whose shapes we
keep) uses the opposite letters: its "draft_probs" are our p, its "target_probs" our q.

Terms, for one sequence b of the batch and a draft of k tokens n_1..n_k:

- accepted token: a draft n_i whose coin passed, u_i < a(n_i), with every earlier draft of
  the round accepted too.
- rejected token: the first draft whose coin failed (u_i ≥ a(n_i)). It is not emitted, and
  the drafts after it get no decision at all.
- recovered token: drawn from the rule's residual at the rejected position and emitted in
  its place.
- bonus token: drawn from q at position k + 1 when all k drafts are accepted (no rule
  applies to it).
- output tokens: the accepted drafts, then exactly one recovered or bonus token, so a round
  emits num_accepted + 1 tokens.

Shapes (B = batch, k = draft length, V = vocabulary):

    draft_probs      [B, k, V]      p at each drafted position
    draft_token_ids  [B, k]         n_i, drawn from p
    target_probs     [B, k + 1, V]  q at each drafted position, plus the bonus position
    uniforms         [B, k]         accept coins u_i in [0, 1)
    sample_uniforms  [B]            the coin for the inverse-CDF draw of the recovered or
                                    bonus token
    accept_probs     [B, k]         a(n_i) (also after the first rejection: what it would
                                    have been; those positions got no decision). A rule
                                    that decides on the whole draft (`block`) reports its
                                    own per-draft chances here instead
    num_accepted     [B]            accepted drafts, 0..k
    output_token_ids [B, k + 1]     accepted drafts, then the recovered/bonus token, then -1

Passing uniforms and sample_uniforms back in replays a round exactly (common random numbers
across rules and deltas). No Python loop runs over the batch or the vocabulary, and nothing
syncs with the host except the input validation (one sync; `validate=False` skips it). The
residual is built only for the one position per sequence where it can be needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from cactus_core.maths.rules import NO_STATS, Drafted, Rule
from cactus_core.maths.sampling import inverse_cdf_
from cactus_core.maths.validation import (
    check_float,
    check_int,
    check_shape,
    id_checks,
    prob_checks,
    raise_if_any,
    uniform_checks,
    work_dtype,
)


@dataclass
class VerifyResult:
    output_token_ids: torch.Tensor  # [B, k+1] int64, -1 after the emitted tokens
    num_accepted: torch.Tensor  # [B] int64
    accept_probs: torch.Tensor  # [B, k] a(n_i)
    uniforms: torch.Tensor  # [B, k] accept coins
    sample_uniforms: torch.Tensor  # [B] coin of the recovered / bonus draw


def _check_inputs(
    rule: Rule,
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    target_probs: torch.Tensor,
    uniforms: torch.Tensor | None,
    sample_uniforms: torch.Tensor | None,
    validate: bool,
) -> None:
    if not isinstance(rule, Rule):
        raise ValueError(f"rule must come from make_rule(...), got {type(rule).__name__}")
    check_float("draft_probs", draft_probs)
    check_float("target_probs", target_probs)
    check_int("draft_token_ids", draft_token_ids)
    if draft_probs.dim() != 3:
        raise ValueError(f"draft_probs must be [B, k, V], got shape {list(draft_probs.shape)}")
    b, k, v = draft_probs.shape
    if k < 1:
        raise ValueError("draft_probs must hold at least one drafted position (k ≥ 1)")
    check_shape("draft_token_ids", draft_token_ids, (b, k))
    check_shape("target_probs", target_probs, (b, k + 1, v))
    if uniforms is not None:
        check_float("uniforms", uniforms)
        check_shape("uniforms", uniforms, (b, k))
    if sample_uniforms is not None:
        check_float("sample_uniforms", sample_uniforms)
        check_shape("sample_uniforms", sample_uniforms, (b,))
    for name, t in (("draft_token_ids", draft_token_ids), ("target_probs", target_probs)):
        if t.device != draft_probs.device:
            raise ValueError(f"{name} is on {t.device} but draft_probs is on {draft_probs.device}")
    if not validate:
        return
    checks = prob_checks("draft_probs", draft_probs) + prob_checks("target_probs", target_probs)
    checks += id_checks("draft_token_ids", draft_token_ids, v)
    if uniforms is not None:
        checks += uniform_checks("uniforms", uniforms)
    if sample_uniforms is not None:
        checks += uniform_checks("sample_uniforms", sample_uniforms)
    raise_if_any(checks)


def sample_coins(
    batch: int, k: int, device: torch.device | str, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh coins for one round: (uniforms [B, k], sample_uniforms [B]), float32."""
    coins = torch.rand((batch, k + 1), generator=generator, device=device)
    return coins[:, :k], coins[:, k]


def verify(
    rule: Rule,
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    target_probs: torch.Tensor,
    uniforms: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    sample_uniforms: torch.Tensor | None = None,
    *,
    validate: bool = True,
    hidden: torch.Tensor | None = None,
) -> VerifyResult:
    """Accept or reject a batch of drafts under `rule` and draw the recovered / bonus tokens.

    Coins not passed in are drawn from `generator` (on the inputs' device). hidden [B, k+1, H]:
    the verifier's final hidden states at the k + 1 rows, for a rule that `reads_hidden`.
    """
    _check_inputs(
        rule, draft_probs, draft_token_ids, target_probs, uniforms, sample_uniforms, validate
    )
    b, k, _ = draft_probs.shape
    device = draft_probs.device
    dtype = torch.promote_types(work_dtype(draft_probs), work_dtype(target_probs))
    if uniforms is None or sample_uniforms is None:
        fresh_u, fresh_s = sample_coins(b, k, device, generator)
        uniforms = fresh_u if uniforms is None else uniforms
        sample_uniforms = fresh_s if sample_uniforms is None else sample_uniforms

    n = draft_token_ids.long()  # [B, k]
    p = draft_probs  # [B, k, V]
    if rule.caps.round_level:
        return _verify_round(rule, p, n, target_probs, uniforms, sample_uniforms, dtype, hidden)
    q_k = target_probs[:, :k]  # [B, k, V] view
    pn = p.gather(-1, n.unsqueeze(-1)).squeeze(-1).to(dtype)  # [B, k]
    qn = q_k.gather(-1, n.unsqueeze(-1)).squeeze(-1).to(dtype)  # [B, k]
    # What a(n) needs from whole rows (thresholds, per-position delta, clip bounds): () for
    # pointwise rules, else tensors [B, k].
    st = rule.position_stats(q_k.to(dtype), p.to(dtype)) if rule.caps.needs_rows else NO_STATS
    decided = Drafted(qn, pn, st)  # [B, k]; the whole rows only at the residual's one row

    a = rule.accept(decided)  # [B, k]
    accepted = uniforms.to(a.dtype) < a  # [B, k]
    num_accepted = accepted.long().cumprod(-1).sum(-1)  # [B]
    out = _emit(rule, target_probs, p, n, decided, num_accepted, sample_uniforms, dtype)
    return VerifyResult(out, num_accepted, a, uniforms, sample_uniforms)


def _verify_round(
    rule: Rule,
    p: torch.Tensor,
    n: torch.Tensor,
    target_probs: torch.Tensor,
    uniforms: torch.Tensor,
    sample_uniforms: torch.Tensor,
    dtype: torch.dtype,
    hidden: torch.Tensor | None,
) -> VerifyResult:
    """A rule that decides on the whole draft (`block`): its accept_probs are its own
    per-draft chances, and a draft before num_accepted may be accepted whatever its coin."""
    extra = {"hidden": hidden} if rule.caps.reads_hidden else {}
    num_accepted, chances, last = rule.verify_round(
        p.to(dtype), n, target_probs.to(dtype), uniforms, sample_uniforms, **extra
    )
    out = _output_tokens(n, num_accepted, last)
    return VerifyResult(out, num_accepted, chances, uniforms, sample_uniforms)


def verify_sequential(
    rule: Rule,
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    target_row: Callable[[int], torch.Tensor],
    uniforms: torch.Tensor,
    sample_uniforms: torch.Tensor,
    hidden: torch.Tensor | None = None,
) -> tuple[VerifyResult, torch.Tensor]:
    """`verify` with q computed on demand, position by position, up to the first rejection.

    target_row(j) returns q at position j, [B, V] (j = k is the bonus position). A decision at
    position j needs only q_j, so a round that rejects its first draft needs one row of q
    instead of k + 1 (hidden as for `verify`). On a CPU, where the verifier's LM head over a
    large vocabulary costs about as much per row as a layer stack (and rows cost nearly
    linearly), this saves most of the head; on a GPU the k + 1 rows cost about what one does,
    and the host sync per position that this loop needs would cost more.

    Same coins, same decisions and same output tokens as `verify` on the full rows (tested).
    accept_probs is NaN at positions that got no decision. Also returns the rows computed,
    [B, J, V] with J = max(num_accepted) + 1 (a row past its own decision is still computed
    when another sequence of the batch needs that position).
    """
    if not isinstance(rule, Rule):
        raise ValueError(f"rule must come from make_rule(...), got {type(rule).__name__}")
    check_float("draft_probs", draft_probs)
    check_int("draft_token_ids", draft_token_ids)
    b, k, _ = draft_probs.shape
    check_shape("draft_token_ids", draft_token_ids, (b, k))
    check_shape("uniforms", uniforms, (b, k))
    check_shape("sample_uniforms", sample_uniforms, (b,))
    if rule.caps.round_level:  # it decides on all k + 1 rows at once
        target = torch.stack([target_row(j) for j in range(k + 1)], 1)  # [B, k+1, V]
        args = (draft_probs, draft_token_ids, target, uniforms, None, sample_uniforms)
        return verify(rule, *args, validate=False, hidden=hidden), target
    n = draft_token_ids.long()  # [B, k]
    p = draft_probs  # [B, k, V]
    rows: list[torch.Tensor] = []  # q_j, [B, V] each
    pns, qns, sts, accs = [], [], [], []  # [B, 1] each (stats: a tuple of [B, 1])
    alive = torch.ones(b, dtype=torch.bool, device=p.device)  # [B] no rejection yet
    num_accepted = torch.zeros(b, dtype=torch.long, device=p.device)  # [B]
    dtype = work_dtype(draft_probs)
    for j in range(k + 1):
        q_j = target_row(j)  # [B, V]
        check_shape(f"target_row({j})", q_j, (b, p.shape[-1]))
        rows.append(q_j)
        if j == k:
            break
        dtype = torch.promote_types(work_dtype(p), work_dtype(q_j))
        n_j = n[:, j : j + 1]  # [B, 1]
        pn = p[:, j].gather(-1, n_j).to(dtype)  # [B, 1]
        qn = q_j.gather(-1, n_j).to(dtype)  # [B, 1]
        st = (
            rule.position_stats(q_j[:, None].to(dtype), p[:, j : j + 1].to(dtype))
            if rule.caps.needs_rows
            else NO_STATS
        )  # each [B, 1]
        a = rule.accept(Drafted(qn, pn, st))  # [B, 1]
        passed = uniforms[:, j : j + 1].to(a.dtype) < a  # [B, 1]
        num_accepted += (alive & passed[:, 0]).long()
        alive &= passed[:, 0]
        pns.append(pn)
        qns.append(qn)
        sts.append(st)
        accs.append(a)
        if not bool(alive.any()):  # the one host sync per position
            break
    decided = len(accs)
    target = torch.stack(rows, 1)  # [B, J, V]
    pn_all, qn_all = torch.cat(pns, 1), torch.cat(qns, 1)  # [B, decided]
    st_all = tuple(torch.cat(parts, 1) for parts in zip(*sts, strict=True))  # each [B, J]
    a_all = torch.cat(accs, 1)  # [B, decided]
    judged = Drafted(qn_all, pn_all, st_all)  # [B, decided]
    out = _emit(rule, target, p, n, judged, num_accepted, sample_uniforms, dtype)
    pad = a_all.new_full((b, k - decided), float("nan"))
    a_full = torch.cat([a_all, pad], 1)  # [B, k]
    return VerifyResult(out, num_accepted, a_full, uniforms, sample_uniforms), target


def _emit(
    rule: Rule,
    target_probs: torch.Tensor,
    p: torch.Tensor,
    n: torch.Tensor,
    decided: Drafted,
    num_accepted: torch.Tensor,
    sample_uniforms: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Draw the recovered or bonus token and lay out the output tokens [B, k+1].

    target_probs [B, J, V] holds q at positions 0..J-1 with J > num_accepted; `decided`
    holds q_n, p_n and the stats [B, d] at least up to the rejected position."""
    b, k = n.shape
    device = n.device
    # One row per sequence: q at the first rejection, or q's bonus row when all passed.
    j = num_accepted.clamp(max=k - 1)  # [B] position of the rejection (if any)
    base = torch.arange(b, device=device)
    q_row = _rows(target_probs, base * target_probs.shape[1] + num_accepted)
    p_row = _rows(p, base * k + j)
    q_row, p_row = q_row.to(dtype), p_row.to(dtype)  # [B, V]
    take = j.unsqueeze(-1)
    at = Drafted(
        decided.qn.gather(1, take).squeeze(1),
        decided.pn.gather(1, take).squeeze(1),
        tuple(s.gather(1, take).squeeze(1) for s in decided.stats),  # each [B]
        q_row,
        p_row,
        n.gather(1, take).squeeze(1),
    )
    weights = rule.residual_weights(at)  # [B, V]
    # Bonus rows sample q itself. Arithmetic row selection in place: torch.where over
    # [B, V] is several times slower on CPU, and fresh [B, V] buffers cost page faults.
    bonus = (num_accepted == k).unsqueeze(-1).to(weights.dtype)  # [B, 1]
    weights.mul_(1 - bonus).addcmul_(q_row, bonus)
    last = inverse_cdf_(weights, sample_uniforms)  # [B]
    return _output_tokens(n, num_accepted, last)


def _output_tokens(n: torch.Tensor, num_accepted: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """[B, k+1]: the accepted drafts n [B, k], then the recovered/bonus token last [B], then -1."""
    positions = torch.arange(n.shape[1] + 1, device=n.device)  # [k+1]
    drafts = torch.cat([n, n.new_zeros(n.shape[0], 1)], dim=1)  # [B, k+1]
    out = torch.where(positions < num_accepted.unsqueeze(-1), drafts, -1)
    return out.scatter(1, num_accepted.unsqueeze(-1), last.unsqueeze(-1))


def _rows(x: torch.Tensor, flat_idx: torch.Tensor) -> torch.Tensor:
    """Rows of x [B, m, V] at flat indices [B] -> [B, V]. index_select into a preallocated
    output takes the row-copy fast path; without `out` it measured ten times slower on CPU."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.empty((flat_idx.shape[0], x.shape[-1]), dtype=x.dtype, device=x.device)
    return torch.index_select(flat, 0, flat_idx, out=out)
