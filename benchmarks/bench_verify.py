"""Time one `verify` call per rule next to a memory floor, and `emitted_distribution` per rule.

    .venv/bin/python benchmarks/bench_verify.py [--batch 32] [--k 8] [--vocab 49152]

The memory floor is one read pass over the same input tensors (a sum over draft_probs and
target_probs): no verify can beat it, since validation alone has to read every entry.
Rules are timed round-robin (each round runs every rule once) so that load on a shared
machine hits them alike; the table shows medians. Prints Markdown.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import RULE_NAMES, make_rule
from cactus_core.maths.verify import verify

SLOW_RULES = ("cactus-budget", "optimal")  # per-position searches: timed once


def make_inputs(b: int, k: int, v: int, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    # peaky, LM-like rows: softmax of scaled Gaussian logits
    p = torch.softmax(3 * torch.randn(b, k, v, generator=gen), -1)
    q = torch.softmax(3 * torch.randn(b, k + 1, v, generator=gen), -1)
    ids = torch.multinomial(p.reshape(-1, v), 1, generator=gen).view(b, k)
    return p.to(device), ids.to(device), q.to(device)


def timer(device: str) -> Callable[[Callable[[], object]], float]:
    def run(fn: Callable[[], object]) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3

    return run


def bench_verify(
    b: int, k: int, v: int, device: str, repeats: int, skip_slow: bool
) -> list[tuple[str, float]]:
    p, ids, q = make_inputs(b, k, v, device)
    run = timer(device)
    rules = {name: make_rule(name) for name in RULE_NAMES if not (skip_slow and name in SLOW_RULES)}
    cases: dict[str, Callable[[], object]] = {
        "memory floor (one read pass)": lambda: (p.sum(), q.sum()),
    }
    for name, rule in rules.items():
        cases[name] = lambda rule=rule: verify(rule, p, ids, q)
    for name in ("sps", "cactus"):
        cases[f"{name}, validate=False"] = lambda rule=rules[name]: verify(
            rule, p, ids, q, validate=False
        )
    times: dict[str, list[float]] = {name: [] for name in cases}
    for name, fn in cases.items():  # warm-up (the slow rules' single run is their timing)
        t = run(fn)
        if name in SLOW_RULES:
            times[name].append(t)
    for _ in range(repeats):
        for name, fn in cases.items():
            if name not in SLOW_RULES:
                times[name].append(run(fn))
    return [(name, statistics.median(ts)) for name, ts in times.items()]


def bench_emitted(v: int, repeats: int) -> list[tuple[str, float, float]]:
    """Per rule: median ms at one position [V] and at k = 4 positions [4, V] (the decoder
    computes pi for every drafted position of a round)."""
    p, _, q = make_inputs(1, 4, v, "cpu", seed=1)
    p, q = p[0], q[0, :4]  # [4, V]
    run = timer("cpu")
    out = []
    for name in RULE_NAMES:
        rule = make_rule(name)
        n = 3 if name in SLOW_RULES else repeats
        times = []
        for pb, qb in ((p[0], q[0]), (p, q)):
            emitted_distribution(rule, pb, qb)
            fn = lambda r=rule, pb=pb, qb=qb: emitted_distribution(r, pb, qb)  # noqa: E731
            times.append(statistics.median(run(fn) for _ in range(n)))
        out.append((name, *times))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    ap.add_argument("--skip-emitted", action="store_true")
    ap.add_argument("--skip-slow", action="store_true", help="leave out cactus-budget, optimal")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"torch {torch.__version__}, CPU threads {torch.get_num_threads()}")
    for device in devices:
        rows = bench_verify(args.batch, args.k, args.vocab, device, args.repeats, args.skip_slow)
        floor = rows[0][1]
        sps = dict(rows)["sps"]
        print(f"\nverify, B={args.batch} k={args.k} V={args.vocab}, {device}, median ms\n")
        print("| case | ms | × floor | × sps |")
        print("|---|---:|---:|---:|")
        for name, ms in rows:
            print(f"| {name} | {ms:.1f} | {ms / floor:.2f} | {ms / sps:.2f} |", flush=True)
    if not args.skip_emitted:
        print(f"\nemitted_distribution, V={args.vocab}, cpu, median ms\n")
        print("| rule | one position [V] | k = 4 positions [4, V] |")
        print("|---|---:|---:|")
        for name, one, four in bench_emitted(args.vocab, args.repeats):
            print(f"| {name} | {one:.1f} | {four:.1f} |", flush=True)


if __name__ == "__main__":
    main()
