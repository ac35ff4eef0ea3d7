"""Per-call costs behind the decoder's speedup, on the embedded pair (CPU, one thread):

1. one forward through the decoder's KV cache (the prompt as context) of the verifier for 1
   and for 5 tokens, of the draft for 1 token, and the verifier's LM head alone: the module
   on 1 and 5 rows, and one row through the transposed copy the decoder uses on CPU
   (`fast_head.head_logits`);
2. the first round of a Decode-page generation (prefill + one traced round), three runs back
   to back, as the app's Generate button starts it.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_steps.py
"""

from __future__ import annotations

import statistics
import time

import torch

from cactus_core.engine.decoder import SpeculativeDecoder
from cactus_core.engine.fast_head import head_logits
from cactus_core.engine.kv_cache import SequenceCache
from cactus_core.engine.models import load_pair
from cactus_core.maths.rules import make_rule

PROMPT = "Why do cacti have spines instead of leaves? Answer in three sentences."


def median_ms(fn, reps: int = 12) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def step_ms(model: torch.nn.Module, vocab: int, prefix: list[int], width: int) -> float:
    cache = SequenceCache(model, vocab)
    cache.prefill([prefix])
    kept = cache.lengths[0]
    ids = torch.arange(200, 200 + width)[None]

    def step() -> None:
        cache.step(ids, None, width)
        cache.keep([kept])

    return median_ms(step)


def main() -> None:
    torch.set_num_threads(1)
    pair = load_pair(device="cpu")
    vocab = pair.verifier.get_output_embeddings().weight.shape[0]
    prefix = pair.encode_prompt(PROMPT)
    v1, v5 = (step_ms(pair.verifier, vocab, prefix, w) for w in (1, 5))
    d1 = step_ms(pair.draft, vocab, prefix, 1)
    print(f"verifier step: 1 token {v1:.1f} ms, 5 tokens {v5:.1f} ms ({v5 / v1:.2f}x)")
    print(f"draft step: 1 token {d1:.1f} ms ({d1 / v1:.3f} of a 1-token verifier step)")
    head = pair.verifier.get_output_embeddings()
    for rows in (1, 5):
        hidden = torch.randn(1, rows, head.in_features)
        print(f"verifier LM head, {rows} rows: {median_ms(lambda h=hidden: head(h)):.1f} ms")
    row = torch.randn(1, 1, head.in_features)
    fast = median_ms(lambda: head_logits(head, row))
    print(f"verifier LM head, 1 row through the transposed copy: {fast:.1f} ms")
    for run in (1, 2, 3):
        dec = SpeculativeDecoder(pair, make_rule("cactus", delta=0.5), k=4, temperature=0.7)
        t0 = time.perf_counter()
        stream = iter(dec.rounds(PROMPT, max_new_tokens=64, seed=0))
        next(stream)
        print(f"first traced round, run {run}: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    with torch.inference_mode():
        main()
