"""Random probability rows shared by the maths tests."""

from __future__ import annotations

import torch


def dirichlet(v: int, shape: tuple[int, ...], seed: int, conc: float = 0.5) -> torch.Tensor:
    """Dirichlet(conc) rows [*shape, v] in float64 from a fixed seed."""
    gen = torch.Generator().manual_seed(seed)
    g = torch._standard_gamma(torch.full((*shape, v), conc, dtype=torch.float64), generator=gen)
    return g / g.sum(-1, keepdim=True)
