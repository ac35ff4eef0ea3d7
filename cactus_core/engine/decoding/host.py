"""Bringing a round's numbers to the host: named tensors read back in one sync, the finiteness
check that rides along, and the verifier's T = 1 log-probabilities of the emitted tokens."""

from __future__ import annotations

from typing import Any

import torch


class NonFiniteProbabilities(ValueError):
    """A round's p or q holds NaN or infinity: the model's weights or logits are broken, and
    every rule would decide on garbage (sampling NaN rows picks the last id forever)."""


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
        span: slice | int = slice(start, start + width) if x.dim() == 2 else start
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


def finite_rows(probs: torch.Tensor) -> torch.Tensor:
    """[B, ..., V] -> [B] bool: every entry finite. One sum per row (a NaN or an infinity
    anywhere makes it non-finite), read back with the round's other numbers: no extra sync."""
    return torch.isfinite(probs.sum(-1)).reshape(probs.shape[0], -1).all(-1)


def check_finite(ok: int | bool, what: str) -> None:
    if not ok:
        raise NonFiniteProbabilities(
            f"the {what} holds NaN or infinite probabilities, so that model's weights or "
            "logits are not finite numbers; check its files"
        )


def pad_nan(x: torch.Tensor, width: int) -> torch.Tensor:
    """[B, w] -> [B, width], NaN after column w (positions that got no verifier row)."""
    return torch.cat([x, x.new_full((x.shape[0], width - x.shape[1]), float("nan"))], 1)


def logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[ids] at T = 1: logits [B, J, V], ids [B, J] -> [B, J] float64."""
    picked = logits.gather(-1, ids[..., None])[..., 0]
    return (picked - torch.logsumexp(logits, -1)).to(torch.float64)
