"""Peak memory of a batched prefill of near-context prompts (the Frontier's sweep chunks).

    PYTHONPATH=.:tests .venv/bin/python benchmarks/bench_prefill_memory.py \
        [--rows 1 5] [--tokens 2000 4000 8000]

Each case runs in a fresh interpreter and reports the growth of its peak resident set while
`SequenceCache.prefill` encodes `rows` prompts of about `tokens` tokens (unequal lengths, so
padding holes force the dense attention mask), on the tests' tiny random Llama (hidden 64,
4 heads) with a context of 8,192. The mask and the attention scores grow with rows × width²,
whatever the model's size; the model's own activations are negligible here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASE = """
import resource, sys, torch
sys.path.insert(0, "tests")
from conftest import make_tiny_pair
from cactus_core.engine.runtime.kv_cache import SequenceCache
torch.set_num_threads(1)
rows, tokens = {rows}, {tokens}
pair = make_tiny_pair(context=8192)
prefixes = [[3 + (i * 7 + j) % 250 for j in range(tokens - 37 * i)] for i in range(rows)]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cache = SequenceCache(pair.verifier, 259)
cache.prefill(prefixes)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) / 1024)
"""


def peak_growth_mb(rows: int, tokens: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CASE.format(rows=rows, tokens=tokens)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 5])
    ap.add_argument("--tokens", type=int, nargs="+", default=[2000, 4000, 8000])
    args = ap.parse_args()
    results = []
    for rows in args.rows:
        for tokens in args.tokens:
            mb = peak_growth_mb(rows, tokens)
            results.append({"rows": rows, "tokens": tokens, "peak_growth_mb": round(mb, 1)})
            print(json.dumps(results[-1]), flush=True)


if __name__ == "__main__":
    main()
