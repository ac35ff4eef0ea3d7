"""Logits to probabilities (temperature, top-k, top-p) and inverse-CDF sampling.

Both the draft's p and the verifier's q go through `logits_to_probs` with the same settings,
so the rules compare like with like. Order of the filters: temperature, then top-k, then
top-p (Hugging Face's order).
"""

from __future__ import annotations

import torch

from cactus_core.maths.limit import sort_nonneg
from cactus_core.maths.validation import check_float, check_number


def logits_to_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """logits [..., V] -> probs [..., V] (float32; float64 input stays float64).

    temperature = 0 gives the one-hot argmax (greedy; ties go to the lowest id).
    top_k = 0 switches top-k off. top_p keeps the smallest set of most likely tokens whose
    mass reaches top_p (the most likely token always stays); top_p = 1 switches it off.
    """
    check_float("logits", logits)
    temperature = check_number("sampling", "temperature", temperature, 0.0, 1e6)
    top_k = check_number("sampling", "top_k", top_k, 0, 2**31 - 1, integer=True)
    top_p = check_number("sampling", "top_p", top_p, 0.0, 1.0)
    if top_p <= 0.0:
        raise ValueError(f"sampling: top_p must be a number in (0, 1], got {top_p!r}")
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    x = logits.to(dtype)
    vocab = x.shape[-1]
    if temperature == 0.0:
        ids = x.argmax(-1, keepdim=True)
        return torch.zeros_like(x).scatter_(-1, ids, 1.0)
    x = x / temperature
    if 0 < top_k < vocab:
        kth = x.topk(top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if top_p < 1.0:
        probs = probs.masked_fill(_outside_nucleus(probs, top_p), 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


# Most nuclei at chat temperatures hold a few dozen tokens, so a top-k this wide usually
# contains the whole nucleus and spares sorting the vocabulary.
_NUCLEUS_PROBE = 64


def _outside_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Boolean [..., V]: the tokens top-p drops. Token j in descending order is dropped once the
    mass strictly before it reaches top_p (the most likely token always stays)."""
    vocab = probs.shape[-1]
    flat = probs.reshape(-1, vocab)
    if probs.device.type != "cpu" or vocab <= _NUCLEUS_PROBE:
        # A GPU sorts fast, and picking out the wide rows would cost a host sync.
        vals, order = flat.sort(-1, descending=True)
        drop = torch.empty_like(flat, dtype=torch.bool)
        return drop.scatter_(-1, order, _drop_sorted(vals, top_p)).reshape(probs.shape)
    vals, order = flat.topk(_NUCLEUS_PROBE, dim=-1)  # [N, m], descending
    # Rows whose top m reach top_p have their whole nucleus among them; the rest sort fully.
    wide = (vals.sum(-1) < top_p).nonzero()[:, 0].tolist()
    drop = torch.ones_like(flat, dtype=torch.bool)
    drop.scatter_(-1, order, _drop_sorted(vals, top_p))
    if wide:
        rows = torch.tensor(wide, device=probs.device)
        vals_w, order_w = sort_nonneg(flat[rows], descending=True)
        drop[rows] = torch.zeros_like(drop[rows]).scatter_(-1, order_w, _drop_sorted(vals_w, top_p))
    return drop.reshape(probs.shape)


def _drop_sorted(sorted_p: torch.Tensor, top_p: float) -> torch.Tensor:
    before = sorted_p.cumsum(-1) - sorted_p
    drop = before >= top_p
    drop[..., 0] = False
    return drop


def sample_from_probs(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: weights [..., V] (non-negative, need not sum to 1), u [...] in [0, 1)
    -> ids [...] (int64). A token of weight 0 is never returned (rows need positive mass).

    Passing the same u replays the same token, which is what lets a round be replayed.
    """
    return inverse_cdf_(probs.clone(), u)


def inverse_cdf_(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """`sample_from_probs` that turns `weights` into its CDF in place (no new [..., V] buffer)."""
    cdf = weights.cumsum_(-1)
    total = cdf[..., -1:]
    x = u.unsqueeze(-1).to(cdf.dtype) * total
    # u < 1 but u * total can round up to total; stay strictly below it so that the search
    # lands on a token whose own weight is positive.
    x = torch.minimum(x, torch.nextafter(total, torch.zeros_like(total)))
    ids = torch.searchsorted(cdf, x.contiguous(), right=True).squeeze(-1)
    return ids.clamp_(max=cdf.shape[-1] - 1)
