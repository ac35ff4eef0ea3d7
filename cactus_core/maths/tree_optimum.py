"""How far a tree's node is from the best any lossless verifier could do there.

At a node with m candidates drawn without replacement from p, a lossless verifier emits a
token Y with law q, and the node's acceptance is P(Y is one of the candidates D). Over every
coupling of D and Y that is at most the optimal-transport value (Hu et al., Towards Optimal
Multi-draft Speculative Decoding, arXiv 2502.18779). As a max-flow from draft sets to tokens
its min-cut reads

    alpha* = min over token sets H of  1 + q(H) − P(D ⊆ H),

and the minimum is reached on a set of the tokens with the smallest q/p, so only the V prefixes
of the tokens sorted by q/p need checking (the paper's result; tests/test_tree_optimum.py checks
it against every subset on small vocabularies). For one candidate P(D ⊆ H) = p(H) and alpha*
= sum min(p, q), what `sps` reaches; for two, P(D ⊆ H) = sum_{x∈H} p(x)·(p(H) − p(x)) /
(1 − p(x)). Three or more candidates have no closed form here and are refused.

`rrs_acceptance` is what the lab's walk (`maths.tree`, recursive rejection sampling with `sps`)
reaches at such a node on average over the draws of its candidates, exactly: with one
candidate sum min(p, q); with two,

    sum min(p, q) + sum_x max(0, p(x) − q(x)) · sum_{y≠x} min(p(y) / (1 − p(x)), r(y)),

r = normalise(max(0, q − p)) the residual after the first rejection (the same whatever x was),
the inner sum computed for every x at once from r/p sorted.

Shapes: p, q [..., V]; results [...].
"""

from __future__ import annotations

import torch

from cactus_core.maths.validation import work_dtype

_ONE = 1e-12  # 1 − p(x) below this: p is one token, which gets no second candidate


def _check_m(m: int) -> None:
    if m not in (1, 2):
        raise ValueError(
            f"the optimum is computed for 1 or 2 candidates at a node, got {m}: more have no "
            "closed form here"
        )


def multidraft_optimum(p: torch.Tensor, q: torch.Tensor, m: int) -> torch.Tensor:
    """alpha* [...]: the most a lossless verifier can accept at a node with m candidates
    (1 or 2) drawn without replacement from p, q the verifier's law there."""
    _check_m(m)
    dtype = torch.promote_types(work_dtype(p), work_dtype(q))
    p, q = p.to(dtype), q.to(dtype)
    ratio = torch.where(p > 0, q / p.clamp_min(1e-300), torch.inf)
    order = ratio.argsort(-1)
    ps, qs = p.gather(-1, order), q.gather(-1, order)  # [..., V], smallest q/p first
    cum_p, cum_q = ps.cumsum(-1), qs.cumsum(-1)
    if m == 1:
        inside = cum_p
    else:
        single = (1 - ps) < _ONE  # p is this one token: D = {x}
        odds = torch.where(single, 0.0, ps / (1 - ps).clamp_min(_ONE))
        sq = torch.where(single, 0.0, ps * ps / (1 - ps).clamp_min(_ONE))
        inside = cum_p * odds.cumsum(-1) - sq.cumsum(-1)
        inside = torch.where(single.any(-1, keepdim=True), cum_p, inside)
    value = (1 + cum_q - inside).amin(-1)
    return value.clamp(0.0, 1.0)


def rrs_acceptance(p: torch.Tensor, q: torch.Tensor, m: int) -> torch.Tensor:
    """[...]: the chance that recursive rejection sampling (`sps`, candidates drawn without
    replacement) accepts one of m (1 or 2) candidates at a node, over the draws, exactly."""
    _check_m(m)
    dtype = torch.promote_types(work_dtype(p), work_dtype(q))
    p, q = p.to(dtype), q.to(dtype)
    beta = torch.minimum(p, q).sum(-1)  # [...]
    if m == 1:
        return beta
    excess = (q - p).clamp_min(0.0)
    r = excess / excess.sum(-1, keepdim=True).clamp_min(1e-300)  # [..., V]
    t = torch.where(p > 0, r / p.clamp_min(1e-300), torch.inf)
    order = t.argsort(-1)
    ts, rs, ps = t.gather(-1, order), r.gather(-1, order), p.gather(-1, order)
    zero = torch.zeros_like(ts[..., :1])
    r_below = torch.cat([zero, rs.cumsum(-1)], -1)  # [..., V + 1] mass of r with t < s
    p_below = torch.cat([zero, ps.cumsum(-1)], -1)
    second = (1 - p) >= _ONE
    s = torch.where(second, 1 / (1 - p).clamp_min(_ONE), 0.0)  # [..., V] the second draw's scale
    idx = torch.searchsorted(ts.contiguous(), s.contiguous())  # [..., V] how many t < s
    g = r_below.gather(-1, idx) + s * (p.sum(-1, keepdim=True) - p_below.gather(-1, idx))
    g = torch.where(second, g, 0.0)
    return beta + ((p - q).clamp_min(0.0) * g).sum(-1)


__all__ = ["multidraft_optimum", "rrs_acceptance"]
