"""Is a compiled verifier (and feature draft) faster than the decoder's own eager build?

Issue 16 asked for the fastest faithful verifier build on CPU, "compiled with freezing if its
warm-up can be hidden": on an AVX-512 CPU without AMX, `torch.compile` with inductor's
freezing (weights pre-packed into the compiled graph) had measured 30.3 ms for one new token
in bfloat16 against 51.5 ms eager. Since then the decoder's eager build packs its bfloat16
weights itself (`packed_linear`) and reads grouped key/value heads in place
(`grouped_attention`). This script times, in one process, one forward of the embedded
verifier (bfloat16, one thread) for 1 and k + 1 new tokens after a prefix of --prefix-tokens,
logits of the new columns included, and one step of the feature draft:

- "decoder build": the models as `load_pair` builds them, the verifier through the decoder's
  own cache (`SequenceCache.step`): what the decoder runs;
- "eager": the verifier's weights as plain transformers modules (nn.Linear, sdpa attention)
  with a `DynamicCache`;
- "compiled": plain copies under `torch.compile(dynamic=True)` with
  `torch._inductor.config.freezing = True` (set globally: passed as `options=` it does
  nothing), the verifier with the same `DynamicCache` calls. The compile's time is printed
  separately, with each of the verifier's first three calls per width: the second call
  compiles again (after the cache's first crop), and the timed blocks begin after it.

Calls run in blocks of --reps per build and width after --warmup untimed ones, --blocks rounds
of them, medians over all blocks: the builds' weights do not fit the CPU's caches together,
and call-by-call interleaving would time each build with another's weights in the caches.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_compiled_verifier.py --k 4

Measured only: the decoder does not compile (docs/benchmarks.md, "A compiled verifier
and draft").
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

import torch
from bench_steps import cache_step  # benchmarks/, the script's own folder
from torch import nn
from transformers import DynamicCache, PreTrainedModel

from cactus_core.engine.loading.embedded_drafts import FEATURE_DRAFT_DIR
from cactus_core.engine.loading.feature_draft import DraftKVCache, FeatureDraft
from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.runtime.packed_linear import PackedLinear

M = TypeVar("M", bound=nn.Module)


def plain_copy(model: M) -> M:
    """A copy of a `load_pair` model with nn.Linear instead of `PackedLinear` (and, for a
    transformers model, its sdpa attention): what transformers itself would run, and what
    inductor should compile (it packs the weights itself when freezing)."""
    plain = copy.deepcopy(model)
    for parent in list(plain.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, PackedLinear):
                has_bias = child.bias is not None
                linear = nn.Linear(child.in_features, child.out_features, bias=has_bias)
                linear.weight, linear.bias = child.weight, child.bias
                setattr(parent, name, linear)
    if isinstance(plain, PreTrainedModel):
        plain.set_attn_implementation("sdpa")
    return plain


def dynamic_cache_step(
    model: Callable[..., object], prefix: list[int], width: int
) -> tuple[Callable[[], None], DynamicCache]:
    """A call that feeds `width` new tokens after `prefix` through a DynamicCache (logits of
    the new columns) and crops them off again; and that cache."""
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([prefix]), cache=cache, use_cache=True, logits_to_keep=1)
    ids = torch.arange(200, 200 + width)[None]

    def step() -> None:
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=width)
        cache.crop(-width)

    return step, cache


def draft_step(
    draft: FeatureDraft, positions: int, compile_it: bool = False
) -> Callable[[], torch.Tensor]:
    """One drafting step of the feature draft, as `FeatureDrafter._read` runs it (its layer
    over one new position after `positions` cached ones, then its head at that row, full-
    vocabulary float32 logits), as one function of tensors so that it can be compiled."""
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(1, positions, draft.config.hidden_size, generator=gen)
    ids = torch.randint(0, draft.vocab_size, (1, positions), generator=gen)
    cache = DraftKVCache()
    with torch.inference_mode():
        draft.predict(features.to(draft.dtype), ids, cache)
    feature, token = features[:, -1:].to(draft.dtype), ids[:, -1:]
    keys, values = cache.keys, cache.values

    def step(feature, token, keys, values) -> torch.Tensor:
        own = DraftKVCache()
        own.keys, own.values = list(keys), list(values)
        new = draft.predict(feature, token, own)[:, -1:]
        return draft.logits(new)[:, -1].float()

    fn = torch.compile(step, dynamic=True) if compile_it else step
    return lambda: fn(feature, token, keys, values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=4, help="drafted tokens: also time k + 1 new tokens")
    ap.add_argument("--prefix-tokens", type=int, default=200)
    ap.add_argument("--reps", type=int, default=12, help="timed calls per block")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls before each block")
    ap.add_argument("--blocks", type=int, default=3, help="blocks per build and width")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import torch._inductor.config as inductor_config

    inductor_config.freezing = True
    pair = load_pair(device="cpu", dtype=torch.bfloat16, feature_draft=FEATURE_DRAFT_DIR)
    verifier, draft = pair.verifier, pair.feature_draft
    plain, plain_draft = plain_copy(verifier), plain_copy(draft)
    compiled = torch.compile(plain, dynamic=True)
    prefix = [(7 * i) % 1000 + 100 for i in range(args.prefix_tokens)]
    vocab = verifier.get_output_embeddings().weight.shape[0]
    widths = (1, args.k + 1)
    with torch.inference_mode():
        steps: dict[tuple[str, int], Callable[[], object]] = {}
        t0 = time.perf_counter()
        for w in widths:
            steps["compiled", w] = dynamic_cache_step(compiled, prefix, w)[0]
            for call in range(3):
                t = time.perf_counter()
                steps["compiled", w]()
                tokens = f"{w} new token{'s' * (w > 1)}"
                print(f"  verifier, {tokens}, call {call + 1}: {time.perf_counter() - t:.2f} s")
        print(f"verifier, compiled: first calls (compile) {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        steps["draft compiled", 1] = draft_step(plain_draft, args.prefix_tokens, compile_it=True)
        steps["draft compiled", 1]()
        print(f"feature draft, compiled: first call (compile) {time.perf_counter() - t0:.1f} s")
        for w in widths:
            steps["decoder build", w] = cache_step(verifier, vocab, prefix, w)[0]
            steps["eager", w] = dynamic_cache_step(plain, prefix, w)[0]
        steps["draft decoder build", 1] = draft_step(draft, args.prefix_tokens)
        times: dict[tuple[str, int], list[float]] = {key: [] for key in steps}
        # In blocks, not call by call: three builds of the weights (about 270 MB each) do not
        # fit the caches together, and a decoder runs one build, whose weights stay cached.
        for _ in range(args.blocks):
            for key, step in steps.items():
                for _ in range(args.warmup):
                    step()
                for _ in range(args.reps):
                    t = time.perf_counter()
                    step()
                    times[key].append((time.perf_counter() - t) * 1000)
    med = {key: statistics.median(t) for key, t in times.items()}
    print(f"embedded pair, bfloat16, {args.threads} thread(s), {args.prefix_tokens}-token prefix")
    cols = [f"verifier, {w} new token{'s' * (w > 1)}" for w in widths]
    print(f"| build | {' | '.join(cols)} | ratio | feature-draft step | c |")
    print("|---|" + "---:|" * (len(widths) + 3))
    for name, drafted in (("decoder build", "draft decoder build"), ("compiled", "draft compiled")):
        v = [med[name, w] for w in widths]
        cells = " | ".join(f"{m:.2f} ms" for m in v)
        d = med[drafted, 1]
        print(f"| {name} | {cells} | {v[-1] / v[0]:.2f} | {d:.2f} ms | {d / v[0]:.3f} |")
    v = [med["eager", w] for w in widths]
    cells = " | ".join(f"{m:.2f} ms" for m in v)
    print(f"| eager (transformers' modules) | {cells} | {v[-1] / v[0]:.2f} | – | – |")


if __name__ == "__main__":
    main()
