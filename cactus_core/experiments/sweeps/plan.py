"""A sweep's plan: its chunks in order with their cache keys, and what a backend that runs
them provides (`SweepBackend`); `sweep.run_sweep` drives it, `sweep.LocalBackend` and
`sweep_ray.RayBackend` are the two backends."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from cactus_core.experiments.sweeps.cache import SweepCache, code_version
from cactus_core.experiments.sweeps.config import (
    BASELINE,
    Setting,
    SweepConfig,
    prompt_seed,
)


def _chunk_payload(
    pair_identity: str, config: SweepConfig, setting: Setting, idx: tuple[int, ...]
) -> dict:
    return {
        # The pair's identity names each model with the hash of its weights and its hub
        # revision; code_version covers the code that computes the numbers.
        "model": pair_identity,
        "code": code_version(),
        "setting": setting.to_dict(),
        "sampling": config.decoding(),
        "limit": config.limit,
        "prompts": [hashlib.sha256(config.prompts[i].encode()).hexdigest() for i in idx],
        "seeds": [prompt_seed(config.sampling.seed, i) for i in idx],
        # only where it changes the chunk (not the verifier-only baseline), so chunks of
        # sweeps without it keep their keys
        **({"own_estimate": True} if config.own_estimate and not setting.is_baseline else {}),
        **_rule_data(setting),
    }


def _rule_data(setting: Setting) -> dict:
    # only for a rule that reads a file, so every other chunk keeps its key
    try:
        data = {} if setting.is_baseline else setting.make_rule().data_identity()
    except ValueError as err:  # an unreadable file: the run itself then says so
        data = {"unreadable": str(err)}
    return {"rule_data": data} if data else {}


def cached_chunks(pair_identity: str, config: SweepConfig, cache: SweepCache) -> tuple[int, int]:
    """(chunks of this sweep already in the cache, all chunks): no model is needed."""
    tasks = plan_chunks(pair_identity, config)
    return sum(t.payload in cache for t in tasks), len(tasks)


@dataclass(frozen=True)
class ChunkTask:
    """One unit of work of a sweep: a setting on one prompt chunk, with its cache key."""

    position: int  # the chunk's place in the sweep's order (prompt chunk major, setting minor)
    setting: Setting
    idx: tuple[int, ...]  # the prompts' indexes in the config
    payload: dict  # the cache key (`_chunk_payload`)


def plan_chunks(pair_identity: str, config: SweepConfig) -> list[ChunkTask]:
    """Every chunk of the sweep, prompt chunk by prompt chunk, the verifier-only baseline first
    and then every setting on the same prompts (so a speedup compares runs made back to back)."""
    return list(iter_chunks(pair_identity, config))


def iter_chunks(pair_identity: str, config: SweepConfig) -> Iterator[ChunkTask]:
    """`plan_chunks` one task at a time: a reader of records builds the keys of the records it
    has, not of every chunk a configuration (perhaps a hostile one) claims."""
    settings = [Setting(BASELINE), *config.settings]
    pairs = ((idx, s) for idx in config.chunks() for s in settings)
    for n, (idx, s) in enumerate(pairs):
        yield ChunkTask(n, s, idx, _chunk_payload(pair_identity, config, s, idx))


def chunk_count(config: SweepConfig) -> int:
    """How many chunks `plan_chunks` plans, counted without planning them."""
    return -(-len(config.prompts) // config.chunk_size) * (1 + len(config.settings))


@runtime_checkable
class SweepBackend(Protocol):
    """Where the chunks that are not cached run. Every backend runs `run_chunk` on the same
    inputs and hands each record back as it finishes; `run_sweep` owns the cache, the order
    and the progress, so every backend gives the same records."""

    @property
    def identity(self) -> str:
        """The pair's identity (`ModelPair.identity`): the cache keys depend on it."""
        ...

    @property
    def workers(self) -> int:
        """How many workers run chunks now (the progress bar shows it)."""
        ...

    def run(
        self,
        config: SweepConfig,
        tasks: list[ChunkTask],
        deliver: Callable[[ChunkTask, Any], None],  # (task, its sweep.ChunkRecord)
        should_stop: Callable[[], bool] | None,
    ) -> None:
        """Run every task and call deliver once per task, in any order; raise SweepCancelled
        (after stopping what runs) when should_stop() says so."""
        ...
