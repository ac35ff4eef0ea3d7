"""Sweeps: every rule setting on the same prompts, seeds and coins, cached on disk.

A sweep runs each setting (a rule with one parameter value) and a verifier-only baseline on a
prompt set, chunk by chunk, with common random numbers: every setting sees the same prompts
with the same seed, so curves are smooth and comparisons between settings are paired. A chunk
(one setting, a few prompts, one batched `generate`) is written to the cache as soon as it
finishes, keyed by the full configuration and the model pair's identity, so re-running a
finished sweep calls no model and an interrupted one redoes only the missing chunks.

Per setting it reports, each with a 95% interval over prompts (over chunks for tokens/s):
tokens per verifier call, acceptance rate, tokens/s of its batched chunks, emitted KL per
token (exact, the mean of the traces' KL(pi ‖ q)), and the verifier's NLL of the text (from
the decoder's own verify forwards). While a chunk decodes, a probe sees the full p and q rows
of every decided position, from which the limit (`maths.limit.limit_sums`) and the rule's exact
expected acceptance sum_n p(n)·a(n) are accumulated, so nothing re-scores the text afterwards.
Efficiency is that expected acceptance ÷ the limit at the same positions and the same mean KL.
A sweep reports no speedup of its own: a ratio of batched throughputs is not the speedup
(`speedup`); the pages predict it from each setting's per-position acceptance and the pair's
measured costs (`k_tuner.row_speedup`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cactus_core.experiments.estimates.override import OverrideSums
from cactus_core.experiments.estimates.scoring import PositionScores
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import (
    BASELINE,
    Setting,
    SweepConfig,
    prompt_seed,
)
from cactus_core.experiments.sweeps.plan import (  # noqa: F401 - the sweep's public names
    ChunkTask,
    SweepBackend,
    _chunk_payload,
    cached_chunks,
    plan_chunks,
)
from cactus_core.experiments.sweeps.records import ChunkRecord, PromptRecord
from cactus_core.experiments.sweeps.result import (  # noqa: F401 - the sweep's public names
    METRIC_LABELS,
    METRICS,
    SettingResult,
    SweepResult,
)
from cactus_core.maths.limit import LimitSums
from cactus_core.maths.rules import Rule, lossless_rule

if TYPE_CHECKING:
    from cactus_core.engine.decoding.generation import GenerationOutput
    from cactus_core.engine.drafting.tree_settings import TreeSettings
    from cactus_core.engine.loading.pair import ModelPair

# ---------------------------------------------------------------------------- running


class SweepCancelled(Exception):
    """Raised by run_sweep when should_stop() said so; finished chunks stay in the cache."""


@dataclass(frozen=True)
class Progress:
    done: int  # chunks finished (cached or computed)
    total: int
    setting: str  # label of the chunk just finished
    cached: bool  # whether it came from the cache
    workers: int = 1  # the backend's live workers (1 for the local backend)

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


class LocalBackend:
    """The default: chunks run one after another in this process, on the pair in memory."""

    def __init__(self, pair: ModelPair) -> None:
        self.pair = pair

    @property
    def identity(self) -> str:
        return self.pair.identity

    @property
    def workers(self) -> int:
        return 1

    def run(
        self,
        config: SweepConfig,
        tasks: list[ChunkTask],
        deliver: Callable[[ChunkTask, ChunkRecord], None],
        should_stop: Callable[[], bool] | None,
    ) -> None:
        for n, task in enumerate(tasks):
            if should_stop is not None and should_stop():
                raise SweepCancelled(f"cancelled with {len(tasks) - n} chunks left to run")
            deliver(task, run_chunk(self.pair, config, task.setting, task.idx))


def run_sweep(
    pair: ModelPair | None,
    config: SweepConfig,
    cache: SweepCache | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    backend: SweepBackend | None = None,
) -> SweepResult:
    """Run (or read from the cache) every chunk of the sweep; see the module docstring.

    The cached chunks are read first; the rest run on `backend` (default: `LocalBackend` on
    pair, in this process; `sweep_ray.RayBackend` spreads them over a Ray cluster and pair may
    be None), in the order of `plan_chunks`. Each finished chunk is written to the cache as it
    arrives, so a stopped sweep loses nothing it finished. cache None uses the default folder.
    should_stop is checked before each chunk that needs computing; when it returns True the
    sweep raises SweepCancelled (the finished chunks are kept).
    """
    cache = cache if cache is not None else SweepCache()
    if backend is None:
        if pair is None:
            raise ValueError("run_sweep needs a model pair or a backend")
        backend = LocalBackend(pair)
    identity = backend.identity
    tasks = plan_chunks(identity, config)
    records: dict[int, ChunkRecord] = {}
    computed = 0

    def arrived(task: ChunkTask, record: ChunkRecord, cached: bool) -> None:
        if task.position in records:
            # A backend that retried a chunk whose first answer did arrive after all: the
            # sweep keeps the first, so no chunk is counted twice.
            return
        records[task.position] = record
        if on_progress is not None:
            on_progress(
                Progress(len(records), len(tasks), task.setting.label, cached, backend.workers)
            )

    todo = []
    for task in tasks:
        stored = cache.get(task.payload)
        if stored is None:
            todo.append(task)
        else:
            arrived(task, ChunkRecord.from_dict(stored), True)

    def deliver(task: ChunkTask, record: ChunkRecord) -> None:
        nonlocal computed
        if task.position not in records:
            cache.put(task.payload, record.to_dict())
            computed += 1
        arrived(task, record, False)

    if todo:
        backend.run(config, todo, deliver, should_stop)
    missing = [t for t in tasks if t.position not in records]
    if missing:
        raise RuntimeError(f"the sweep backend returned without {len(missing)} chunks")
    return assemble(config, identity, [(t, records[t.position]) for t in tasks], computed)


def assemble(
    config: SweepConfig,
    identity: str,
    chunks: list[tuple[ChunkTask, ChunkRecord]],
    computed: int = 0,
) -> SweepResult:
    """The SweepResult of every chunk of a sweep, given in `plan_chunks` order."""
    by_setting: dict[Setting, list[ChunkRecord]] = {s: [] for s in [Setting(BASELINE)]}
    by_setting.update({s: [] for s in config.settings})
    for task, record in chunks:
        by_setting[task.setting].append(record)
    base = SettingResult(Setting(BASELINE), by_setting[Setting(BASELINE)])
    results = [SettingResult(s, by_setting[s], base.chunks) for s in config.settings]
    base.baseline = base.chunks
    return SweepResult(config, identity, results, base, computed)


def run_chunk(
    pair: ModelPair, config: SweepConfig, setting: Setting, idx: tuple[int, ...]
) -> ChunkRecord:
    """Generate one setting on a few prompts (one batched call) and score its positions."""
    rule = lossless_rule() if setting.is_baseline else setting.make_rule()
    # At T = 0 the decoder verifies every rule by exact match; so does the accounting.
    judge = lossless_rule() if config.sampling.greedy else rule
    own = config.own_estimate and not setting.is_baseline
    probe = (
        None
        if setting.is_baseline
        else PositionScores(
            judge, config.limit, OWN_ESTIMATE_TOP_M if own else 0, k=config.sampling.k
        )
    )
    tree = None if setting.is_baseline else config.tree
    try:
        outs = _decode_chunk(pair, config, rule, setting.is_baseline, idx, probe, tree)
    finally:
        if probe is not None:
            probe.finish()
    # The probe's hand-off (record_s) is the lab's instrumentation, not decoding work; a
    # batch's stats carry the batch's clock, a tree chunk's rows each their own.
    batch = outs[: 1 if tree is None else len(outs)]
    wall = sum(o.stats.wall_s - o.stats.record_s for o in batch)
    records, total = _prompt_records(config, idx, outs, probe)
    curve, positions = probe.own_curve(outs, setting.rule, config.sampling.k) if own else (None, 0)
    override = None
    if probe is not None and judge.caps.overrides_sps:
        # its pi depends on more than a position's rows: estimated from this decode
        parts = [probe.override_sums(row, out.trace) for row, out in enumerate(outs)]
        override = sum(parts, OverrideSums.empty())
    return ChunkRecord(setting, records, wall, total, curve, positions, override)


def _decode_chunk(
    pair: ModelPair,
    config: SweepConfig,
    rule: Rule,
    baseline: bool,
    idx: tuple[int, ...],
    probe: PositionScores | None,
    tree: TreeSettings | None,
) -> list[GenerationOutput]:
    """The chunk's prompts decoded: one batch, or prompt by prompt for a tree (one sequence at
    a time, the same seeds, the probe's rows keyed by the chunk's row)."""
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder

    def decoder(probe: Any) -> SpeculativeDecoder:
        # The sweep reads counts and emitted tokens only; the top-N rows a trace can keep are
        # for the Decode page's inspector. The exact KL is scored by the probe, off the
        # decoding thread (`scoring`), so the decoder skips its own.
        s = config.sampling
        return SpeculativeDecoder(
            pair, rule, sampling=s, record_trace=False, measure_kl=False, probe=probe, tree=tree
        )

    prompts = [config.prompts[i] for i in idx]
    dec = decoder(probe)
    run = dec.generate_autoregressive if baseline else dec.generate
    # The decoder seeds row j with seed + j; chunks are contiguous, so prompt i always gets
    # prompt_seed(seed, i), whatever the chunk size.
    seed0 = prompt_seed(config.sampling.seed, idx[0])
    kwargs = {"max_new_tokens": config.max_new_tokens, "chat_template": config.chat_template}
    if tree is None:
        outs = run(prompts, seed=seed0, **kwargs)
        return outs if isinstance(outs, list) else [outs]
    row_probe = (lambda j: None) if probe is None else probe.at_row
    return [
        _one(decoder(row_probe(j)).generate(p, seed=seed0 + j, **kwargs))
        for j, p in enumerate(prompts)
    ]


def _one(out: GenerationOutput | list[GenerationOutput]) -> GenerationOutput:
    return out[0] if isinstance(out, list) else out


def _prompt_records(
    config: SweepConfig,
    idx: tuple[int, ...],
    outs: list[GenerationOutput],
    probe: PositionScores | None,
) -> tuple[list[PromptRecord], LimitSums | None]:
    """One record per prompt of the chunk, and the limit's sums over its scored positions."""
    total = LimitSums.empty() if probe is not None and config.limit else None
    records = []
    for row, (i, out) in enumerate(zip(idx, outs, strict=True)):
        st = out.stats
        kept = probe.kept(row, out.trace) if probe is not None else []
        if total is not None:
            total = total + sum((s.limit for s in kept if s.limit is not None), LimitSums.empty())
        # The probe's KL runs over exactly the positions the decoder's would (drafted,
        # decided, token kept); the bonus and verifier-only tokens emit q and add 0.
        kl_sum = sum(s.kl for s in kept)
        records.append(
            PromptRecord(
                index=i,
                text=out.text,
                tokens=st.new_tokens,
                verifier_calls=st.verifier_calls,
                decided=st.decided_tokens,
                accepted=st.accepted_tokens,
                emitted_kl_sum=kl_sum,
                nll_sum=st.nll_sum,
                scored=len(kept) if config.limit else 0,
                scored_kl_sum=kl_sum if config.limit else 0.0,
                expected_accept_sum=sum(s.expected for s in kept) if config.limit else 0.0,
                position_reached=list(st.position_reached),
                position_accepted=list(st.position_accepted),
                spec_rounds=st.spec_rounds,
                emitted_tv_sum=sum(s.tv for s in kept),
                emitted_reverse_kl_sum=sum(s.reverse_kl for s in kept),
            )
        )
    return records, total


# The top ids of p and of q each kept position keeps for the own-run estimate (as a trace does).
OWN_ESTIMATE_TOP_M = 128
