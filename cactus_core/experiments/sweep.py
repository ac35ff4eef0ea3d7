"""Sweeps: every rule setting on the same prompts, seeds and coins, cached on disk.

A sweep runs each setting (a rule with one parameter value) and a verifier-only baseline on a
prompt set, chunk by chunk, with common random numbers: every setting sees the same prompts
with the same seed, so curves are smooth and comparisons between settings are paired. A chunk
(one setting, a few prompts, one batched `generate`) is written to the cache as soon as it
finishes, keyed by the full configuration and the model pair's identity, so re-running a
finished sweep calls no model and an interrupted one redoes only the missing chunks.

Per setting it reports, each with a 95% interval over prompts (over chunks for the timings):
tokens per verifier call, acceptance rate, tokens/s, speedup over verifier-only, emitted KL per
token (exact, the mean of the traces' KL(pi ‖ q)), and the verifier's NLL of the text (from
the decoder's own verify forwards). While a chunk decodes, a probe sees the full p and q rows
of every decided position, from which the limit (`frontier.limit_sums`) and the rule's exact
expected acceptance sum_n p(n)·a(n) are accumulated, so nothing re-scores the text afterwards.
Efficiency is that expected acceptance ÷ the limit at the same positions and the same mean KL.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import torch

from cactus_core.experiments.frontier import (
    Estimate,
    LimitCurve,
    LimitSums,
    dominance_check,
    interpolate_param_for_budget,
    limit_sums_per_row,
    mean_ci,
)
from cactus_core.experiments.sweep_cache import SweepCache
from cactus_core.maths.rules import RULE_NAMES, Rule, make_rule

if TYPE_CHECKING:
    from cactus_core.engine.models import ModelPair

BASELINE = "verifier-only"

# The parameter a sweep varies for each rule (tas keeps its alpha at the default 0.3).
SWEPT_PARAM: dict[str, str | None] = {
    "sps": None,
    "cactus": "delta",
    "cactus-exact": "delta",
    "cactus-budget": "budget",
    "tas": "epsilon",
    "topk": "k_top",
    "interp": "alpha",
    "optimal": "budget",
}
# Grids that span each rule's useful range on chat models at T = 0.7, from lossless (or
# nearly) to a KL of about a nat per token.
DEFAULT_GRIDS: dict[str, tuple[float, ...]] = {
    "cactus": (0.0, 0.1, 0.3, 1.0, 3.0),
    "cactus-exact": (0.0, 0.1, 0.3, 1.0, 3.0),
    "cactus-budget": (0.01, 0.03, 0.1, 0.3, 1.0),
    "tas": (0.3, 0.09, 0.03, 0.01, 0.001),
    "topk": (1, 2, 5, 10, 50),
    "interp": (0.0, 0.1, 0.25, 0.5, 0.75),
    "optimal": (0.01, 0.03, 0.1, 0.3, 1.0),
}


# ------------------------------------------------------------------------------ prompt files

MAX_PROMPT_FILE_BYTES = 5 * 1024 * 1024
MAX_PROMPTS = 1000


def parse_prompt_file(name: str, data: bytes) -> list[str]:
    """Prompts from an uploaded file's name and bytes; ValueError naming the bad line.

    .jsonl: one prompt a line, a JSON object with a string "prompt" field (the built-in file's
    format) or a bare JSON string. .txt: one prompt a line, with the two characters \\n read as
    a newline. Blank lines are skipped. Files over 5 MB or with over 1,000 prompts are refused.
    """
    if len(data) > MAX_PROMPT_FILE_BYTES:
        raise ValueError(
            f"{name}: {len(data) / 2**20:.1f} MB is over the {MAX_PROMPT_FILE_BYTES // 2**20} MB "
            "limit for a prompt file"
        )
    suffix = PurePath(name).suffix.lower()
    if suffix not in (".jsonl", ".txt"):
        raise ValueError(f"{name}: a prompt file must end in .jsonl or .txt, not {suffix or '∅'}")
    prompts: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as err:
            raise ValueError(f"{name}, line {number}: not valid UTF-8 ({err.reason})") from None
        if not line.strip():
            continue
        if suffix == ".jsonl":
            prompt = _jsonl_prompt(name, number, line)
        else:
            prompt = line.strip().replace("\\n", "\n")
        if "\x00" in prompt:
            raise ValueError(f"{name}, line {number}: the prompt contains a NUL character")
        prompts.append(prompt)
        if len(prompts) > MAX_PROMPTS:
            raise ValueError(f"{name}: more than {MAX_PROMPTS} prompts (line {number}); split it")
    if not prompts:
        raise ValueError(f"{name}: no prompts (the file is empty or only blank lines)")
    return prompts


def _jsonl_prompt(name: str, number: int, line: str) -> str:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}, line {number}: not valid JSON ({err.msg})") from None
    if isinstance(obj, dict):
        if "prompt" not in obj:
            raise ValueError(f'{name}, line {number}: the JSON object has no "prompt" field')
        obj = obj["prompt"]
    if not isinstance(obj, str):
        raise ValueError(
            f'{name}, line {number}: expected a string or {{"prompt": "..."}}, '
            f"got {type(obj).__name__}"
        )
    if not obj.strip():
        raise ValueError(f"{name}, line {number}: the prompt is empty")
    return obj


# ---------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Setting:
    """One point of a sweep: a rule with its parameters, or the verifier-only baseline."""

    rule: str
    params: tuple[tuple[str, float | int], ...] = ()

    @classmethod
    def of(cls, rule: str, **params: float | int) -> Setting:
        if rule == BASELINE:
            if params:
                raise ValueError(f"{BASELINE} takes no parameters")
            return cls(rule)
        checked = make_rule(rule, **params).params  # validates names and ranges
        given = {k: checked[k] for k in params}
        return cls(rule, tuple(sorted(given.items())))

    @property
    def is_baseline(self) -> bool:
        return self.rule == BASELINE

    def make_rule(self) -> Rule:
        if self.is_baseline:
            raise ValueError("the verifier-only baseline has no acceptance rule")
        return make_rule(self.rule, **dict(self.params))

    @property
    def label(self) -> str:
        return BASELINE if self.is_baseline else self.make_rule().label

    @property
    def value(self) -> float | None:
        """The swept parameter's value (None for sps and the baseline)."""
        name = SWEPT_PARAM.get(self.rule)
        return None if name is None else float(self.make_rule().params[name])

    @property
    def id(self) -> str:
        """A short stable name, e.g. 'cactus:delta=0.3' (used to find a clicked point)."""
        return self.rule + "".join(f":{k}={v:g}" for k, v in self.params)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "params": dict(self.params)}

    @classmethod
    def from_id(cls, text: str) -> Setting:
        rule, *parts = text.split(":")
        params: dict[str, float | int] = {}
        for part in parts:
            key, _, val = part.partition("=")
            num = float(val)
            params[key] = int(num) if num.is_integer() and key == "k_top" else num
        return cls.of(rule, **params)


def settings_from_grids(grids: dict[str, Sequence[float]]) -> list[Setting]:
    """Settings for each rule over its grid of the swept parameter (sps takes an empty grid)."""
    out: list[Setting] = []
    for rule, grid in grids.items():
        if rule not in SWEPT_PARAM:
            raise ValueError(f"unknown rule {rule!r}; allowed: {', '.join(RULE_NAMES)}")
        name = SWEPT_PARAM[rule]
        if name is None:
            out.append(Setting.of(rule))
            continue
        if not grid:
            raise ValueError(f"rule {rule!r}: give at least one value of {name}")
        for value in grid:
            v = int(value) if rule == "topk" else float(value)
            out.append(Setting.of(rule, **{name: v}))
    return list(dict.fromkeys(out))  # drop repeats, keep order


def parse_grid(rule: str, text: str) -> list[float]:
    """A rule's grid from text such as "0, 0.1, 0.3" (commas or spaces); ValueError if bad."""
    if rule not in SWEPT_PARAM:
        raise ValueError(f"unknown rule {rule!r}; allowed: {', '.join(RULE_NAMES)}")
    name = SWEPT_PARAM[rule]
    parts = [t for t in text.replace(",", " ").split() if t]
    if name is None:
        if parts:
            raise ValueError(f"{rule} has no parameter to sweep; leave its grid empty")
        return []
    if not parts:
        raise ValueError(f"{rule}: give at least one value of {name}")
    values = []
    for t in parts:
        try:
            values.append(float(t))
        except ValueError:
            raise ValueError(f"{rule}: {t!r} is not a number") from None
    settings_from_grids({rule: values})  # checks each value's range
    return values


@dataclass(frozen=True)
class SweepConfig:
    """Everything that decides a sweep's numbers except the models."""

    prompts: tuple[str, ...]
    settings: tuple[Setting, ...]
    k: int = 4
    temperature: float = 0.7
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    chat_template: bool = True
    chunk_size: int = 5
    limit: bool = True  # score every decided position for the limit and the efficiency

    def __post_init__(self) -> None:
        if not self.prompts:
            raise ValueError("a sweep needs at least one prompt")
        if len(self.prompts) > MAX_PROMPTS:
            raise ValueError(
                f"a sweep takes at most {MAX_PROMPTS} prompts, got {len(self.prompts)}"
            )
        if not self.settings:
            raise ValueError("a sweep needs at least one setting")
        if any(s.is_baseline for s in self.settings):
            raise ValueError(f"{BASELINE} is always run; do not list it as a setting")
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")

    def chunks(self) -> list[tuple[int, ...]]:
        n = len(self.prompts)
        return [tuple(range(i, min(i + self.chunk_size, n))) for i in range(0, n, self.chunk_size)]

    def sampling(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
            "chat_template": self.chat_template,
            "seed": self.seed,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.sampling(),
            "chunk_size": self.chunk_size,
            "limit": self.limit,
            "settings": [s.id for s in self.settings],
            "prompts": list(self.prompts),
        }


def prompt_seed(seed: int, index: int) -> int:
    """The seed of prompt `index`: the same in every setting (common random numbers)."""
    return seed + index


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
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChunkRecord:
        s = d["setting"]
        return cls(
            setting=Setting(s["rule"], tuple(sorted(s["params"].items()))),
            prompts=[PromptRecord(**_decode(r)) for r in d["prompts"]],
            wall_s=float(d["wall_s"]),
            limit=LimitSums.from_dict(d["limit"]) if d["limit"] is not None else None,
        )


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
            return mean_ci([getattr(r, metric) for r in self.prompts])
        if metric == "tokens_per_s":
            return mean_ci([c.tokens_per_s for c in self.chunks])
        if metric == "speedup":
            if self.baseline is None:
                return mean_ci([])
            return mean_ci(
                [
                    c.tokens_per_s / b.tokens_per_s
                    for c, b in zip(self.chunks, self.baseline, strict=True)
                ]
            )
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

    def summary(self) -> dict[str, Any]:
        """A flat dict: the setting, each metric's mean and interval, and the limit numbers."""
        row: dict[str, Any] = {
            "setting": self.setting.id,
            "label": self.setting.label,
            "rule": self.setting.rule,
            "param": SWEPT_PARAM.get(self.setting.rule),
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
        return row


_PER_PROMPT = ("tokens_per_call", "acceptance_rate", "emitted_kl", "nll")
METRICS: tuple[str, ...] = (
    "tokens_per_call",
    "acceptance_rate",
    "tokens_per_s",
    "speedup",
    "emitted_kl",
    "nll",
)
METRIC_LABELS: dict[str, str] = {
    "tokens_per_call": "tokens per verifier call",
    "acceptance_rate": "acceptance rate",
    "tokens_per_s": "tokens/s",
    "speedup": "speedup vs verifier-only",
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

    def compare(self, rule: str = "cactus", metric: str = "tokens_per_call") -> dict[str, list]:
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
            writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
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

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


def _chunk_payload(
    pair_identity: str, config: SweepConfig, setting: Setting, idx: tuple[int, ...]
) -> dict:
    return {
        "model": pair_identity,
        "setting": setting.to_dict(),
        "sampling": config.sampling(),
        "limit": config.limit,
        "prompts": [hashlib.sha256(config.prompts[i].encode()).hexdigest() for i in idx],
        "seeds": [prompt_seed(config.seed, i) for i in idx],
    }


def cached_chunks(pair_identity: str, config: SweepConfig, cache: SweepCache) -> tuple[int, int]:
    """(chunks of this sweep already in the cache, all chunks): no model is needed."""
    settings = [Setting(BASELINE), *config.settings]
    total = done = 0
    for idx in config.chunks():
        for s in settings:
            total += 1
            done += _chunk_payload(pair_identity, config, s, idx) in cache
    return done, total


def run_sweep(
    pair: ModelPair,
    config: SweepConfig,
    cache: SweepCache | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SweepResult:
    """Run (or read from the cache) every chunk of the sweep; see the module docstring.

    Chunks run prompt-chunk by prompt-chunk, the verifier-only baseline first and then every
    setting on the same prompts, so a speedup compares runs made back to back. cache None
    uses the default folder. should_stop is checked before each chunk that needs computing;
    when it returns True the sweep raises SweepCancelled (the finished chunks are kept).
    """
    cache = cache if cache is not None else SweepCache()
    identity = pair.identity
    all_settings = [Setting(BASELINE), *config.settings]
    records: dict[Setting, list[ChunkRecord]] = {s: [] for s in all_settings}
    chunks = config.chunks()
    total = len(chunks) * len(all_settings)
    done = computed = 0
    for idx in chunks:
        for setting in all_settings:
            payload = _chunk_payload(identity, config, setting, idx)
            stored = cache.get(payload)
            if stored is not None:
                record = ChunkRecord.from_dict(stored)
            else:
                if should_stop is not None and should_stop():
                    raise SweepCancelled(f"cancelled after {done} of {total} chunks")
                record = run_chunk(pair, config, setting, idx)
                cache.put(payload, record.to_dict())
                computed += 1
            records[setting].append(record)
            done += 1
            if on_progress is not None:
                on_progress(Progress(done, total, setting.label, stored is not None))
    base = SettingResult(Setting(BASELINE), records[Setting(BASELINE)])
    results = [SettingResult(s, records[s], base.chunks) for s in config.settings]
    base.baseline = base.chunks
    return SweepResult(config, identity, results, base, computed)


def run_chunk(
    pair: ModelPair, config: SweepConfig, setting: Setting, idx: tuple[int, ...]
) -> ChunkRecord:
    """Generate one setting on a few prompts (one batched call) and score its positions."""
    from cactus_core.engine.decoder import SpeculativeDecoder

    prompts = [config.prompts[i] for i in idx]
    rule = make_rule("sps") if setting.is_baseline else setting.make_rule()
    # At T = 0 the decoder verifies every rule by exact match; so does the accounting.
    judge = make_rule("sps") if config.temperature == 0 else rule
    probe = _PositionScores(judge) if config.limit and not setting.is_baseline else None
    # The sweep reads counts and emitted tokens only; the top-N rows a trace can keep are
    # for the Decode page's inspector.
    dec = SpeculativeDecoder(
        pair,
        rule,
        k=config.k,
        temperature=config.temperature,
        top_k=config.top_k,
        top_p=config.top_p,
        record_trace=False,
        probe=probe,
    )
    run = dec.generate_autoregressive if setting.is_baseline else dec.generate
    # The decoder seeds row j with seed + j; chunks are contiguous, so prompt i always gets
    # prompt_seed(seed, i), whatever the chunk size.
    outs = run(
        prompts,
        max_new_tokens=config.max_new_tokens,
        seed=prompt_seed(config.seed, idx[0]),
        chat_template=config.chat_template,
    )
    stats = outs[0].stats
    # The exact-KL bookkeeping and the probe (record_s) are the lab's instrumentation, not
    # decoding work.
    wall = stats.wall_s - stats.record_s
    total = LimitSums.empty() if probe is not None else None
    records = []
    for row, (i, out) in enumerate(zip(idx, outs, strict=True)):
        st = out.stats
        kept = probe.kept(row, out.trace) if probe is not None else []
        sums = sum((s for s, _ in kept), LimitSums.empty())
        if total is not None:
            total = total + sums
        records.append(
            PromptRecord(
                index=i,
                text=out.text,
                tokens=st.new_tokens,
                verifier_calls=st.verifier_calls,
                decided=st.decided_tokens,
                accepted=st.accepted_tokens,
                emitted_kl_sum=st.kl_sum,
                nll_sum=st.nll_sum,
                scored=len(kept),
                # The decoder's KL sum runs over exactly these positions (drafted, decided,
                # token kept; the bonus position emits q and adds 0), so it is already exact.
                scored_kl_sum=st.kl_sum if kept else 0.0,
                expected_accept_sum=sum(e for _, e in kept),
            )
        )
    return ChunkRecord(setting, records, wall, total)


class _PositionScores:
    """Decoder probe: per decided position, its one-position limit sums and the rule's exact
    expected acceptance sum_n p(n)·a(n), kept until the sequence's fate is known."""

    def __init__(self, judge: Rule) -> None:
        self.judge = judge
        self.rounds: dict[tuple[int, int], list[tuple[LimitSums, float]]] = {}

    def __call__(self, row: int, rnd: int, p: torch.Tensor, q: torch.Tensor) -> None:
        a = self.judge.accept_probs_all(p, q, validate=False)
        expected = (p.double() * a.double()).sum(-1).tolist()
        self.rounds[(row, rnd)] = list(zip(limit_sums_per_row(p, q), expected, strict=True))

    def kept(self, row: int, trace: Any) -> list[tuple[LimitSums, float]]:
        """The scores of the row's decided positions whose token was kept (a round cut by EOS
        or max_new_tokens loses its tail)."""
        out: list[tuple[LimitSums, float]] = []
        for rnd in trace.rounds:
            if rnd.k > 0:
                out.extend(self.rounds.get((row, rnd.index), [])[: len(rnd.emitted_ids)])
        return out


# ---------------------------------------------------------------------------- tuner

TUNABLE = ("cactus", "cactus-exact", "cactus-budget", "interp", "optimal")


@dataclass
class TuneResult:
    """The parameter that meets a KL budget, and the confirming run's measurements."""

    rule: str
    param: str
    value: float
    kl_budget: float
    measured_kl: Estimate
    tokens_per_call: Estimate
    confirmed: bool  # the value comes from a confirming run (not a fallback grid point)
    tries: list[tuple[float, float]] = field(default_factory=list)  # (value, measured KL)
    sampling: dict[str, Any] = field(default_factory=dict)

    @property
    def setting(self) -> Setting:
        return Setting.of(self.rule, **{self.param: self.value})

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            self.param: self.value,
            "kl_budget": self.kl_budget,
            "measured_emitted_kl": self.measured_kl.to_dict(),
            "tokens_per_call": self.tokens_per_call.to_dict(),
            "confirmed": self.confirmed,
            "tries": [{"value": v, "emitted_kl": _json_num(k)} for v, k in self.tries],
            "sampling": self.sampling,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def cli_flags(self) -> str:
        """The flags that reproduce this setting with `python -m cactus_core generate`."""
        s = self.sampling
        flags = [f"--rule {self.rule}", f"--{self.param.replace('_', '-')} {self.value:.6g}"]
        if s:
            flags += [
                f"--k {s['k']}",
                f"--temperature {s['temperature']:g}",
                f"--top-k {s['top_k']}",
                f"--top-p {s['top_p']:g}",
            ]
        return " ".join(flags)


def _json_num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def tune(
    pair: ModelPair,
    config: SweepConfig,
    kl_budget: float,
    rule: str = "cactus",
    sweep: SweepResult | None = None,
    cache: SweepCache | None = None,
    max_confirm: int = 4,
    on_progress: Callable[[Progress], None] | None = None,
) -> TuneResult:
    """The rule's parameter whose mean emitted KL per token meets kl_budget, confirmed.

    Interpolates the measured curve (KL against the parameter, from `sweep` or from a sweep of
    config's settings for this rule), then runs that value on the same prompts and seeds. If
    the confirming run overshoots the budget, it brackets and tries again, up to max_confirm
    runs in all; failing that it returns the largest value whose run met the budget
    (confirmed=False; at parameter 0 the Cactus rules are lossless, so with 0 in the grid one
    always exists).
    """
    if rule not in TUNABLE:
        raise ValueError(f"the tuner works on {', '.join(TUNABLE)}; got {rule!r}")
    if not (math.isfinite(kl_budget) and kl_budget >= 0):
        raise ValueError(f"KL budget must be a number >= 0, got {kl_budget}")
    param = SWEPT_PARAM[rule]
    assert param is not None
    if sweep is None:
        own = [s for s in config.settings if s.rule == rule]
        if not own:
            own = settings_from_grids({rule: DEFAULT_GRIDS[rule]})
        sweep = run_sweep(pair, replace(config, settings=tuple(own)), cache, on_progress)
    known: dict[float, SettingResult] = {
        float(s.setting.value): s for s in sweep.settings if s.setting.rule == rule
    }
    if not known:
        raise ValueError(f"the sweep has no {rule} settings to interpolate")

    def kl_of(res: SettingResult) -> float:
        return res.estimate("emitted_kl").mean

    tries: list[tuple[float, float]] = []
    grid = sorted(known)
    value = interpolate_param_for_budget(grid, [kl_of(known[v]) for v in grid], kl_budget)
    for overshoots in range(max_confirm):
        if value not in known:
            known[value] = _confirm(pair, config, Setting.of(rule, **{param: value}), cache)
        kl_now = kl_of(known[value])
        tries.append((value, kl_now))
        if kl_now <= kl_budget:
            return _tuned(rule, param, value, kl_budget, known[value], True, tries, config)
        # Overshot: bracket the budget between the largest value known to fit and the
        # smallest one above it known not to, and take a regula falsi step. KL is concave in
        # delta, so plain regula falsi creeps up from above; halving the kept end's weight
        # per overshoot (the Illinois rule) makes the next try land on the fitting side.
        fitting = [v for v in known if kl_of(known[v]) <= kl_budget]
        if not fitting:
            break
        lo = max(fitting)
        hi = min(v for v in known if v > lo)
        f_lo = (kl_of(known[lo]) - kl_budget) * 0.5 ** (overshoots + 1)
        f_hi = kl_of(known[hi]) - kl_budget
        if not math.isfinite(f_hi) or f_hi <= f_lo:
            value = 0.5 * (lo + hi)
        else:
            value = lo + (hi - lo) * (-f_lo) / (f_hi - f_lo)
        if value in known:
            break
    fits = [v for v, res in known.items() if kl_of(res) <= kl_budget]
    if not fits:
        raise ValueError(
            f"no {rule} setting meets an emitted KL of {kl_budget:g} nats per token; "
            f"add a smaller {param} to the grid"
        )
    value = max(fits)
    return _tuned(rule, param, value, kl_budget, known[value], False, tries, config)


def _tuned(
    rule: str,
    param: str,
    value: float,
    kl_budget: float,
    res: SettingResult,
    confirmed: bool,
    tries: list[tuple[float, float]],
    config: SweepConfig,
) -> TuneResult:
    s = config.sampling()
    sampling = {k: s[k] for k in ("k", "temperature", "top_k", "top_p", "max_new_tokens", "seed")}
    return TuneResult(
        rule, param, value, kl_budget, res.estimate("emitted_kl"),
        res.estimate("tokens_per_call"), confirmed, tries, sampling,
    )  # fmt: skip


def _confirm(
    pair: ModelPair, config: SweepConfig, setting: Setting, cache: SweepCache | None
) -> SettingResult:
    """One setting on the sweep's prompts and seeds (the baseline chunks come from the cache)."""
    return run_sweep(pair, replace(config, settings=(setting,)), cache).settings[0]


# ---------------------------------------------------------------------------- command line


def add_sweep_arguments(parser: Any) -> None:
    """The `python -m cactus_core sweep` options (an argparse parser or subparser)."""
    parser.add_argument(
        "--rules",
        default="cactus,tas,interp",
        help=f"comma-separated rules to sweep (of {', '.join(SWEPT_PARAM)}); default %(default)s",
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="RULE=V1,V2,...",
        help="a rule's values of its swept parameter (repeatable); defaults: "
        + "; ".join(f"{r}={','.join(f'{v:g}' for v in g)}" for r, g in DEFAULT_GRIDS.items()),
    )
    parser.add_argument(
        "--prompts",
        default=None,
        metavar="FILE",
        help="a .jsonl or .txt prompt file (default: the built-in chat prompts)",
    )
    parser.add_argument("--n-prompts", type=int, default=20, help="use the first N (default 20)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4, help="draft length (default 4)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-chat-template", action="store_true")
    parser.add_argument("--chunk-size", type=int, default=5, help="prompts per batched call")
    parser.add_argument(
        "--no-limit",
        action="store_true",
        help="skip the limit (the per-position scoring behind the efficiency)",
    )
    parser.add_argument("--format", choices=("json", "csv"), default="json")
    parser.add_argument("--output", "-o", default=None, help="write here instead of stdout")
    parser.add_argument(
        "--cache-dir", default=None, help="sweep cache (default $CACTUS_CACHE_DIR/sweeps)"
    )
    parser.add_argument(
        "--tune-kl",
        type=float,
        default=None,
        metavar="NATS",
        help="also find the parameter of --tune-rule meeting this emitted KL per token",
    )
    parser.add_argument("--tune-rule", default="cactus", choices=TUNABLE)
    parser.add_argument(
        "--html",
        default=None,
        metavar="PATH",
        help="also write the frontier charts as one self-contained HTML page",
    )


def config_from_args(args: Any) -> SweepConfig:
    """A SweepConfig from parsed `sweep` arguments; ValueError on anything bad."""
    from cactus_core.engine.prompts import builtin_prompts

    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    grids: dict[str, list[float]] = {
        r: list(DEFAULT_GRIDS.get(r, ())) if SWEPT_PARAM.get(r) else [] for r in rules
    }
    for item in args.grid:
        rule, sep, values = item.partition("=")
        if not sep:
            raise ValueError(f"--grid takes RULE=V1,V2,..., got {item!r}")
        grids[rule.strip()] = parse_grid(rule.strip(), values)
    if args.prompts:
        with open(args.prompts, "rb") as f:
            prompts = parse_prompt_file(args.prompts, f.read())
    else:
        prompts = builtin_prompts()
    if args.n_prompts < 1:
        raise ValueError(f"--n-prompts must be >= 1, got {args.n_prompts}")
    return SweepConfig(
        prompts=tuple(prompts[: args.n_prompts]),
        settings=tuple(settings_from_grids(grids)),
        k=args.k,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        chat_template=not args.no_chat_template,
        chunk_size=args.chunk_size,
        limit=not args.no_limit,
    )


def text_progress(stream: Any, width: int = 30) -> Callable[[Progress], None]:
    """A one-line progress bar for a terminal (carriage returns; a newline at the end)."""
    start = time.perf_counter()

    def show(p: Progress) -> None:
        filled = int(width * p.fraction)
        bar = "#" * filled + "." * (width - filled)
        where = "cached" if p.cached else "ran"
        elapsed = time.perf_counter() - start
        stream.write(f"\r[{bar}] {p.done}/{p.total} chunks {elapsed:5.0f}s  {p.setting} ({where})")
        stream.write(" " * 8 + ("\n" if p.done == p.total else ""))
        stream.flush()

    return show


def sweep_command(args: Any, pair: ModelPair, out: Any, err: Any) -> int:
    """Run `python -m cactus_core sweep` on a loaded pair; write JSON or CSV to out."""
    config = config_from_args(args)
    cache = SweepCache(args.cache_dir) if args.cache_dir else SweepCache()
    start = time.perf_counter()
    result = run_sweep(pair, config, cache, on_progress=text_progress(err))
    err.write(
        f"{len(config.settings)} settings + verifier-only x {len(config.prompts)} prompts in "
        f"{time.perf_counter() - start:.1f} s ({result.computed_chunks} chunks computed, the rest "
        "from the cache)\n"
    )
    tuned = None
    if args.tune_kl is not None:
        tuned = tune(pair, config, args.tune_kl, args.tune_rule, result, cache)
        err.write(f"tuned: {tuned.cli_flags()}  (emitted KL {tuned.measured_kl.mean:.4f})\n")
    if args.html:
        from cactus_core.app.frontier_figures import figure_html, report_figures

        with open(args.html, "w", encoding="utf-8") as f:
            f.write(figure_html(report_figures(result)))
    if args.format == "csv":
        text = result.to_csv()
    else:
        body = json.loads(result.to_json())
        if tuned is not None:
            body["tuned"] = tuned.to_dict()
            body["tuned"]["cli_flags"] = tuned.cli_flags()
        text = json.dumps(body, indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        out.write(text + ("" if text.endswith("\n") else "\n"))
    return 0
