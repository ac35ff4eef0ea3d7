"""Helpers for the plugin's tests: a batch description for calling `rejection_sample`
directly, random probability rows and a χ² test in torch (no scipy in vLLM's environment)."""

from __future__ import annotations

from types import SimpleNamespace

import torch


def metadata(temperature: torch.Tensor, rules: dict | None = None, generators=None):
    """What `rejection_sample` reads of vLLM's SamplingMetadata, with the plugin's rule tracker
    holding {row: rule} (rules: row -> PlannedRule)."""
    from cactus_vllm.request_rules import tracker_class

    tracker = tracker_class()(None, "cpu", False)
    tracker.rules.update(rules or {})
    greedy = temperature == 0
    return SimpleNamespace(
        temperature=temperature,
        all_greedy=bool(greedy.all()),
        all_random=bool((~greedy).all()),
        generators=generators or {},
        logitsprocs=SimpleNamespace(all=[tracker]),
    )


def dirichlet(v: int, rows: int, seed: int, conc: float = 0.5) -> torch.Tensor:
    """Dirichlet(conc) rows [rows, v] in float32 from a fixed seed."""
    gen = torch.Generator().manual_seed(seed)
    g = torch._standard_gamma(torch.full((rows, v), conc, dtype=torch.float64), generator=gen)
    return (g / g.sum(-1, keepdim=True)).float()


def chi2_pvalue(counts: torch.Tensor, expected_probs: torch.Tensor) -> float:
    """Pearson's χ² test of counts [V] against probabilities [V]; cells expected below 5 are
    pooled into one. Returns the p-value (the upper tail of χ², through torch's gammaincc)."""
    total = counts.sum().double()
    exp = expected_probs.double() * total
    big = exp >= 5
    obs = torch.cat([counts.double()[big], counts.double()[~big].sum().view(1)])
    exp = torch.cat([exp[big], exp[~big].sum().view(1)])
    keep = exp > 0
    if bool((obs[~keep] > 0).any()):
        return 0.0  # a draw where the expected mass is 0
    obs, exp = obs[keep], exp[keep]
    dof = obs.numel() - 1
    if dof == 0:  # one cell holds all the expected mass, and (checked above) every draw
        return 1.0
    stat = ((obs - exp) ** 2 / exp).sum()
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), stat / 2.0))
