"""Logits to probabilities (temperature, top-k, top-p) and inverse-CDF sampling.

Both the draft's p and the verifier's q go through `logits_to_probs` with the same settings,
so the rules compare like with like. Order of the filters: temperature, then top-k, then
top-p (Hugging Face's order).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from cactus_core.maths.tensor_ops import sort_nonneg
from cactus_core.maths.validation import check_float, check_number

K_MAX = 16  # draft length: past this, acceptance has long stopped paying for the drafting
SEED_MAX = 2**63 - 1  # torch.Generator.manual_seed's range
# The smallest positive temperature. Dividing logits by a tinier one overflows float32 to inf,
# and softmax of inf - inf is NaN; at 0.01 a logit gap of 1 is already a factor e^100, so
# nothing between it and greedy (T = 0) samples differently in practice.
MIN_TEMPERATURE = 0.01
TEMPERATURE_MAX = 1e6


def check_temperature(value: object) -> float:
    """0 (greedy) or a number in [MIN_TEMPERATURE, TEMPERATURE_MAX]; the error names both."""
    number = None if isinstance(value, bool) or not isinstance(value, int | float) else value
    if (
        number is None
        or not math.isfinite(number)
        or not (number == 0 or MIN_TEMPERATURE <= number <= TEMPERATURE_MAX)
    ):
        raise ValueError(
            f"temperature must be 0 (greedy) or a number in [{MIN_TEMPERATURE:g}, "
            f"{TEMPERATURE_MAX:g}], got {value!r}"
        )
    return float(number)


@dataclass(frozen=True)
class SamplingSettings:
    """How tokens are sampled, shared by the decoder, the app, sweeps and the CLI (whose flags
    are built from these fields and their `help`). Validated here, once."""

    temperature: float = field(
        default=0.7, metadata={"help": f"0 = greedy, else at least {MIN_TEMPERATURE:g}"}
    )
    top_k: int = field(default=0, metadata={"help": "0 = off"})
    top_p: float = field(default=1.0, metadata={"help": "1 = off"})
    k: int = field(default=4, metadata={"help": f"draft length, 1..{K_MAX}"})
    seed: int = field(default=0, metadata={"help": "row i of a batch uses seed + i"})

    def __post_init__(self) -> None:
        check_temperature(self.temperature)
        _check_whole("top_k", self.top_k, 0, 2**31 - 1)
        _check_real("top_p", self.top_p, 0.0, 1.0)
        if self.top_p <= 0:
            raise ValueError(f"top_p must be a number in (0, 1], got {self.top_p!r}")
        _check_whole("k", self.k, 1, K_MAX)
        _check_whole("seed", self.seed, 0, SEED_MAX)
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_p", float(self.top_p))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [..., V] -> p or q [..., V] under these settings."""
        return logits_to_probs(logits, self.temperature, self.top_k, self.top_p)

    @classmethod
    def resolve(
        cls, sampling: SamplingSettings | None, k: int, temperature: float, top_k: int, top_p: float
    ) -> SamplingSettings:
        """A decoder's one SamplingSettings, from `sampling` or from its keywords (which must
        then be left at these defaults, as the decoder's signature has them)."""
        if sampling is None:
            return cls(temperature=temperature, top_k=top_k, top_p=top_p, k=k)
        if not isinstance(sampling, SamplingSettings):
            raise ValueError(f"sampling must be a SamplingSettings, got {sampling!r}")
        d = cls()
        if (k, temperature, top_k, top_p) != (d.k, d.temperature, d.top_k, d.top_p):
            # Silently preferring one of two conflicting values would hide a caller's mistake.
            raise ValueError(
                "give k, temperature, top_k and top_p either in sampling= or as keywords"
            )
        return sampling

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def field_specs(cls) -> list[tuple[str, type, Any, str]]:
        """(name, type, default, help) of each field, for building CLI flags and widgets."""
        types = {"temperature": float, "top_p": float}
        return [
            (f.name, types.get(f.name, int), f.default, f.metadata["help"]) for f in fields(cls)
        ]


def _check_real(name: str, value: object, low: float, high: float) -> None:
    number = None if isinstance(value, bool) or not isinstance(value, int | float) else value
    if number is None or not math.isfinite(number) or not low <= number <= high:
        raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")


def _check_whole(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


def logits_to_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """logits [..., V] -> probs [..., V] (float32; float64 input stays float64).

    temperature = 0 gives the one-hot argmax (greedy; ties go to the lowest id); a positive
    temperature is at least MIN_TEMPERATURE.
    top_k = 0 switches top-k off. top_p keeps the smallest set of most likely tokens whose
    mass reaches top_p (the most likely token always stays); top_p = 1 switches it off.
    """
    check_float("logits", logits)
    temperature = check_temperature(temperature)
    top_k = int(check_number("sampling", "top_k", top_k, 0, 2**31 - 1, integer=True))
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
