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

import csv
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cactus_core.engine.decoding.generation import PositionCounts
from cactus_core.experiments.estimate import (
    EstimatedCurve,
    pool_curves,
)
from cactus_core.experiments.frontier import (
    Estimate,
    dominance_check,
    mean_ci,
)
from cactus_core.experiments.scoring import PositionScores
from cactus_core.experiments.sweep_cache import SweepCache
from cactus_core.experiments.sweep_config import (
    BASELINE,
    Setting,
    SweepConfig,
    prompt_seed,
)
from cactus_core.experiments.sweep_plan import (  # noqa: F401 - the sweep's public names
    ChunkTask,
    SweepBackend,
    _chunk_payload,
    cached_chunks,
    plan_chunks,
)
from cactus_core.maths.limit import LimitCurve, LimitSums
from cactus_core.maths.rules import DEFAULT_RULE, lossless_rule

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair

# ---------------------------------------------------------------------------- chunk records


@dataclass
class PromptRecord:
    """What one (setting, prompt) run produced; stored in the cache."""

    index: int
    text: str
    tokens: int  # emitted tokens
    verifier_calls: int
    decided: int  # draft tokens that got an accept/reject decision
    accepted: int
    emitted_kl_sum: float  # sum over emitted tokens of KL(pi ‖ q) (the traces' values)
    nll_sum: float  # verifier's NLL (T = 1, no truncation) of the emitted tokens
    scored: int  # positions in the limit sums (decided positions whose token was kept)
    scored_kl_sum: float  # sum of KL(pi ‖ q) over those positions
    expected_accept_sum: float  # sum over them of sum_n p(n)·a(n)
    # per draft position: drafts that got a decision there, and those accepted
    # (`GenerationStats.position_reached` / `position_accepted`)
    position_reached: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    spec_rounds: int = 0

    @property
    def tokens_per_call(self) -> float:
        return self.tokens / self.verifier_calls if self.verifier_calls else math.nan

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.decided if self.decided else math.nan

    @property
    def emitted_kl(self) -> float:
        return self.emitted_kl_sum / self.tokens if self.tokens else math.nan

    @property
    def nll(self) -> float:
        return self.nll_sum / self.tokens if self.tokens else math.nan


@dataclass
class ChunkRecord:
    setting: Setting
    prompts: list[PromptRecord]
    wall_s: float  # the batched generate call only (no scoring)
    limit: LimitSums | None
    # the rule's estimated curve on this chunk's decided positions (SweepConfig.own_estimate)
    estimate: EstimatedCurve | None = None
    estimate_positions: int = 0

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.prompts)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {
            "setting": self.setting.to_dict(),
            "prompts": [_encode(vars(r)) for r in self.prompts],
            "wall_s": self.wall_s,
            "limit": self.limit.to_dict() if self.limit is not None else None,
            "estimate": None if self.estimate is None else self.estimate.to_dict(),
            "estimate_positions": self.estimate_positions,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChunkRecord:
        s = d["setting"]
        return cls(
            setting=Setting(s["rule"], tuple(sorted(s["params"].items()))),
            prompts=[PromptRecord(**_decode(r)) for r in d["prompts"]],
            wall_s=float(d["wall_s"]),
            limit=LimitSums.from_dict(d["limit"]) if d["limit"] is not None else None,
            estimate=EstimatedCurve.from_dict(d["estimate"]) if d.get("estimate") else None,
            estimate_positions=int(d.get("estimate_positions", 0)),
        )


def _csv_cell(v: Any) -> Any:
    """A list (per-position values) as one cell of ';'-separated values; None as empty."""
    if isinstance(v, list):
        return ";".join("" if x is None else f"{x:g}" for x in v)
    return "" if v is None else v


def _encode(d: dict[str, Any]) -> dict[str, Any]:
    # Strict JSON has no inf (an interp pi against a truncated q); keep it as a string.
    return {
        k: (repr(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()
    }


def _decode(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (float(v) if v in ("inf", "-inf", "nan") else v) for k, v in d.items()}


# ---------------------------------------------------------------------------- results


@dataclass
class SettingResult:
    """One setting's chunks and the numbers the page and the CLI show."""

    setting: Setting
    chunks: list[ChunkRecord]
    baseline: list[ChunkRecord] | None = None  # the verifier-only chunks, same prompts

    @property
    def prompts(self) -> list[PromptRecord]:
        return [r for c in self.chunks for r in c.prompts]

    def estimate(self, metric: str) -> Estimate:
        if metric in _PER_PROMPT:
            return mean_ci([getattr(r, metric) for r in self.prompts]).clip(*_BOUNDS[metric])
        if metric == "tokens_per_s":
            return mean_ci([c.tokens_per_s for c in self.chunks]).clip(0.0)
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")

    @property
    def limit_sums(self) -> LimitSums | None:
        sums = [c.limit for c in self.chunks]
        if not sums or any(s is None for s in sums):
            return None
        total = LimitSums.empty()
        for s in sums:
            total = total + s
        return total if total.count else None

    @property
    def scored_kl(self) -> float:
        """Mean KL(pi ‖ q) over the decided positions in the limit sums."""
        n = sum(r.scored for r in self.prompts)
        return sum(r.scored_kl_sum for r in self.prompts) / n if n else math.nan

    @property
    def expected_acceptance(self) -> float:
        """Mean over the same positions of the exact chance sum_n p(n)·a(n) of accepting."""
        n = sum(r.scored for r in self.prompts)
        return sum(r.expected_accept_sum for r in self.prompts) / n if n else math.nan

    @property
    def limit_acceptance(self) -> float:
        """The best mean acceptance any rule could reach on these positions at this KL."""
        sums = self.limit_sums
        if sums is None or self.setting.is_baseline:
            return math.nan
        return sums.curve().at(self.scored_kl)

    @property
    def efficiency(self) -> float:
        lim = self.limit_acceptance
        return self.expected_acceptance / lim if lim > 0 else math.nan

    @property
    def positions(self) -> PositionCounts:
        """Per-position acceptance pooled over the prompts (vLLM's definitions)."""
        return PositionCounts.pooled(
            [
                PositionCounts(tuple(r.position_reached), tuple(r.position_accepted), r.spec_rounds)
                for r in self.prompts
            ]
        )

    def own_curve(self, k: int) -> EstimatedCurve | None:
        """The rule's curve estimated on the positions this setting decoded (its chunks'
        curves pooled by positions), or None where the sweep kept none."""
        done = [c for c in self.chunks if c.estimate is not None and c.estimate_positions]
        if not done:
            return None
        if len(done) == 1:
            return done[0].estimate
        return pool_curves([c.estimate for c in done], [c.estimate_positions for c in done], k)

    def summary(self) -> dict[str, Any]:
        """A flat dict: the setting, each metric's mean and interval, and the limit numbers."""
        row: dict[str, Any] = {
            "setting": self.setting.id,
            "label": self.setting.label,
            "rule": self.setting.rule,
            "param": self.setting.param,
            "value": self.setting.value,
        }
        for metric in METRICS:
            e = self.estimate(metric)
            row[metric] = e.mean
            row[f"{metric}_lo"] = e.lo
            row[f"{metric}_hi"] = e.hi
        row["prompts"] = len(self.prompts)
        row["scored_positions"] = sum(r.scored for r in self.prompts)
        row["scored_kl"] = self.scored_kl
        row["expected_acceptance"] = self.expected_acceptance
        row["limit_acceptance"] = self.limit_acceptance
        row["efficiency"] = self.efficiency
        pos = self.positions
        row["acceptance_by_position"] = pos.conditional()
        row["position_reached"] = list(pos.reached)
        row["position_accepted"] = list(pos.accepted)
        row["mean_acceptance_length"] = pos.mean_acceptance_length
        return row


_PER_PROMPT = ("tokens_per_call", "acceptance_rate", "emitted_kl", "nll")
# The values each per-prompt metric can take: its interval is clipped to them.
_BOUNDS: dict[str, tuple[float, float]] = {
    "tokens_per_call": (1.0, math.inf),  # the recovered or bonus token at least
    "acceptance_rate": (0.0, 1.0),
    "emitted_kl": (0.0, math.inf),
    "nll": (0.0, math.inf),
}
METRICS: tuple[str, ...] = (
    "tokens_per_call",
    "acceptance_rate",
    "tokens_per_s",
    "emitted_kl",
    "nll",
)
METRIC_LABELS: dict[str, str] = {
    "tokens_per_call": "tokens per verifier call",
    "acceptance_rate": "acceptance rate",
    "tokens_per_s": "tokens/s (batched chunks)",
    "emitted_kl": "emitted KL per token (nats)",
    "nll": "verifier NLL per token (nats)",
    "expected_acceptance": "expected acceptance at decided positions",
    "scored_kl": "KL(pi ‖ q) per decided position (nats)",
}


@dataclass
class SweepResult:
    config: SweepConfig
    model_identity: str
    settings: list[SettingResult]
    baseline: SettingResult
    computed_chunks: int = 0  # chunks run now (0: everything came from the cache)

    def get(self, setting: Setting | str) -> SettingResult:
        sid = setting if isinstance(setting, str) else setting.id
        if sid == BASELINE:
            return self.baseline
        for s in self.settings:
            if s.setting.id == sid:
                return s
        raise KeyError(f"no setting {sid!r} in this sweep")

    def rows(self) -> list[dict[str, Any]]:
        return [self.baseline.summary()] + [s.summary() for s in self.settings]

    def pooled_limit(self) -> LimitCurve | None:
        """The limit curve over every decided position of every setting's run."""
        total = LimitSums.empty()
        for s in self.settings:
            sums = s.limit_sums
            if sums is not None:
                total = total + sums
        return total.curve() if total.count else None

    def compare(self, rule: str = DEFAULT_RULE, metric: str = "tokens_per_call") -> dict[str, list]:
        """rule's step Pareto front against every point of each other rule, at the other
        point's emitted KL (`frontier.dominance_check`); {} when rule was not swept."""

        def points(name: str) -> tuple[list[float], list[float]]:
            own = [s for s in self.settings if s.setting.rule == name]
            return (
                [s.estimate("emitted_kl").mean for s in own],
                [s.estimate(metric).mean for s in own],
            )

        if not any(s.setting.rule == rule for s in self.settings):
            return {}
        a_x, a_y = points(rule)
        others = dict.fromkeys(s.setting.rule for s in self.settings if s.setting.rule != rule)
        return {o: dominance_check(a_x, a_y, *points(o)) for o in others}

    def to_json(self, indent: int | None = 2) -> str:
        curve = self.pooled_limit()
        body = {
            "model": self.model_identity,
            "config": {k: v for k, v in self.config.to_dict().items() if k != "prompts"},
            "prompts": len(self.config.prompts),
            "rows": [_json_row(r) for r in self.rows()],
            "cactus_front_vs": {k: [_json_row(r) for r in v] for k, v in self.compare().items()},
            "limit_curve": None
            if curve is None
            else {
                "mean_kl": curve.mean_kl.tolist(),
                "mean_acceptance": curve.mean_acceptance.tolist(),
            },
        }
        return json.dumps(body, indent=indent, allow_nan=False)

    def to_csv(self) -> str:
        rows = self.rows()
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: _csv_cell(v) for k, v in r.items()})
        return buf.getvalue()

    def outputs(self, setting: Setting | str, prompt_index: int) -> tuple[str, str]:
        """(the setting's text, the verifier-only text) for one prompt of the sweep."""

        def find(res: SettingResult) -> str:
            for r in res.prompts:
                if r.index == prompt_index:
                    return r.text
            raise KeyError(f"prompt {prompt_index} is not in this sweep")

        return find(self.get(setting)), find(self.baseline)


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()
    }


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
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder

    prompts = [config.prompts[i] for i in idx]
    rule = lossless_rule() if setting.is_baseline else setting.make_rule()
    # At T = 0 the decoder verifies every rule by exact match; so does the accounting.
    judge = lossless_rule() if config.sampling.greedy else rule
    own = config.own_estimate and not setting.is_baseline
    probe = (
        None
        if setting.is_baseline
        else PositionScores(judge, config.limit, OWN_ESTIMATE_TOP_M if own else 0)
    )
    # The sweep reads counts and emitted tokens only; the top-N rows a trace can keep are
    # for the Decode page's inspector. The exact KL is scored by the probe, off the decoding
    # thread (`scoring`), so the decoder skips its own.
    tree = None if setting.is_baseline else config.tree

    def decoder(probe: Any) -> SpeculativeDecoder:
        s = config.sampling
        return SpeculativeDecoder(
            pair, rule, sampling=s, record_trace=False, measure_kl=False, probe=probe, tree=tree
        )

    dec = decoder(probe)
    run = dec.generate_autoregressive if setting.is_baseline else dec.generate
    # The decoder seeds row j with seed + j; chunks are contiguous, so prompt i always gets
    # prompt_seed(seed, i), whatever the chunk size. A tree decodes one sequence at a time:
    # prompt by prompt, with the same seeds and the probe's rows keyed by the chunk's row.
    seed0 = prompt_seed(config.sampling.seed, idx[0])
    kwargs = {"max_new_tokens": config.max_new_tokens, "chat_template": config.chat_template}
    try:
        if tree is None:
            outs = run(prompts, seed=seed0, **kwargs)
        else:
            row_probe = (lambda j: None) if probe is None else probe.at_row
            outs = [
                decoder(row_probe(j)).generate(p, seed=seed0 + j, **kwargs)
                for j, p in enumerate(prompts)
            ]
    finally:
        if probe is not None:
            probe.finish()
    # The probe's hand-off (record_s) is the lab's instrumentation, not decoding work; a
    # batch's stats carry the batch's clock, a tree chunk's rows each their own.
    batch = outs[: 1 if tree is None else len(outs)]
    wall = sum(o.stats.wall_s - o.stats.record_s for o in batch)
    total = LimitSums.empty() if probe is not None and config.limit else None
    records = []
    for row, (i, out) in enumerate(zip(idx, outs, strict=True)):
        st = out.stats
        kept = probe.kept(row, out.trace) if probe is not None else []
        if total is not None:
            total = total + sum((s for s, _, _ in kept if s is not None), LimitSums.empty())
        # The probe's KL runs over exactly the positions the decoder's would (drafted,
        # decided, token kept); the bonus and verifier-only tokens emit q and add 0.
        kl_sum = sum(d for _, _, d in kept)
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
                expected_accept_sum=sum(e for _, e, _ in kept) if config.limit else 0.0,
                position_reached=list(st.position_reached),
                position_accepted=list(st.position_accepted),
                spec_rounds=st.spec_rounds,
            )
        )
    curve, positions = probe.own_curve(outs, setting.rule, config.sampling.k) if own else (None, 0)
    return ChunkRecord(setting, records, wall, total, curve, positions)


# The top ids of p and of q each kept position keeps for the own-run estimate (as a trace does).
OWN_ESTIMATE_TOP_M = 128
