"""What sharpening the draft would give sps: expected acceptance for p_s ∝ p^s.

Raising the draft's probabilities to a power s (sampling it at temperature T / s) changes only
the draft, so sps stays exact for any s, and its acceptance at a position is
sum_x min(p_s(x), q(x)). This decodes the built-in prompts with sps on an embedded pair and, at
every decided position (all drafted positions up to and including a round's first rejection),
scores that sum for several s on the same p and q rows, so the comparison is paired. The
positions are those the s = 1 draft reached: a first-order estimate of what a sharpened draft
would accept, not a decode with it.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_draft_sharpening.py \\
        --embedded-draft feature-float32 --top-p 1.0 --prompts 10 --max-new-tokens 64
"""

from __future__ import annotations

import argparse

import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.loading.embedded_drafts import embedded_draft_named, embedded_draft_names
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.maths.rules import make_rule

POWERS = (0.8, 0.9, 1.0, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0)


class SharpenedAcceptance:
    """A decoder probe: sum_x min(p_s, q) at every decided position, for each power s."""

    def __init__(self, powers: tuple[float, ...]) -> None:
        self.powers = powers
        self.all: dict[float, list[float]] = {s: [] for s in powers}
        self.first: dict[float, list[float]] = {s: [] for s in powers}

    def __call__(self, row: int, round_index: int, p: torch.Tensor, q: torch.Tensor) -> None:
        p, q = p.double(), q.double()  # [d, V] each
        for s in self.powers:
            ps = p**s
            ps = ps / ps.sum(dim=-1, keepdim=True)
            accept = torch.minimum(ps, q).sum(dim=-1).tolist()  # [d]
            self.all[s].extend(accept)
            self.first[s].append(accept[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedded-draft", default="feature", choices=embedded_draft_names())
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    choice = embedded_draft_named(args.embedded_draft)
    pair = load_pair(device="cpu", **choice.load_kwargs("cpu"))
    probe = SharpenedAcceptance(POWERS)
    sampling = {"k": args.k, "temperature": args.temperature, "top_p": args.top_p}
    dec = SpeculativeDecoder(pair, make_rule("sps"), probe=probe, **sampling)
    for i, prompt in enumerate(builtin_prompts()[: args.prompts]):
        dec.generate(prompt, max_new_tokens=args.max_new_tokens, seed=i)
    n = len(probe.all[1.0])
    print(f"{choice.label}, T {args.temperature:g}, top-p {args.top_p:g}, k {args.k}: {n} "
          f"decided positions ({len(probe.first[1.0])} rounds)\n")  # fmt: skip
    print("| s | expected acceptance, every decided position | at draft position 1 |")
    print("|---:|---:|---:|")
    for s in POWERS:
        every = sum(probe.all[s]) / n
        first = sum(probe.first[s]) / len(probe.first[s])
        print(f"| {s:g} | {every:.4f} | {first:.4f} |")


if __name__ == "__main__":
    main()
