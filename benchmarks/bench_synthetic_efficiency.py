"""Efficiency against the limit on synthetic rows, to compare with the sweep's on real models.

The rows are the test suite's generator (tests/test_frontier.py): 256 positions, V = 2,000,
drafts that track q with unit noise at temperatures 0.5–2. Efficiency = the rule's exact
expected acceptance sum_n p(n)·a(n) ÷ the limit at the same mean KL(pi ‖ q), as in the sweep.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_synthetic_efficiency.py
"""

from __future__ import annotations

import torch

from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.limit import limit_sums
from cactus_core.maths.rules import make_rule, rule_class

GRIDS = {"cactus": (0.1, 0.3, 1.0, 3.0), "tas": rule_class("tas").params_spec[0].grid}
GRIDS["interp"] = (0.02, 0.05, 0.1, 0.2, 0.3)


def synthetic_rows(n: int = 256, v: int = 2000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, v, generator=g, dtype=torch.float64) * 2.0
    temp = torch.linspace(0.5, 2.0, n, dtype=torch.float64)[:, None]
    q = torch.softmax(base / temp, -1)
    p = torch.softmax((base + torch.randn(n, v, generator=g, dtype=torch.float64)) / temp, -1)
    return p, q


def main() -> None:
    torch.set_num_threads(1)
    p, q = synthetic_rows()
    curve = limit_sums(p, q).curve()
    for name, values in GRIDS.items():
        cells = []
        for value in values:
            rule = make_rule(name, **{rule_class(name).params_spec[0].name: value})
            acc = float((p * rule.accept_probs_all(p, q)).sum(-1).mean())
            mean_kl = float(kl(emitted_distribution(rule, p, q), q).mean())
            cells.append(f"{value:g}: {acc / curve.at(mean_kl):.3f} (KL {mean_kl:.2f})")
        print(name, "; ".join(cells))


if __name__ == "__main__":
    main()
