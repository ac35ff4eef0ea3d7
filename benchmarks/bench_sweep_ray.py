"""The 3 x 5 x 20 sweep (3 rules x 5 settings x 20 built-in prompts) on the local backend and on
a Ray cluster of --workers workers, wall-clock side by side in one run, with Ray's start-up
(cluster and workers loading the pair) and its per-chunk overhead.

    python benchmarks/bench_sweep_ray.py --max-new-tokens 16 --workers 2 [--ray-address auto]
        [--device cuda]

Each backend gets an empty cache of its own, so both compute every chunk. The per-chunk overhead
is the Ray run's wall time x workers / chunks less the mean time a chunk spends decoding (its
records' wall_s), i.e. what dispatching, pickling and collecting a chunk costs a worker.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts, builtin_tasks
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import SweepConfig, settings_from_grids
from cactus_core.experiments.sweeps.ray_backend import RayBackend
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.maths.sampling import SamplingSettings

GRIDS = {
    "cactus": [0.0, 0.1, 0.3, 1.0, 3.0],
    "cactus-exact": [0.0, 0.1, 0.3, 1.0, 3.0],
    "interp": [0.0, 0.25, 0.5, 0.75, 1.0],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--chunk-size", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(1)  # what each Ray worker gets on a CPU: the same work per chunk
    config = SweepConfig(
        prompts=tuple(builtin_prompts()[: args.prompts]),
        tasks=tuple(builtin_tasks()[: args.prompts]),
        settings=tuple(settings_from_grids(GRIDS)),
        sampling=SamplingSettings(k=4, temperature=0.7, seed=0),
        max_new_tokens=args.max_new_tokens,
        chunk_size=args.chunk_size,
    )
    chunks = len(config.chunks()) * (len(config.settings) + 1)
    print(
        f"{len(config.settings)} settings + verifier-only x {len(config.prompts)} prompts, "
        f"{args.max_new_tokens} new tokens, chunks of {args.chunk_size}: {chunks} chunks"
    )

    start = time.perf_counter()
    pair = load_pair(device=args.device)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    local = run_sweep(pair, config, SweepCache(tempfile.mkdtemp()))
    local_s = time.perf_counter() - start
    del pair

    start = time.perf_counter()
    backend = RayBackend({"device": args.device}, args.workers, args.ray_address)
    backend.start()
    startup_s = time.perf_counter() - start
    try:
        start = time.perf_counter()
        on_ray = run_sweep(None, config, SweepCache(tempfile.mkdtemp()), backend=backend)
        ray_s = time.perf_counter() - start
    finally:
        backend.close()
    same = [c.to_dict()["prompts"] for s in local.settings for c in s.chunks] == [
        c.to_dict()["prompts"] for s in on_ray.settings for c in s.chunks
    ]
    decode = statistics.mean(c.wall_s for s in [on_ray.baseline, *on_ray.settings]
                             for c in s.chunks)  # fmt: skip
    per_chunk = ray_s * args.workers / chunks - decode
    print()
    print("| backend | start-up (s) | sweep (s) | total (s) |")
    print("|---|---|---|---|")
    print(f"| local, 1 thread | {load_s:.1f} (load the pair) | {local_s:.1f} | "
          f"{load_s + local_s:.1f} |")  # fmt: skip
    print(f"| Ray, {args.workers} workers | {startup_s:.1f} (cluster + workers) | {ray_s:.1f} | "
          f"{startup_s + ray_s:.1f} |")  # fmt: skip
    print()
    print(f"sweep speed-up on Ray: {local_s / ray_s:.2f}x (start-up included: "
          f"{(load_s + local_s) / (startup_s + ray_s):.2f}x)")  # fmt: skip
    print(f"mean decoding time per chunk on a worker: {decode:.2f} s; Ray's overhead per chunk: "
          f"{per_chunk:.2f} s")  # fmt: skip
    print(f"records equal to the local backend's (timings aside): {same}")


if __name__ == "__main__":
    main()
