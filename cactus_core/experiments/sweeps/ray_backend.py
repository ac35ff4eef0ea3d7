"""The Ray backend for sweeps: the chunks of a sweep spread over the workers of a Ray cluster.

Each worker is a Ray actor that loads the model pair once, from the arguments `load_pair` takes
(the embedded pair, a hub id, a folder or a .gguf file; the same on every node), and then runs
`sweep.run_chunk` on (setting, prompt chunk) tasks: the very function the local backend runs,
so its records are the local ones. A worker takes one GPU when the cluster has them
(`num_gpus=1`, the pair then loads on CUDA) and otherwise one CPU with one torch thread.

The driver (`run_sweep` with `backend=RayBackend(...)`) owns the cache and the progress: it
hands each worker one task at a time, waits on whichever finishes first (`ray.wait`), and writes
each record to the cache as it arrives. A worker that dies mid-chunk (a node lost, an actor
killed, out of memory) is replaced and its chunk goes back to the front of the queue, so no
chunk is lost; the driver keeps the first record of a chunk, so none is counted twice. Cancel
(`should_stop`) kills the workers, which stops the chunks they were running; the finished ones
are cached, so running the sweep again computes only the missing chunks.

Ray is imported only here and only when this backend is used; the rest of the lab never needs
it. Without Ray installed, asking for this backend is a ValueError that says what to install.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cactus_core.experiments.sweeps.cache import code_version
from cactus_core.experiments.sweeps.config import Setting, SweepConfig
from cactus_core.experiments.sweeps.run import (
    ChunkRecord,
    ChunkTask,
    SweepCancelled,
    run_chunk,
)

RAY_VERSION = "2.60.0"  # what requirements-dev.txt pins and docs/scale.md installs
# The operator's setting that turns the Ray backend on in the app (an address as `--ray-address`
# takes it: "auto", "ray://HOST:PORT", or "local" for a cluster started in the app's process).
RAY_ADDRESS_ENV = "CACTUS_LAB_RAY_ADDRESS"
RAY_WORKERS_ENV = "CACTUS_LAB_RAY_WORKERS"
DEFAULT_WORKERS = 2
# How often the driver looks at should_stop while chunks run.
POLL_S = 0.25
_PACKAGE = Path(__file__).resolve().parents[2]


class RayBackendError(ValueError):
    """The Ray backend could not run: Ray missing, no cluster, workers that cannot load the
    pair or keep dying. Finished chunks stay cached."""


def import_ray() -> Any:
    """The ray module, or RayBackendError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RayBackendError(
            f"the Ray backend needs Ray: install it with `pip install ray=={RAY_VERSION}`"
        ) from None
    return ray


class SweepWorker:
    """What a Ray actor holds: one loaded pair, and the chunk function of the local sweep."""

    def __init__(self, pair_kwargs: dict[str, Any], threads: int | None) -> None:
        import torch

        from cactus_core.engine.loading.models import load_pair

        if threads:
            torch.set_num_threads(threads)
        self.pair = load_pair(**pair_kwargs)

    def describe(self) -> dict[str, Any]:
        """The pair's identity and the code version (the driver checks both match its own),
        and where the worker runs."""
        import socket

        return {
            "identity": self.pair.identity,
            "code": code_version(),
            "device": str(self.pair.device),
            "node": socket.gethostname(),
            "pid": os.getpid(),
        }

    def run_chunk(self, config: SweepConfig, setting: Setting, idx: tuple[int, ...]) -> dict:
        # The record travels as the cache stores it; the driver decodes it like a cache hit.
        # The files the rule read (the learned judge, by digest) come with it, for the driver
        # to check against its own before it caches the record under its keys.
        record = run_chunk(self.pair, config, setting, idx).to_dict()
        return {"record": record, "data": data_identity(setting)}


class RayBackend:
    """Sweep chunks on Ray actors (see the module docstring).

    pair_kwargs: `load_pair`'s keyword arguments (`cli.models.pair_kwargs_from_args` makes
        them), which every worker loads from; the files must exist on every node.
    workers: how many actors (each holds one copy of the pair).
    address: None joins the cluster this process already started, or starts a local one with
        `workers` CPUs; "auto" joins the cluster of this node (`ray start --head`);
        "ray://HOST:PORT" a remote one through Ray Client; "local" always starts a local one.
    ship_code: send this process's cactus_core to the workers (Ray's runtime_env py_modules),
        so a cluster without the lab installed runs the driver's code. Default: when joining
        an existing cluster by address.
    max_replacements: how many dead workers are replaced in all before the sweep gives up.
    """

    def __init__(
        self,
        pair_kwargs: dict[str, Any] | None = None,
        workers: int = DEFAULT_WORKERS,
        address: str | None = None,
        ship_code: bool | None = None,
        max_replacements: int | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"the Ray backend needs at least 1 worker, got {workers}")
        self.pair_kwargs = _absolute_paths(dict(pair_kwargs or {}))
        self.n_workers = workers
        self.address = address
        self.ship_code = ship_code if ship_code is not None else address not in (None, "local")
        self.max_replacements = 2 * workers if max_replacements is None else max_replacements
        self.ray = import_ray()
        self.actors: list[Any] = []
        self.replaced = 0
        self.started_ray = False
        self.start_s = 0.0  # Ray's start-up and the workers' loading, the first time
        self._identity: str | None = None
        self.gpus = 0.0
        self.described: list[dict[str, Any]] = []
        self.busy: list[Any] = []  # the actors running a chunk now

    # -------------------------------------------------------------------------- lifecycle

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return  # a cluster this process joined or started already (a test's, the app's)
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if self.ship_code:
            kwargs["runtime_env"] = {"py_modules": [str(_PACKAGE)]}
        try:
            if self.address in (None, "local"):
                ray.init(num_cpus=self.n_workers, **kwargs)
            else:
                ray.init(address=self.address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise RayBackendError(
                f"cannot reach a Ray cluster at {self.address or 'local'}: "
                f"{' '.join(str(err).split())[:300]}"
            ) from None
        self.started_ray = True

    def _spawn(self) -> Any:
        ray = self.ray
        if self.gpus:
            options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 1}
            threads = None
        else:
            options = {"num_cpus": 1}
            threads = 1
        env = worker_env()
        if not self.ship_code:
            # A cluster on this machine (the one this process started, or a test's): its
            # workers import this checkout's cactus_core.
            env["PYTHONPATH"] = str(_PACKAGE.parent)
        if env:
            options["runtime_env"] = {"env_vars": env}
        actor = ray.remote(SweepWorker).options(**options, max_restarts=0)
        return actor.remote(self.pair_kwargs, threads)

    def start(self) -> None:
        """Connect, start the workers and check they all loaded the same pair and code."""
        if self.actors:
            return
        begin = time.perf_counter()
        self._connect()
        ray = self.ray
        self.gpus = float(ray.cluster_resources().get("GPU", 0.0))
        self.actors = [self._spawn() for _ in range(self.n_workers)]
        self.described = self._describe(self.actors)
        if not self.start_s:
            self.start_s = time.perf_counter() - begin

    def _describe(self, actors: list[Any]) -> list[dict[str, Any]]:
        ray = self.ray
        try:
            info = ray.get([a.describe.remote() for a in actors])
        except ray.exceptions.RayError as err:
            self.close()
            raise RayBackendError(f"a Ray worker could not load the pair: {_cause(err)}") from None
        mine = code_version()
        for d in info:
            if d["code"] != mine:
                self.close()
                raise RayBackendError(
                    f"the Ray worker on {d['node']} runs other code than this driver "
                    f"({d['code']} against {mine}); install the same lab there or let the "
                    "backend ship it (ship_code)"
                )
            if self._identity is None:
                self._identity = d["identity"]
            elif d["identity"] != self._identity:
                self.close()
                raise RayBackendError(
                    f"the Ray worker on {d['node']} loaded another pair ({d['identity']}) than "
                    f"the others ({self._identity}); give every node the same files"
                )
        return info

    def close(self) -> None:
        """Stop the workers (and the local cluster, if this backend started it)."""
        self._stop_all()
        if self.started_ray and self.ray.is_initialized():
            self.ray.shutdown()
            self.started_ray = False

    def __enter__(self) -> RayBackend:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------------- SweepBackend

    @property
    def identity(self) -> str:
        self.start()
        assert self._identity is not None
        return self._identity

    @property
    def workers(self) -> int:
        return len(self.actors)

    def run(
        self,
        config: SweepConfig,
        tasks: list[ChunkTask],
        deliver: Callable[[ChunkTask, ChunkRecord], None],
        should_stop: Callable[[], bool] | None,
    ) -> None:
        ray = self.ray
        self.start()
        config_ref = ray.put(config)
        pending: deque[ChunkTask] = deque(tasks)
        running: dict[Any, tuple[Any, ChunkTask]] = {}
        idle = list(self.actors)
        while pending or running:
            if should_stop is not None and should_stop():
                left = len(pending) + len(running)
                self._stop_all()
                raise SweepCancelled(f"cancelled with {left} chunks left to run")
            while idle and pending:
                actor, task = idle.pop(), pending.popleft()
                ref = actor.run_chunk.remote(config_ref, task.setting, task.idx)
                running[ref] = (actor, task)
            self.busy = [actor for actor, _ in running.values()]
            ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
            for ref in ready:
                actor, task = running.pop(ref)
                try:
                    value = ray.get(ref)
                except ray.exceptions.RayTaskError as err:
                    # The chunk itself failed (a prompt too long for the pair, ...): the same
                    # error the local backend raises, after the workers stop.
                    self._stop_all()
                    cause = getattr(err, "cause", None)
                    if isinstance(cause, ValueError):
                        raise cause from None
                    raise RayBackendError(
                        f"a chunk failed on a Ray worker: {_cause(err)}"
                    ) from None
                except ray.exceptions.RayError as err:
                    # The worker died under the chunk: run it again, first, on a new worker.
                    pending.appendleft(task)
                    idle.append(self._replace(actor, err))
                    continue
                try:
                    check_worker_data(task.setting, value["data"])
                except RayBackendError:
                    self._stop_all()
                    raise
                deliver(task, ChunkRecord.from_dict(value["record"]))
                idle.append(actor)

    def _replace(self, dead: Any, err: Exception) -> Any:
        if self.replaced >= self.max_replacements:
            self._stop_all()
            raise RayBackendError(
                f"Ray workers died {self.replaced + 1} times ({_cause(err)}); the finished "
                "chunks are cached, so running the sweep again resumes it"
            )
        self.replaced += 1
        fresh = self._spawn()
        self._describe([fresh])
        self.actors = [fresh if a is dead else a for a in self.actors]
        return fresh

    def _stop_all(self) -> None:
        # Killing the actors is what stops a chunk that is running (Ray cannot cancel a running
        # task of a synchronous actor); the next run starts new ones.
        for actor in self.actors:
            with contextlib.suppress(Exception):  # an actor already gone is what we want
                self.ray.kill(actor)
        self.actors = []


def worker_env() -> dict[str, str]:
    """The driver's settings a worker needs to compute the same records: the learned judge's
    file (CACTUS_LEARNED_JUDGE, made absolute; it must exist on every node, as the models do)."""
    from cactus_core.maths.rules.learned_judge import JUDGE_ENV

    named = os.environ.get(JUDGE_ENV)
    return {JUDGE_ENV: os.path.abspath(os.path.expanduser(named))} if named else {}


def data_identity(setting: Setting) -> dict[str, str]:
    """The files besides the code that decide a setting's numbers (none for the baseline)."""
    return {} if setting.is_baseline else setting.make_rule().data_identity()


def check_worker_data(setting: Setting, data: Mapping[str, Any]) -> None:
    """RayBackendError when a worker's record was computed from other files than the driver
    would use (`Rule.data_identity`: another learned judge), which the driver's cache would
    otherwise keep under its own keys."""
    mine = data_identity(setting)
    if dict(data) != mine:
        raise RayBackendError(
            f"a Ray worker computed {setting.label} with other files than this driver "
            f"({dict(data)} against {mine}): give every node the same learned judge "
            "(CACTUS_LEARNED_JUDGE names it)"
        )


def _absolute_paths(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Local model paths made absolute: a worker's working folder is not the driver's."""
    from cactus_core.engine.loading.deployment import looks_like_path

    out = dict(kwargs)
    for key in ("verifier", "draft", "feature_draft", "cache_dir"):
        value = out.get(key)
        if isinstance(value, str | os.PathLike) and (
            looks_like_path(str(value)) or os.path.exists(value)
        ):
            out[key] = os.path.abspath(os.path.expanduser(value))
    return out


def _cause(err: Exception) -> str:
    text = " ".join(str(err).split())
    return text[:300] + ("…" if len(text) > 300 else "")


RAY_ALLOW_PUBLIC_ENV = "CACTUS_LAB_ALLOW_RAY"  # "1": a public deployment may use Ray too


def ray_address(environ: Mapping[str, str] | None = None) -> str | None:
    """The app's Ray address: CACTUS_LAB_RAY_ADDRESS when the operator set it, and, on a
    public deployment (CACTUS_LAB_PUBLIC), only when CACTUS_LAB_ALLOW_RAY is set as well;
    None otherwise (the app then sweeps in its own process)."""
    from cactus_core.engine.loading.deployment import DeploymentPolicy, env_flag

    env = os.environ if environ is None else environ
    address = (env.get(RAY_ADDRESS_ENV) or "").strip()
    if not address:
        return None
    if DeploymentPolicy.from_env(env).public and not env_flag(env, RAY_ALLOW_PUBLIC_ENV):
        return None
    return address


def backend_from_env(
    pair_kwargs: dict[str, Any], environ: Mapping[str, str] | None = None
) -> RayBackend | None:
    """The app's Ray backend for this pair when `ray_address` gives an address; else None.
    CACTUS_LAB_RAY_WORKERS sets the workers (default 2)."""
    env = os.environ if environ is None else environ
    address = ray_address(env)
    if address is None:
        return None
    try:
        workers = int(env.get(RAY_WORKERS_ENV) or DEFAULT_WORKERS)
    except ValueError:
        raise RayBackendError(f"{RAY_WORKERS_ENV} must be a whole number") from None
    return RayBackend(pair_kwargs, workers=workers, address=address)
