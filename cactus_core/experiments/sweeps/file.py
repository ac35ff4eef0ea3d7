"""Portable sweep files: a finished sweep in one self-describing file, opened anywhere.

`python -m cactus_core sweep --export FILE` writes one (gzipped when FILE ends in .gz), and the
Frontier page opens it ("Open a sweep file") as if the sweep had run there: sweep on a GPU
cluster, tune on a laptop. The file holds every chunk record exactly as the sweep cache keeps it
(`ChunkRecord.to_dict`), each prompt's text and task, the pair's identity, the sampling
settings, the code version, and provenance (command, commit, date, machine, device, backend).

Reading is strict, as for a trace: the bytes must be at most `max_file_bytes()` (and as much
once unzipped; less on a public server), spelt exactly as the lab writes JSON (sorted keys, no
spaces), the body must hash to the SHA-256 it carries, every object must have exactly its
fields with their types, and the chunks must be exactly the ones the configuration plans (each
once). Anything else raises `SweepFileError` with one sentence, and nothing is returned: the
result is built only after every check passed, so a file is never half loaded.

What a read may cost is bounded by the file's size, checked before the work: the JSON's objects
are counted (outside strings) before any is built, so a few kB of gzip that unpack into
millions of `{}` are refused for their count; the records a configuration plans are counted by
arithmetic before a chunk is planned, and each chunk's key is built only beside a record that
is there, so a few kB claiming a million chunks is refused for the records it lacks.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import math
import platform
import re
import zlib
from dataclasses import dataclass
from typing import Any

from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.experiments.estimates.curves import CURVE_ARRAYS, EstimatedCurve
from cactus_core.experiments.estimates.override import OMEGA_GRID, OverrideSums
from cactus_core.experiments.quality.task_score import check_answer
from cactus_core.experiments.sweeps.cache import canonical_json, code_version
from cactus_core.experiments.sweeps.config import (
    MAX_PROMPTS,
    Setting,
    SweepConfig,
    check_task,
)
from cactus_core.experiments.sweeps.plan import chunk_count, iter_chunks
from cactus_core.experiments.sweeps.run import (
    ChunkRecord,
    PromptRecord,
    SweepResult,
    assemble,
    plan_chunks,
)
from cactus_core.maths.limit import LIMIT_T_GRID, LimitSums
from cactus_core.maths.sampling import SamplingSettings

FORMAT = "cactus-lab-sweep"
VERSION = 1
# A run of one prompt under one setting (64 tokens, chunks of 5, with the limit) takes about
# 2 kB of JSON: 64 MB holds some 30,000 runs (say 1,000 prompts × 30 settings).
MAX_FILE_BYTES = 64 * 2**20
# A public server is shared, so a visitor's file is smaller: 16 MB holds some 8,000 runs, more
# than the app's own sweeps make (limits.MAX_SWEEP_RUNS).
PUBLIC_MAX_FILE_BYTES = 16 * 2**20
# Bytes of JSON per object at the least: the lab's files spend about 450-800 bytes per object
# or list and about 18 per value of any kind; `[{},{},…]` spends 3 and `[0,0,…]` 2.
MIN_BYTES_PER_CONTAINER = 64
MIN_BYTES_PER_VALUE = 8
MAX_SETTINGS = 1000  # settings in one file (the app runs at most 5,000 settings × prompts)
SUFFIXES = (".json", ".json.gz")


class SweepFileError(ValueError):
    """A sweep file that cannot be opened: damaged, oversized or of the wrong shape."""


@dataclass(frozen=True)
class SweepFile:
    """An opened sweep file: the sweep as `run_sweep` returns it, with where it came from."""

    result: SweepResult
    provenance: dict[str, Any]
    code: dict[str, Any]

    @property
    def config(self) -> SweepConfig:
        return self.result.config

    @property
    def pair(self) -> str:
        return self.result.model_identity


# ---------------------------------------------------------------------------- writing


def provenance(command: str, device: str, backend: str, workers: int) -> dict[str, Any]:
    """Where and how a sweep was made (the commit is the lab's, "unknown" outside a checkout)."""
    from cactus_core.experiments.sweeps.reference import _commit

    return {
        "command": command,
        "commit": _commit(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": platform.node() or "unknown",
        "device": device,
        "backend": backend,
        "workers": int(workers),
    }


def sweep_body(result: SweepResult, prov: dict[str, Any]) -> dict[str, Any]:
    config = result.config
    records = {s.setting: s.chunks for s in [result.baseline, *result.settings]}
    chunks = []
    for task in plan_chunks(result.model_identity, config):
        chunk = task.idx[0] // config.chunk_size
        record = records[task.setting][chunk]
        chunks.append({"setting": task.setting.id, "chunk": chunk, "record": record.to_dict()})
    cfg = {k: v for k, v in config.to_dict().items() if k not in ("prompts", "tasks", "answers")}
    return {
        "pair": result.model_identity,
        "config": cfg,
        "prompts": [
            {"text": text, "task": config.tasks[i] if config.tasks else ""}
            | ({"answer": config.answers[i]} if config.answers else {})
            for i, text in enumerate(config.prompts)
        ],
        "code": code_version(),
        "provenance": prov,
        "chunks": chunks,
    }


def export_sweep(result: SweepResult, prov: dict[str, Any], gzipped: bool = False) -> bytes:
    """The sweep file's bytes (`provenance` makes prov)."""
    raw = frame(canonical_json(sweep_body(result, prov)))
    return gzip.compress(raw, mtime=0) if gzipped else raw


def frame(body_text: str) -> bytes:
    """The file around a body spelt canonically (sorted keys, no spaces): the canonical JSON
    of {"body", "format", "sha256", "version"}, whose SHA-256 is of the body's own bytes, so
    the reader checks it without re-encoding anything and a number re-spelt to the same value
    is caught as an edit too."""
    digest = hashlib.sha256(body_text.encode()).hexdigest()
    return (
        f'{{"body":{body_text},"format":"{FORMAT}","sha256":"{digest}","version":{VERSION}}}'
    ).encode()


# The frame's fixed tail (keys sort body < format < sha256 < version).
_TAIL = re.compile(r',"format":"[^"\\]*","sha256":"[0-9a-f]{64}","version":-?[0-9]+\}')


# ---------------------------------------------------------------------------- reading


def load_sweep_file(data: bytes, name: str = "sweep file") -> SweepFile:
    """Open a sweep file's bytes; SweepFileError (one sentence, naming the file) if it is
    damaged, oversized or of the wrong shape."""
    try:
        return _load(data)
    except SweepFileError as err:
        raise SweepFileError(f"{name}: {err}") from None
    except RecursionError:
        raise SweepFileError(f"{name}: the JSON is nested too deeply") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as err:
        # The typed checks below come first; this only words what a constructor refused.
        raise SweepFileError(f"{name}: not a valid sweep ({' '.join(str(err).split())})") from None


def max_file_bytes() -> int:
    """The largest sweep file this process opens, zipped or unzipped: `PUBLIC_MAX_FILE_BYTES`
    on a public deployment (CACTUS_LAB_PUBLIC), else `MAX_FILE_BYTES`."""
    from cactus_core.engine.loading.deployment import deployment_policy

    return PUBLIC_MAX_FILE_BYTES if deployment_policy().public else MAX_FILE_BYTES


def _load(data: bytes) -> SweepFile:
    if not isinstance(data, bytes | bytearray):
        raise SweepFileError("expected the file's bytes")
    limit = max_file_bytes()
    if len(data) > limit:
        raise SweepFileError(f"{len(data) / 2**20:.1f} MB is over the {_mb(limit)} limit")
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(bytes(data), limit)
    _count_objects(bytes(data), limit)
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as err:
        raise SweepFileError(f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise SweepFileError(f"not valid JSON ({err.msg}, line {err.lineno})") from None
    if isinstance(doc, dict) and "format" not in doc and {"model", "rows"} <= set(doc):
        raise SweepFileError(
            "this is a sweep's table of results (as `sweep --output` writes it), not a sweep "
            "file: open the file that `sweep --export FILE` or the Frontier page's "
            '"Sweep file" download writes'
        )
    _keys(doc, {"format", "version", "sha256", "body"}, "the file")
    if doc["format"] != FORMAT:
        raise SweepFileError(f"not a Cactus Lab sweep file (format {doc['format']!r})")
    if doc["version"] != VERSION or isinstance(doc["version"], bool):
        raise SweepFileError(f"sweep file version {doc['version']!r}; this lab reads {VERSION}")
    tail = _TAIL.search(text, max(0, len(text) - 200))
    if not text.startswith('{"body":') or tail is None or tail.end() != len(text):
        raise SweepFileError("its bytes are not as the lab writes them (edited or re-formatted)")
    body_bytes = text[len('{"body":') : tail.start()].encode()
    if doc["sha256"] != hashlib.sha256(body_bytes).hexdigest():
        raise SweepFileError("its contents do not match its SHA-256 (the file was altered)")
    body = doc["body"]
    _keys(body, {"pair", "config", "prompts", "code", "provenance", "chunks"}, "the body")
    identity = _str(body["pair"], "pair", empty=False)
    config = _config(body["config"], body["prompts"])
    code = _code(body["code"])
    prov = _provenance(body["provenance"])
    chunks = _list(body["chunks"], "chunks")
    if len(chunks) != chunk_count(config):
        raise SweepFileError(
            f"{len(chunks)} chunk records where the configuration plans {chunk_count(config)}"
        )
    pairs = []
    for n, (task, entry) in enumerate(zip(iter_chunks(identity, config), chunks, strict=True)):
        where = f"chunk record {n + 1}"
        _keys(entry, {"setting", "chunk", "record"}, where)
        chunk = task.idx[0] // config.chunk_size
        if entry["setting"] != task.setting.id or entry["chunk"] != chunk:
            raise SweepFileError(
                f"{where} is {entry['setting']!r} on chunk {entry['chunk']!r}, where the "
                f"sweep's order puts {task.setting.id!r} on chunk {chunk}"
            )
        pairs.append((task, _record(entry["record"], task.setting, task.idx, where)))
    result = assemble(config, identity, pairs)
    result.rows()  # every statistic the page shows is computed here, not half-way through it
    return SweepFile(result, prov, code)


def _mb(limit: int) -> str:
    return f"{limit // 2**20} MB"


def _gunzip(data: bytes, limit: int) -> bytes:
    out = zlib.decompressobj(wbits=31)  # gzip header
    try:
        raw = out.decompress(data, limit + 1)
    except zlib.error as err:
        raise SweepFileError(f"a damaged gzip stream ({err})") from None
    if len(raw) > limit or out.unconsumed_tail:
        raise SweepFileError(f"over the {_mb(limit)} limit once unzipped")
    if not out.eof:
        raise SweepFileError("the gzip stream is cut short")
    return raw


# A JSON string, escapes included: what is inside one is not structure.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def _count_objects(data: bytes, limit: int) -> None:
    """Refuse JSON with more objects and lists, or more values, than a sweep file of the
    largest size allowed holds, before the parser builds any: counted outside strings, each
    value but the first of an object or list follows a comma."""
    skeleton = _STRING.sub(b"", data)
    containers = skeleton.count(b"{") + skeleton.count(b"[")
    values = containers + skeleton.count(b",")
    if containers > limit // MIN_BYTES_PER_CONTAINER or values > limit // MIN_BYTES_PER_VALUE:
        raise SweepFileError(
            f"{containers:,} JSON objects and lists and {values:,} values are more than a "
            f"sweep file of {_mb(limit)} holds"
        )


def _no_constant(name: str) -> None:
    raise SweepFileError(f"{name} is not a JSON number")


def _keys(obj: Any, keys: set[str], where: str) -> None:
    if not isinstance(obj, dict):
        raise SweepFileError(f"{where} must be a JSON object, not {_kind(obj)}")
    if set(obj) != keys:
        missing, extra = sorted(keys - set(obj)), sorted(set(obj) - keys)
        said = [f"lacks {', '.join(missing)}" if missing else ""]
        said += [f"has unknown {', '.join(extra)}" if extra else ""]
        raise SweepFileError(f"{where} {' and '.join(s for s in said if s)}")


def _kind(obj: Any) -> str:
    if obj is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(obj), type(obj).__name__)


def _str(obj: Any, where: str, empty: bool = True) -> str:
    if not isinstance(obj, str) or (not empty and not obj):
        raise SweepFileError(f"{where} must be a {'' if empty else 'non-empty '}string")
    return obj


def _int(obj: Any, where: str, low: int = 0) -> int:
    if isinstance(obj, bool) or not isinstance(obj, int) or obj < low:
        raise SweepFileError(f"{where} must be a whole number >= {low}, not {obj!r:.40}")
    return obj


def _num(obj: Any, where: str, special: bool = False) -> float:
    """A finite JSON number; with special, also "inf", "-inf" or "nan" (how a record keeps
    the values strict JSON has no number for)."""
    if special and obj in ("inf", "-inf", "nan"):
        return float(obj)
    if isinstance(obj, bool) or not isinstance(obj, int | float) or not math.isfinite(obj):
        raise SweepFileError(f"{where} must be a finite number, not {obj!r:.40}")
    return float(obj)


def _list(obj: Any, where: str) -> list:
    if not isinstance(obj, list):
        raise SweepFileError(f"{where} must be a list, not {_kind(obj)}")
    return obj


def _bool(obj: Any, where: str) -> bool:
    if not isinstance(obj, bool):
        raise SweepFileError(f"{where} must be true or false")
    return obj


_SAMPLING = [name for name, *_ in SamplingSettings.field_specs()]
_CONFIG_KEYS = {
    *_SAMPLING,
    "max_new_tokens",
    "chat_template",
    "chunk_size",
    "limit",
    "own_estimate",
    "settings",
}


def _config(cfg: Any, prompts: Any) -> SweepConfig:
    has_tree = isinstance(cfg, dict) and "tree" in cfg
    _keys(cfg, _CONFIG_KEYS | ({"tree"} if has_tree else set()), "the configuration")
    tree = None
    if has_tree:
        try:
            tree = TreeSettings.from_dict(cfg["tree"]) if isinstance(cfg["tree"], dict) else None
        except (TypeError, ValueError) as err:
            raise SweepFileError(f"the tree settings: {err}") from None
        if tree is None:
            raise SweepFileError("the tree settings must be a JSON object")
    for name, kind, *_ in SamplingSettings.field_specs():
        if kind is int:
            _int(cfg[name], f"the sampling's {name}")
        else:
            _num(cfg[name], f"the sampling's {name}")
    sampling = SamplingSettings(**{n: cfg[n] for n in _SAMPLING})  # checks ranges
    settings = []
    if len(_list(cfg["settings"], "the settings")) > MAX_SETTINGS:
        raise SweepFileError(f"more than {MAX_SETTINGS:,} settings")
    for n, sid in enumerate(cfg["settings"]):
        setting = Setting.from_id(_str(sid, f"setting {n + 1}", empty=False))
        if setting.id != sid:
            raise SweepFileError(f"setting {n + 1} is spelt {sid!r}, not as the lab names it")
        settings.append(setting)
    if len(set(settings)) != len(settings):
        raise SweepFileError("a setting is listed twice")
    if len(_list(prompts, "the prompts")) > MAX_PROMPTS:
        raise SweepFileError(f"more than {MAX_PROMPTS} prompts")
    texts, tags, answers = [], [], []
    for n, p in enumerate(prompts):
        keys = {"text", "task", "answer"} if isinstance(p, dict) and "answer" in p else None
        _keys(p, keys or {"text", "task"}, f"prompt {n + 1}")
        texts.append(_str(p["text"], f"prompt {n + 1}'s text", empty=False))
        tags.append(check_task(_str(p["task"], f"prompt {n + 1}'s task"), f"prompt {n + 1}"))
        answer = _str(p.get("answer", ""), f"prompt {n + 1}'s answer")
        if answer:
            try:
                check_answer(answer, f"prompt {n + 1}'s answer")
            except ValueError as err:
                raise SweepFileError(str(err)) from None
        answers.append(answer)
    return SweepConfig(
        prompts=tuple(texts),
        settings=tuple(settings),
        sampling=sampling,
        max_new_tokens=_int(cfg["max_new_tokens"], "max_new_tokens", 1),
        chat_template=_bool(cfg["chat_template"], "chat_template"),
        chunk_size=_int(cfg["chunk_size"], "chunk_size", 1),
        limit=_bool(cfg["limit"], "limit"),
        own_estimate=_bool(cfg["own_estimate"], "own_estimate"),
        tasks=tuple(tags) if any(tags) else (),
        tree=tree,
        answers=tuple(answers) if any(answers) else (),
    )


def _code(code: Any) -> dict[str, Any]:
    _keys(code, set(code_version()), "the code version")
    _int(code["numbers"], "the code version's numbers")
    for key in set(code) - {"numbers"}:
        if code[key] is not None:
            _str(code[key], f"the code version's {key}")
    return code


_PROVENANCE = ("command", "commit", "date", "machine", "device", "backend")


def _provenance(prov: Any) -> dict[str, Any]:
    _keys(prov, {*_PROVENANCE, "workers"}, "the provenance")
    for key in _PROVENANCE:
        _str(prov[key], f"the provenance's {key}")
    _int(prov["workers"], "the provenance's workers", 1)
    return prov


_PROMPT_INTS = ("tokens", "verifier_calls", "decided", "accepted", "scored", "spec_rounds")
_PROMPT_COUNTS = ("position_reached", "position_accepted")  # per draft position
_PROMPT_FLOATS = ("emitted_kl_sum", "nll_sum", "scored_kl_sum", "expected_accept_sum")
# Kept since issue 41; a file written before has neither (its records then read NaN there).
_PROMPT_LATER_FLOATS = ("emitted_tv_sum", "emitted_reverse_kl_sum")
_LATER = set(_PROMPT_LATER_FLOATS)
_RECORD_KEYS = {"setting", "prompts", "wall_s", "limit", "estimate", "estimate_positions"}


def _record(rec: Any, setting: Setting, idx: tuple[int, ...], where: str) -> ChunkRecord:
    # "override" (a rule whose pi is estimated from the decode) is kept since issue 41, as
    # the prompts' later floats are: a record whose prompts have those has it too
    rows_in = rec.get("prompts") if isinstance(rec, dict) else None
    first = rows_in[0] if isinstance(rows_in, list) and rows_in else None
    later_keys = {"override"} if isinstance(first, dict) and _LATER & set(first) else set()
    _keys(rec, _RECORD_KEYS | later_keys, where)
    _keys(rec["setting"], {"rule", "params"}, f"{where}'s setting")
    if rec["setting"] != setting.to_dict():
        raise SweepFileError(f"{where} holds another setting than {setting.id!r}")
    rows = _list(rec["prompts"], f"{where}'s prompts")
    if len(rows) != len(idx):
        raise SweepFileError(f"{where} has {len(rows)} prompts; its chunk has {len(idx)}")
    prompts = []
    for i, row in zip(idx, rows, strict=True):
        at = f"{where}, prompt {i + 1}"
        later = _PROMPT_LATER_FLOATS if isinstance(row, dict) and _LATER & set(row) else ()
        _keys(row, {"index", "text", *_PROMPT_INTS, *_PROMPT_FLOATS, *later, *_PROMPT_COUNTS}, at)
        if _int(row["index"], f"{at}'s index") != i:
            raise SweepFileError(f"{at} is numbered {row['index']}")
        ints = {k: _int(row[k], f"{at}'s {k}") for k in _PROMPT_INTS}
        counts = {
            k: [_int(v, f"{at}'s {k}") for v in _list(row[k], f"{at}'s {k}")]
            for k in _PROMPT_COUNTS
        }
        reached, accepted = counts["position_reached"], counts["position_accepted"]
        if len(reached) != len(accepted) or any(
            a > r for a, r in zip(accepted, reached, strict=True)
        ):
            raise SweepFileError(f"{at}'s per-position counts do not pair up")
        floats = {k: _num(row[k], f"{at}'s {k}", special=True) for k in (*_PROMPT_FLOATS, *later)}
        if ints["accepted"] > ints["decided"]:
            raise SweepFileError(f"{at} accepted more drafts than it decided")
        text = _str(row["text"], at)
        prompts.append(PromptRecord(index=i, text=text, **ints, **floats, **counts))
    wall = _num(rec["wall_s"], f"{where}'s wall_s")
    if wall < 0:
        raise SweepFileError(f"{where}'s wall_s is negative")
    limit = None if rec["limit"] is None else _limit(rec["limit"], where)
    estimate = None if rec["estimate"] is None else _curve(rec["estimate"], where)
    if estimate is not None and estimate.rule != setting.rule:
        raise SweepFileError(f"{where}'s estimate is for {estimate.rule!r}, not {setting.rule!r}")
    positions = _int(rec["estimate_positions"], f"{where}'s estimate_positions")
    override = None if rec.get("override") is None else _override(rec["override"], where)
    return ChunkRecord(setting, prompts, wall, limit, estimate, positions, override)


def _override(d: Any, where: str) -> OverrideSums:
    at = f"{where}'s override"
    counts = ("overridden", "trials", "positions", "eligible")
    sums = ("kl", "tv", "reverse_kl")
    _keys(d, {*counts, *sums}, at)
    n = {k: _int(d[k], f"{at} {k}") for k in counts}
    if not n["overridden"] <= n["trials"] <= n["eligible"] <= n["positions"]:
        raise SweepFileError(f"{at}'s counts are not overridden <= trials <= eligible <= positions")
    for key in sums:
        values = _list(d[key], f"{at} {key}")
        if len(values) != len(OMEGA_GRID):
            raise SweepFileError(f"{at} {key} has {len(values)} values, not {len(OMEGA_GRID)}")
        for v in values:
            _num(v, f"{at} {key}", special=True)
    return OverrideSums.from_dict(d)


def _limit(d: Any, where: str) -> LimitSums:
    _keys(d, {"acc", "kl", "count"}, f"{where}'s limit")
    for key in ("acc", "kl"):
        values = _list(d[key], f"{where}'s limit {key}")
        if len(values) != len(LIMIT_T_GRID):
            raise SweepFileError(f"{where}'s limit {key} has {len(values)} values, not "
                                 f"{len(LIMIT_T_GRID)}")  # fmt: skip
        for v in values:
            _num(v, f"{where}'s limit {key}")
    _int(d["count"], f"{where}'s limit count")
    return LimitSums.from_dict(d)


def _curve(d: Any, where: str) -> EstimatedCurve:
    _keys(d, {"rule", "param", *CURVE_ARRAYS}, f"{where}'s estimate")
    _str(d["rule"], f"{where}'s estimate rule", empty=False)
    if d["param"] is not None:
        _str(d["param"], f"{where}'s estimate param", empty=False)
    sizes = set()
    for key in CURVE_ARRAYS:
        values = _list(d[key], f"{where}'s estimate {key}")
        sizes.add(len(values))
        for v in values:
            if v is not None:
                _num(v, f"{where}'s estimate {key}")
    if len(sizes) != 1 or 0 in sizes:
        raise SweepFileError(f"{where}'s estimate has arrays of different or zero lengths")
    return EstimatedCurve.from_dict(d)
