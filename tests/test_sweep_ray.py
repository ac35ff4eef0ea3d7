"""The Ray backend on a local Ray cluster started by this module (2 CPUs, 2 workers): the same
records as the local backend on the embedded pair; a worker killed mid-chunk loses no chunk and
counts none twice; an interrupted sweep resumes with only the missing chunks. The last two run
on the tiny pair saved as folders, which a worker loads in well under a second."""

from __future__ import annotations

import time

import pytest
import ray
import torch

from cactus_core.engine.loading.models import load_pair
from cactus_core.engine.loading.prompts import builtin_prompts, builtin_tasks
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import Setting, SweepConfig
from cactus_core.experiments.sweeps.ray_backend import RayBackend
from cactus_core.experiments.sweeps.run import SweepCancelled, plan_chunks, run_sweep
from cactus_core.maths.sampling import SamplingSettings

TIMINGS = ("tokens_per_s",)


@pytest.fixture(scope="module")
def ray_cluster():
    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    startup = time.perf_counter() - start
    print(f"\nRay start-up (ray.init, 2 CPUs): {startup:.1f} s")
    yield startup
    ray.shutdown()


def _config(prompts, tasks=(), **kw) -> SweepConfig:
    return SweepConfig(
        prompts=tuple(prompts),
        tasks=tuple(tasks),
        settings=(Setting.of("cactus", delta=1.0),),
        sampling=SamplingSettings(k=3, temperature=0.7, seed=0),
        max_new_tokens=kw.pop("max_new_tokens", 4),
        chunk_size=1,
        **kw,
    )


def _records(result) -> list[dict]:
    """Every chunk record as the cache stores it, timings left out."""
    out = []
    for s in [result.baseline, *result.settings]:
        for c in s.chunks:
            d = c.to_dict()
            d.pop("wall_s")
            out.append(d)
    return out


def _rows(result) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith(TIMINGS)} for row in result.rows()]


def test_ray_workers_give_the_local_backends_records_on_the_embedded_pair(ray_cluster, tmp_path):
    config = _config(builtin_prompts()[:2], builtin_tasks()[:2])
    start = time.perf_counter()
    with RayBackend({"device": "cpu"}, workers=2) as backend:
        print(f"2 workers loaded the embedded pair in {time.perf_counter() - start:.1f} s")
        assert backend.workers == 2 and {d["pid"] for d in backend.described} != {None}
        progress = []
        on_ray = run_sweep(None, config, SweepCache(tmp_path / "ray"), progress.append,
                           backend=backend)  # fmt: skip
    local = run_sweep(load_pair(device="cpu"), config, SweepCache(tmp_path / "local"))
    assert on_ray.model_identity == local.model_identity
    assert _records(on_ray) == _records(local)  # tokens, texts, counts, KL, NLL, limit sums
    assert _rows(on_ray) == _rows(local)  # every statistic but the timings
    assert [p.done for p in progress] == [1, 2, 3, 4] and {p.workers for p in progress} == {2}


@pytest.fixture(scope="module")
def tiny_kwargs(tiny_pair_dirs, tmp_path_factory) -> dict:
    verifier, draft = tiny_pair_dirs
    cache = tmp_path_factory.mktemp("models")
    return {
        "verifier": str(verifier),
        "draft": str(draft),
        "device": "cpu",
        "cache_dir": str(cache),
    }


@pytest.fixture(scope="module")
def tiny_backend(ray_cluster, tiny_kwargs):
    with RayBackend(tiny_kwargs, workers=2) as backend:
        yield backend


PROMPTS = ("Name a colour.", "What is 2 + 2?", "Say hi.", "Count to three.", "Name a fruit.")


def test_a_worker_killed_mid_chunk_loses_no_chunk_and_counts_none_twice(tiny_backend, tiny_kwargs,
                                                                       tmp_path):  # fmt: skip
    config = _config(PROMPTS, max_new_tokens=24)
    total = len(plan_chunks(tiny_backend.identity, config))
    killed = []

    def kill_one(p) -> None:
        if not killed and tiny_backend.busy:
            killed.append(tiny_backend.busy[0])
            ray.kill(killed[0])  # a worker in the middle of a chunk

    progress = []
    result = run_sweep(
        None, config, SweepCache(tmp_path), lambda p: (progress.append(p), kill_one(p)),
        backend=tiny_backend,
    )  # fmt: skip
    assert killed and tiny_backend.replaced == 1 and tiny_backend.workers == 2
    assert killed[0] not in tiny_backend.actors
    assert result.computed_chunks == total == len(progress)
    assert [p.done for p in progress] == list(range(1, total + 1))
    for s in [result.baseline, *result.settings]:
        assert [r.index for c in s.chunks for r in c.prompts] == list(range(len(PROMPTS)))
    local = run_sweep(load_pair(**tiny_kwargs), config, SweepCache(tmp_path / "local"))
    assert _records(result) == _records(local)


def test_an_interrupted_sweep_resumes_with_only_the_missing_chunks(tiny_backend, tmp_path):
    config = _config(PROMPTS, max_new_tokens=6)
    cache = SweepCache(tmp_path)
    total = len(plan_chunks(tiny_backend.identity, config))
    first = []
    with pytest.raises(SweepCancelled, match="chunks left to run"):
        run_sweep(None, config, cache, first.append, lambda: len(first) >= 3,
                  backend=tiny_backend)  # fmt: skip
    # Cancel stopped the chunks that were running: the workers are gone, nothing else arrived.
    assert tiny_backend.workers == 0
    done = len(first)
    assert done >= 3 and not any(p.cached for p in first)
    again = []
    resumed = run_sweep(None, config, cache, again.append, backend=tiny_backend)
    assert resumed.computed_chunks == total - done == sum(not p.cached for p in again)
    assert sum(p.cached for p in again) == done
    assert run_sweep(None, config, cache, backend=tiny_backend).computed_chunks == 0


def test_without_ray_the_backend_says_what_to_install(monkeypatch):
    import sys

    from cactus_core.cli import main
    from cactus_core.experiments.sweeps import ray_backend as sweep_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(sweep_ray.RayBackendError, match=r"pip install ray==2\.60\.0"):
        sweep_ray.import_ray()
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "--backend", "ray", "--n-prompts", "1"])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit):
        main(["sweep", "--ray-address", "auto", "--n-prompts", "1"])  # needs --backend ray


def test_the_app_uses_ray_only_where_the_operator_allows_it():
    from cactus_core.experiments.sweeps.ray_backend import ray_address

    assert ray_address({}) is None
    assert ray_address({"CACTUS_LAB_RAY_ADDRESS": "auto"}) == "auto"
    public = {"CACTUS_LAB_RAY_ADDRESS": "auto", "CACTUS_LAB_PUBLIC": "1"}
    assert ray_address(public) is None
    assert ray_address({**public, "CACTUS_LAB_ALLOW_RAY": "1"}) == "auto"


def tiny_judge_file(tmp_path, hidden_size: int, seed: int):
    from cactus_core.maths.rules.learned_judge import Judge

    weights = torch.randn(2 * hidden_size, generator=torch.Generator().manual_seed(seed))
    path = tmp_path / f"judge-{seed}.json"
    Judge(weights, 0.0, "tiny").save(path)
    return path


def test_workers_read_the_drivers_learned_judge(ray_cluster, tiny_backend, tiny_kwargs, tiny_pair,
                                                tmp_path, monkeypatch):  # fmt: skip
    """CACTUS_LEARNED_JUDGE reaches the workers (they once ran the shipped judge and the
    driver cached their records under its own judge's key); a worker whose judge differs from
    the driver's is refused before its record is cached."""
    from cactus_core.experiments.sweeps.ray_backend import RayBackendError, check_worker_data

    tiny_backend.close()  # its workers hold the cluster's 2 CPUs; its next sweep starts anew
    size = tiny_pair.verifier.config.hidden_size
    monkeypatch.setenv("CACTUS_LEARNED_JUDGE", str(tiny_judge_file(tmp_path, size, 1)))
    config = SweepConfig(
        prompts=PROMPTS[:2],
        settings=(Setting.of("learned-judge", threshold=0.5),),
        sampling=SamplingSettings(k=3, temperature=0.7, seed=0),
        max_new_tokens=8,
        chunk_size=1,
    )
    with RayBackend(tiny_kwargs, workers=1) as backend:
        remote = run_sweep(None, config, SweepCache(tmp_path / "ray"), backend=backend)
    local = run_sweep(load_pair(**tiny_kwargs), config, SweepCache(tmp_path / "local"))
    assert _records(remote) == _records(local)
    setting = config.settings[0]
    other = setting.make_rule().data_identity()
    monkeypatch.setenv("CACTUS_LEARNED_JUDGE", str(tiny_judge_file(tmp_path, size, 2)))
    with pytest.raises(RayBackendError, match="other files than this driver"):
        check_worker_data(setting, other)
