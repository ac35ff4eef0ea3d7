"""Logits to probabilities (temperature, top-k, top-p) and inverse-CDF sampling.

Both the draft's p and the verifier's q go through `logits_to_probs` with the same settings,
so the rules compare like with like. Order of the filters: temperature, then top-k, then
top-p (Hugging Face's order).
"""

from __future__ import annotations

import torch

from cactus_core.validation import check_float, check_number


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
        sorted_p, order = probs.sort(-1, descending=True)
        # Mass strictly before each token; drop the token once that already reaches top_p.
        before = sorted_p.cumsum(-1) - sorted_p
        drop_sorted = before >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


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
