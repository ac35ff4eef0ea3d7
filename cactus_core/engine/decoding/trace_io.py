"""Reading a trace file strictly: each field of a trace's dataclasses checked against its
annotation (`checked_fields`), token ids against the vocabulary, before anything is allocated
from the file's numbers; and writing one as JSON (`finite`: non-finite floats become null).

Errors are ValueErrors that start with "not a trace:" and name the first field that is missing,
of the wrong type or out of range.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from cactus_core.maths.tree_verdict import TreeVerdict

# The largest vocabulary a trace may declare: replay allocates rows of this size, and real
# models stay far below it (262k for the largest common tokenizers).
MAX_VOCAB = 1 << 20

# Fields read apart by the caller (nested objects), never by `checked_fields`.
NESTED = ("positions", "verdict", "tree")

_KIND_TEXT = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "text"}


def is_file(text: str) -> bool:
    """Whether `text` names an existing file (a short one-line string only)."""
    try:
        return len(text) < 4096 and "\n" not in text and Path(text).is_file()
    except (OSError, ValueError):
        return False


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _as_float(v: Any) -> float | None:
    """A JSON number as a float, None where it is none: not a number, or an integer too large
    for a float (1e400 written out). to_json writes non-finite floats (an infinite KL, a -inf
    log-probability) as null, which reads back as NaN."""
    if v is None:
        return math.nan
    if not is_num(v):
        return None
    try:
        return float(v)
    except OverflowError:
        return None


def _check_value(kind: str, v: Any) -> tuple[bool, Any]:
    """(valid, value as the dataclass holds it) for a field annotated `kind`."""
    optional = kind.endswith(" | None")
    base = kind.removesuffix(" | None")
    if v is None and optional:
        return True, None
    if base == "int":
        return is_int(v), v
    if base == "float":
        x = _as_float(v)
        return x is not None, x
    if base == "bool":
        return isinstance(v, bool), v
    if base == "str":
        return isinstance(v, str), v
    if base.startswith("list[") and isinstance(v, list):
        item = base[5:-1]
        if item == "int":
            return all(is_int(x) for x in v), v
        if item == "float":
            xs = [_as_float(x) for x in v]
            return all(x is not None for x in xs), xs
        if item == "str":
            return all(isinstance(x, str) for x in v), v
    return False, v


def checked_fields(cls: type, raw: Any, where: str, vocab: int | None) -> dict[str, Any]:
    """The dataclass's fields (less the `NESTED` ones) from a JSON object, each checked
    against its annotation; token ids (fields named *_id, *_ids) against the vocabulary."""
    if not isinstance(raw, dict):
        raise ValueError(f"not a trace: {where} must be an object")
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in NESTED:
            continue
        if f.name not in raw:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ValueError(f"not a trace: {where} has no {f.name!r}")
            continue
        ok, value = _check_value(str(f.type), raw[f.name])
        if not ok:
            base = str(f.type).removesuffix(" | None")
            want = _KIND_TEXT.get(
                base, f"a list of {base[5:-1]}s" if base.startswith("list[") else base
            )
            raise ValueError(f"not a trace: {where}.{f.name} must be {want}")
        if f.name.endswith(("_id", "_ids")):
            check_ids(value, f"{where}.{f.name}", vocab)
        out[f.name] = value
    return out


def check_ids(value: Any, where: str, vocab: int | None) -> None:
    ids = [] if value is None else value if isinstance(value, list) else [value]
    high = vocab if vocab is not None else MAX_VOCAB
    if any(not 0 <= i < high for i in ids):
        raise ValueError(f"not a trace: {where} holds a token id outside [0, {high})")


def meta_field(meta: dict[str, Any], name: str, kind: type) -> Any:
    """meta[name], which must be a `kind` (not a bool)."""
    value = meta.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"not a trace: meta.{name} is missing or not {kind.__name__}")
    return value


def vocab_size(meta: dict[str, Any]) -> int:
    """meta.vocab_size, an integer in [1, MAX_VOCAB]."""
    vocab = meta_field(meta, "vocab_size", int)
    if not 1 <= vocab <= MAX_VOCAB:
        raise ValueError(f"not a trace: meta.vocab_size must be an integer in [1, {MAX_VOCAB}]")
    return int(vocab)


def finite(x: Any) -> Any:
    """x with every non-finite float replaced by None (JSON has no infinity)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


@dataclass
class _RoundV1:
    """A version-1 round as the file held it: per-draft lists (a tree round's describe its
    accepted path, its verdict in `tree`), the fates of a chain's drafts after its rejection
    called "dropped"."""

    index: int
    k: int
    draft_ids: list[int]
    draft_text: list[str]
    draft_fates: list[str]
    accept_probs: list[float]
    accept_coins: list[float]
    num_accepted: int
    next_id: int
    sample_coin: float
    emitted_ids: list[int]
    emitted_text: list[str]
    emitted_fates: list[str]
    draft_s: float
    verify_s: float
    truncated: bool = False
    emitted_logprobs: list[float] = field(default_factory=list)


_V1_FATES = {"accepted": "accepted", "rejected": "rejected", "dropped": "unreached"}


def upgrade_round_v1(
    raw: Any, where: str, vocab: int | None, token_text: dict[int, str]
) -> dict[str, Any]:
    """A version-1 round as a version-2 one (its verdict as a tree: a tree round's as stored,
    a chain's rebuilt as the one-child tree it is, a verifier-only step's with no node), in
    the to_dict form that `Trace.from_dict` reads; ValueError naming what is wrong."""
    old = checked_fields(_RoundV1, raw, where, vocab)
    positions = raw.get("positions", [])
    if not isinstance(positions, list):
        raise ValueError(f"not a trace: {where}.positions must be a list")
    if raw.get("tree") is not None:
        try:
            verdict = TreeVerdict.from_dict(raw["tree"])
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"not a trace: {where}.tree is not a tree verdict ({exc})") from None
    elif old["k"] == 0:
        verdict = TreeVerdict.of_sampled(old["next_id"], old["sample_coin"])
    else:
        k, m = old["k"], old["num_accepted"]
        for name in ("draft_ids", "draft_fates", "accept_probs", "accept_coins"):
            if len(old[name]) != k:
                raise ValueError(f"not a trace: {where} has k = {k} but {len(old[name])} {name}")
        if not 0 <= m <= k or any(f not in _V1_FATES for f in old["draft_fates"]):
            raise ValueError(f"not a trace: {where} has fates that do not fit num_accepted")
        kept = [p if isinstance(p, dict) else {} for p in positions[:k]]
        read = [[_as_float(pos.get(f)) for pos in kept] or [math.nan] * k
                for f in ("p_n", "q_n", "h_n")]  # fmt: skip
        values = [[x for x in v if x is not None] for v in read]
        if values != read:
            raise ValueError(f"not a trace: {where}.positions hold a p_n, q_n or h_n not a number")
        p_n, q_n, h_n = (v + [math.nan] * (k - len(v)) for v in values)
        try:
            verdict = TreeVerdict.of_chain(
                old["draft_ids"],
                m,
                [*old["draft_ids"][:m], old["next_id"]],
                old["accept_probs"],
                old["accept_coins"],
                old["sample_coin"],
                p_n,
                q_n,
                h_n,
            )
            verdict._check()
        except ValueError as exc:
            raise ValueError(f"not a trace: {where} is not a chain round ({exc})") from None
    texts = [token_text.get(t, f"<{t}>") for t in verdict.tokens]
    kept_names = ("index", "emitted_ids", "emitted_text", "emitted_fates", "draft_s", "verify_s",
                  "truncated", "emitted_logprobs")  # fmt: skip
    new: dict[str, Any] = {name: old[name] for name in kept_names if name in old}
    return new | {"verdict": verdict.to_dict(), "draft_text": texts, "positions": positions}
