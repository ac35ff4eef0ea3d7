"""Per-call costs behind the decoder's speedup.

Without options, on the embedded pair (CPU, one thread):

1. one forward through the decoder's KV cache (the prompt as context) of the verifier for 1
   and for 5 tokens, of the draft for 1 token, and the verifier's LM head alone: the module
   on 1 and 5 rows, and one row through the transposed copy the decoder uses on CPU
   (`fast_head.head_logits`);
2. the first round of a Decode-page generation (prefill + one traced round), three runs back
   to back, as the app's Generate button starts it.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_steps.py

With --costs, only the step costs that the modelled speedup needs, on any device and in
several dtypes, over a cache of --prefix-tokens random ids: the verifier for 1 and k + 1 new
tokens, its LM head alone on 1 and k + 1 rows as the decoder scores them (`head_logits`: where
k + 1 rows cost about one, a verify pass takes them in one call, otherwise row by row), one
step of the embedded draft and one of the feature draft (each in the verifier's dtype), then
the modelled speedup (`modelled_speedup`) with acceptance from the drafts' model
cards. --verifier random builds the embedded verifier's architecture
(benchmarks/smollm2_135m_config.json) with random weights, for a machine without its GGUF:
a step's cost does not depend on the weights, acceptance does, so acceptance is never
measured here.

    PYTHONPATH=. python3 benchmarks/bench_steps.py --costs --device cuda \
        --dtypes float32 bfloat16 --verifier random --json steps.json

With --cache-compare, the decoder's own cache (`SequenceCache.step`) against transformers'
plain forward with a `DynamicCache`, for 1 and k + 1 new tokens on the embedded verifier (the
prompt as context), calls interleaved so that a busy machine slows both alike; medians and
minima per dtype.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_steps.py --cache-compare \
        --dtypes float32 bfloat16

With --profile-step, torch's profiler over the embedded verifier's steps of 1 and k + 1 new
tokens through the decoder's cache: the costliest ops with their input shapes, beside the
step's median time without the profiler (the profiler adds its own cost to every op).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_steps.py --profile-step --dtypes bfloat16

With --linear-rows, only the verifier's matrix products: the seven linear layers of each of its
decoder layers (q, k, v, o, gate, up, down; all of them, one after the other) on 1 to k + 1
rows, per dtype, with its real weights (or random ones, as for --costs). A verify pass of k + 1
tokens runs them on k + 1 rows; where they cost about what 1 row does, a drafted token is
almost free to verify. Each dtype twice: through torch's F.linear, and through copies packed
for oneDNN (`packed_linear`; what the decoder runs in bfloat16 on a CPU with native bfloat16,
measured only otherwise).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_steps.py --linear-rows \
        --dtypes float32 bfloat16 --k 4
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.loading.feature_draft import DraftKVCache, FeatureDraft
from cactus_core.engine.loading.models import DRAFT_DIR, embedded_gguf_path, load_pair
from cactus_core.engine.runtime.fast_head import head_logits
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.engine.runtime.packed_linear import (
    PackedLinear,
    can_pack,
    pack_linears,
    packed_copy,
)
from cactus_core.maths.rules import make_rule

PROMPT = "Why do cacti have spines instead of leaves? Answer in three sentences."
HERE = Path(__file__).resolve().parent
VERIFIER_CONFIG = HERE / "smollm2_135m_config.json"
FEATURE_DRAFT_DIR = HERE.parent / "cactus_core" / "assets" / "feature_draft"


def _sync(device: torch.device) -> None:
    # CUDA kernels run asynchronously: without a sync the timer reads the launch, not the work.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(
    fn: Callable[[], object],
    reps: int = 12,
    device: torch.device | None = None,
    warmup: int = 1,
) -> float:
    device = device or torch.device("cpu")
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def cache_step(
    model: torch.nn.Module, vocab: int, prefix: list[int], width: int
) -> tuple[Callable[[], None], SequenceCache]:
    """A call that runs one forward of `width` new tokens through the decoder's cache holding
    `prefix`, with the logits of all `width` columns (what a verify pass or a draft step
    reads), and rolls them back; and that cache."""
    cache = SequenceCache(model, vocab)
    cache.prefill([prefix])
    kept = cache.lengths[0]
    ids = torch.arange(200, 200 + width, device=model.device)[None]

    def step() -> None:
        cache.step(ids, None, width)
        cache.keep([kept])

    return step, cache


def step_ms(
    model: torch.nn.Module,
    vocab: int,
    prefix: list[int],
    width: int,
    reps: int = 12,
    warmup: int = 1,
) -> float:
    """Median ms of `cache_step`."""
    return median_ms(cache_step(model, vocab, prefix, width)[0], reps, model.device, warmup)


def feature_step_ms(
    draft: FeatureDraft, vocab: int, positions: int, reps: int = 12, warmup: int = 1
) -> float:
    """One drafting step of a feature draft, as `FeatureDrafter._read` runs it: its layer over
    one new position of a cache holding `positions`, then its head at that row."""
    device = draft.fc.weight.device
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(1, positions, draft.config.hidden_size, generator=gen).to(device)
    ids = torch.randint(0, vocab, (1, positions), generator=gen).to(device)
    cache = DraftKVCache()
    draft.predict(features, ids, cache)
    feature, token = features[:, -1:], ids[:, -1:]

    def step() -> None:
        new = draft.predict(feature, token, cache)[:, -1:]
        draft.logits(new)[:, -1, :vocab].float()
        cache.crop(positions)

    return median_ms(step, reps, device, warmup)


# ---------------------------------------------------------------------------------------------
# The models for --costs


def random_verifier(device: torch.device, dtype: torch.dtype, seed: int = 0) -> PreTrainedModel:
    """The embedded verifier's architecture (SmolLM2-135M-Instruct) with random weights."""
    config = LlamaConfig.from_dict(json.loads(VERIFIER_CONFIG.read_text()))
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it runs: no 0.5 GB host-to-device copy
        model = LlamaForCausalLM(config)
    return model.to(dtype).eval()


def embedded_verifier_available() -> bool:
    try:
        embedded_gguf_path()
    except Exception:
        return False
    return True


def cost_models(
    verifier: str, device: torch.device, dtype: torch.dtype, feature_dir: Path | None
) -> tuple[PreTrainedModel, PreTrainedModel, FeatureDraft | None]:
    """(verifier, embedded draft, feature draft or None) in `dtype` on `device`; verifier is
    "embedded" (the real pair) or "random" (its architecture, random weights)."""
    if verifier == "embedded":
        pair = load_pair(device=device, dtype=dtype, feature_draft=feature_dir)
        return pair.verifier, pair.draft, pair.feature_draft
    # The loader load_pair uses for the embedded draft: its own trained layers on the
    # verifier's embedding, exactly as decoding runs it.
    from cactus_core.engine.loading.models import load_embedded_draft

    model = random_verifier(device, dtype)
    draft, _ = load_embedded_draft(model, dtype)
    feature = None if feature_dir is None else FeatureDraft.load(feature_dir, model, dtype)
    for built in (model, draft, feature):
        if built is not None:
            pack_linears(built)  # as load_pair does
    return model, draft, feature


# ---------------------------------------------------------------------------------------------
# The modelled speedup


def tokens_per_call(alpha: float, k: int) -> float:
    """E[tokens per verifier call] when each drafted token is accepted with probability alpha,
    independently: 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"acceptance must be in [0, 1], got {alpha}")
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def modelled_speedup(alpha: float, k: int, v1: float, vk1: float, draft: float) -> float:
    """Speculative tokens/s over the verifier alone, from per-call costs in ms: a round costs
    k draft steps and one verifier forward of k + 1 tokens and yields E tokens, where the
    verifier alone pays one 1-token forward per token:

        speedup = E * v1 / (k * draft + vk1) = E / (1 + c * k) * (v1 / vk1),  c = draft / vk1.

    A real round also pays for sampling, the rule and the host's bookkeeping, which are left
    out here, so this is an upper estimate for the given acceptance."""
    return tokens_per_call(alpha, k) * v1 / (k * draft + vk1)


def card_acceptance() -> dict[str, tuple[float, str]]:
    """Held-out per-position acceptance (T = 0.7, top-p 1.0) from the shipped drafts' model
    cards, so that a retrained draft brings its own numbers: {"draft": (alpha, source),
    "feature": (alpha, source)}; a draft whose card lacks them is left out."""
    out: dict[str, tuple[float, str]] = {}
    try:
        training = json.loads((DRAFT_DIR / "config.json").read_text())["cactus_training"]
        alpha = float(training["calibration"]["chosen"]["acc"])
        out["draft"] = (alpha, "assets/draft/config.json: expected acceptance, held-out answers")
    except (OSError, KeyError, TypeError, ValueError):
        pass
    try:
        meta = json.loads((FEATURE_DRAFT_DIR / "config.json").read_text())
        accept = meta["measured"]["accept"]
        head = f"head{meta.get('head_size')}"
        key = head if head in accept else "as_saved"
        alpha = float(accept[key]["1.0"]["acceptance_rate"])
        out["feature"] = (alpha, f"assets/feature_draft/config.json: held-out, {key}")
    except (OSError, KeyError, TypeError, ValueError):
        pass
    return out


# ---------------------------------------------------------------------------------------------
# --costs


def measure_costs(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    feature_dir = None if args.no_feature_draft else Path(args.feature_draft)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for name in args.dtypes:
        dtype = getattr(torch, name)
        verifier, draft, feature = cost_models(args.verifier, device, dtype, feature_dir)
        vocab = verifier.get_output_embeddings().weight.shape[0]
        prefix = torch.randint(0, vocab, (args.prefix_tokens,), generator=gen).tolist()
        timing = {"reps": args.reps, "warmup": args.warmup}
        row: dict[str, Any] = {"dtype": name}
        row["verifier_1_ms"] = step_ms(verifier, vocab, prefix, 1, **timing)
        row["verifier_k1_ms"] = step_ms(verifier, vocab, prefix, args.k + 1, **timing)
        row["draft_ms"] = step_ms(draft, vocab, prefix, 1, **timing)
        head = verifier.get_output_embeddings()
        for key, width in (("head_1_ms", 1), ("head_k1_ms", args.k + 1)):
            hidden = torch.randn(1, width, head.in_features, generator=gen).to(device, dtype)
            row[key] = median_ms(partial(head_logits, head, hidden), device=device, **timing)
        if feature is not None:
            row["feature_draft_ms"] = feature_step_ms(feature, vocab, len(prefix), **timing)
        rows.append(row)
        print(f"[{name}] {json.dumps(row)}", file=sys.stderr, flush=True)  # progress
        del verifier, draft, feature
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    alphas = card_acceptance()
    if args.alpha_draft is not None:
        alphas["draft"] = (args.alpha_draft, "--alpha-draft")
    if args.alpha_feature is not None:
        alphas["feature"] = (args.alpha_feature, "--alpha-feature")
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "verifier": args.verifier,
        "prefix_tokens": args.prefix_tokens,
        "k": args.k,
        "rows": rows,
        "acceptance": {key: {"alpha": a, "source": s} for key, (a, s) in alphas.items()},
    }


def costs_markdown(report: dict[str, Any]) -> str:
    k = report["k"]
    if report["verifier"] == "random":
        verifier = "the embedded verifier's architecture with random weights"
    else:
        verifier = "the embedded verifier"
    lines = [
        f"Step costs, median ms: {report['device_name']} ({report['device']}), torch "
        f"{report['torch']}, {verifier}, a "
        f"{report['prefix_tokens']}-token cache, k = {k}; c = draft step ÷ 1-token verifier "
        "step.",
        "",
        f"| dtype | verifier, 1 token | verifier, {k + 1} tokens | ratio | its LM head, 1 row "
        f"| {k + 1} rows | draft step | c | feature draft step | c |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        v1 = r["verifier_1_ms"]
        f = r.get("feature_draft_ms")
        feat = f"{f:.2f} | {f / v1:.3f}" if f is not None else "– | –"
        heads = f"{r['head_1_ms']:.2f} | {r['head_k1_ms']:.2f}" if "head_1_ms" in r else "– | –"
        lines.append(
            f"| {r['dtype']} | {v1:.2f} | {r['verifier_k1_ms']:.2f} | "
            f"{r['verifier_k1_ms'] / v1:.2f} | {heads} | {r['draft_ms']:.2f} | "
            f"{r['draft_ms'] / v1:.3f} | {feat} |"
        )
    lines += [
        "",
        "Modelled speedup over the verifier alone (not measured): E = (1 − α^(k+1)) / (1 − α) "
        f"tokens per call, speedup = E · V1 / (k · d + V{k + 1}), with V1, V{k + 1} the "
        f"verifier's 1- and {k + 1}-token steps and d the draft step above; break-even is the E "
        "at which the speedup is 1. α is the held-out acceptance from the CPU measurements "
        "(source column): acceptance, and so a measured speedup, needs the real verifier.",
        "",
        "| dtype | draft | α | source | E | modelled speedup | break-even E |",
        "|---|---|---:|---|---:|---:|---:|",
    ]
    for r in report["rows"]:
        for key, label, cost in (
            ("draft", "embedded 3-layer", r["draft_ms"]),
            ("feature", "feature-conditioned", r.get("feature_draft_ms")),
        ):
            acc = report["acceptance"].get(key)
            if acc is None or cost is None:
                continue
            v1, vk1 = r["verifier_1_ms"], r["verifier_k1_ms"]
            a = acc["alpha"]
            lines.append(
                f"| {r['dtype']} | {label} | {a:.3f} | {acc['source']} | "
                f"{tokens_per_call(a, k):.2f} | {modelled_speedup(a, k, v1, vk1, cost):.2f}× | "
                f"{(k * cost + vk1) / v1:.2f} |"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The default: the embedded pair on CPU


def embedded_cpu() -> None:
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


def _interleaved(
    model: PreTrainedModel, prefix: list[int], width: int, reps: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Times (ms) of `width` new tokens through the decoder's cache and through a plain
    DynamicCache forward, the two calls alternating."""
    from transformers import DynamicCache

    vocab = model.get_output_embeddings().weight.shape[0]
    own = cache_step(model, vocab, prefix, width)[0]
    plain = DynamicCache()
    model(input_ids=torch.tensor([prefix]), cache=plain, use_cache=True, logits_to_keep=1)
    ids = torch.arange(200, 200 + width)[None]

    def hf() -> None:
        model(input_ids=ids, cache=plain, use_cache=True, logits_to_keep=width)
        plain.crop(-width)

    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(warmup):
        own(), hf()
    for _ in range(reps):
        for out, fn in zip(times, (own, hf), strict=True):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1000)
    return times


def _run_linears(linears: list[torch.nn.Linear], inputs: dict[int, torch.Tensor]) -> None:
    for m in linears:
        m(inputs[m.in_features])


def _run_unpacked(linears: list[torch.nn.Linear], inputs: dict[int, torch.Tensor]) -> None:
    for m in linears:
        F.linear(inputs[m.in_features], m.weight, m.bias)


def _run_onednn(linears: list[torch.nn.Linear], inputs: dict[int, torch.Tensor]) -> None:
    # oneDNN's packed product whatever the dtype, as `PackedLinear` runs it for bfloat16: how
    # packing would do where the decoder does not pack (float32, a CPU without native bfloat16).
    for m in linears:
        weight = packed_copy(m, m.weight)
        torch.ops.mkldnn._linear_pointwise(inputs[m.in_features], weight, m.bias, "none", [], "")


def linear_rows(args: argparse.Namespace) -> None:
    """The verifier's decoder-layer linears on 1 .. k + 1 rows, per dtype: through torch's
    F.linear, and packed for oneDNN (as the decoder runs them where packing pays,
    `PackedLinear`; otherwise measured only)."""
    widths = range(1, args.k + 2)
    print("| dtype | linears | " + " | ".join(f"{w} row{'s' * (w > 1)}" for w in widths) + " |")
    print("|---|---|" + "---:|" * len(widths))
    gen = torch.Generator().manual_seed(0)
    for name in args.dtypes:
        dtype = getattr(torch, name)
        if args.verifier == "embedded":
            verifier = load_pair(device="cpu", dtype=dtype).verifier
        else:
            verifier = random_verifier(torch.device("cpu"), dtype)
            pack_linears(verifier)
        linears = [m for m in verifier.model.layers.modules() if isinstance(m, torch.nn.Linear)]
        packed = sum(isinstance(m, PackedLinear) for m in linears)
        runs = {"F.linear": _run_unpacked}
        if packed:
            runs[f"packed ({packed} of {len(linears)})"] = _run_linears
        elif can_pack(dtype):  # oneDNN refuses bfloat16 on a CPU without AVX-512
            runs["oneDNN packed (the decoder does not pack these)"] = _run_onednn
        for label, run in runs.items():
            cells = []
            for w in widths:
                inputs = {
                    n: torch.randn(1, w, n, generator=gen).to(dtype)
                    for n in {m.in_features for m in linears}
                }
                with torch.inference_mode():
                    cells.append(
                        median_ms(partial(run, linears, inputs), args.reps, warmup=args.warmup)
                    )
            cells_md = " | ".join(f"{ms:.1f} ms" for ms in cells)
            print(f"| {name} | {label} | {cells_md} |", flush=True)
        del verifier
        gc.collect()


def profile_step(args: argparse.Namespace) -> None:
    """torch's profiler over --reps steps of 1 and of k + 1 new tokens through the decoder's
    cache, per dtype: the ops that take the most time, beside the step's median without the
    profiler."""
    from torch.profiler import ProfilerActivity, profile

    for name in args.dtypes:
        verifier = load_pair(device="cpu", dtype=getattr(torch, name)).verifier
        vocab = verifier.config.vocab_size
        for width in (1, args.k + 1):
            prefix = list(range(300, 300 + args.prefix_tokens))
            step = cache_step(verifier, vocab, prefix, width)[0]
            wall = median_ms(step, args.reps, warmup=args.warmup)
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                for _ in range(args.reps):
                    step()
            events = prof.key_averages(group_by_input_shape=True)
            print(
                f"\n{name}, {width} new token{'s' * (width > 1)}: {wall:.2f} ms a step (median, "
                "no profiler); the ops below profiled over as many steps more"
            )
            print("| op | input shapes | ms a step | calls a step |\n|---|---|---:|---:|")
            top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
            for e in top:
                print(
                    f"| {e.key} | {e.input_shapes} | {e.self_cpu_time_total / args.reps / 1e3:.2f}"
                    f" | {e.count / args.reps:g} |"
                )
        del verifier
        gc.collect()


def cache_compare(args: argparse.Namespace) -> None:
    """Interleaved timings: the decoder's cache against a plain DynamicCache forward."""
    print("| dtype | new tokens | decoder's cache: median (min) | DynamicCache forward | ratio |")
    print("|---|---:|---:|---:|---:|")
    for name in args.dtypes:
        pair = load_pair(device="cpu", dtype=getattr(torch, name))
        prefix = pair.encode_prompt(PROMPT)
        for width in (1, args.k + 1):
            own, hf = _interleaved(pair.verifier, prefix, width, args.reps, args.warmup)
            o, h = statistics.median(own), statistics.median(hf)
            print(
                f"| {name} | {width} | {o:.1f} ({min(own):.1f}) ms | "
                f"{h:.1f} ({min(hf):.1f}) ms | {o / h:.2f} |",
                flush=True,
            )
        gc.collect()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--costs", action="store_true", help="only the step costs (options below)")
    ap.add_argument(
        "--cache-compare",
        action="store_true",
        help="the decoder's cache against a plain DynamicCache forward (--dtypes, --k, --reps)",
    )
    ap.add_argument(
        "--linear-rows",
        action="store_true",
        help="the verifier's decoder-layer linears on 1 .. k + 1 rows (--dtypes, --k, --reps)",
    )
    ap.add_argument(
        "--profile-step",
        action="store_true",
        help="torch's profiler over the embedded verifier's steps (--dtypes, --k, --reps)",
    )
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtypes", nargs="+", default=["float32"], choices=("float32", "bfloat16"))
    ap.add_argument(
        "--verifier",
        default="auto",
        choices=("auto", "embedded", "random"),
        help="auto: the embedded verifier when its GGUF is installed, else random weights",
    )
    ap.add_argument("--prefix-tokens", type=int, default=200, help="tokens in the cache")
    ap.add_argument("--k", type=int, default=4, help="drafted tokens per round")
    ap.add_argument("--reps", type=int, default=12, help="timed calls per median")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--feature-draft", default=str(FEATURE_DRAFT_DIR), metavar="FOLDER")
    ap.add_argument("--no-feature-draft", action="store_true")
    ap.add_argument("--alpha-draft", type=float, help="acceptance of the 3-layer draft")
    ap.add_argument("--alpha-feature", type=float, help="acceptance of the feature draft")
    ap.add_argument("--json", metavar="PATH", help="also write the --costs results as JSON")
    args = ap.parse_args()
    if args.linear_rows:
        torch.set_num_threads(args.threads)
        if args.verifier == "auto":
            args.verifier = "embedded" if embedded_verifier_available() else "random"
        linear_rows(args)
        return
    if args.cache_compare:
        torch.set_num_threads(args.threads)
        cache_compare(args)
        return
    if args.profile_step:
        torch.set_num_threads(args.threads)
        profile_step(args)
        return
    if not args.costs:
        embedded_cpu()
        return
    if args.prefix_tokens < 1 or args.k < 1 or args.reps < 1 or args.warmup < 0:
        ap.error("--prefix-tokens, --k and --reps must be >= 1, --warmup >= 0")
    torch.set_num_threads(args.threads)
    if args.verifier == "auto":
        args.verifier = "embedded" if embedded_verifier_available() else "random"
    report = measure_costs(args)
    print()
    print(costs_markdown(report), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    with torch.inference_mode():
        main()
