"""What the decoder saw and decided, round by round (`Trace`, `RoundTrace`, `PositionTrace`),
and reading a trace back from JSON, strictly (`trace_io`); `replay.reverify` replays one under
another rule.

One `RoundTrace` per verifier call. Positions j = 0..k of a speculative round are the k drafted
positions and the bonus position after them; a verifier-only step has one position.

Fates of drafted tokens: "accepted", "rejected" (the first rejection ends the round), "dropped"
(drafted after a rejection, never judged). Fates of emitted tokens: "accepted" (a drafted token
kept), "recovered" (drawn from the residual after a rejection), "bonus" (drawn from q after k
acceptances), "sampled" (a verifier-only step).

Positions follow the rows of the round's proposal: row 0 before the first drafted token, row
i + 1 after node i. A chain of k drafts is the tree whose node i has the one child i + 1, so its
rows are its positions; a tree round (`RoundTrace.tree`, its `TreeVerdict`) keeps one position
per row of its tree, and its per-draft lists describe the accepted path. `round_verdict` gives
every round's verdict as a tree, a chain's rebuilt from its lists.

Each position keeps top-N of q, p and h for the inspector and, for replay, its top-M entries
of p and of q (M = `replay_top_m`, 128 by default) plus the drafted token's exact p_n and q_n
(`replay` says what is exact).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cactus_core.engine.decoding.trace_io import (
    MAX_VOCAB,
    checked_fields,
    finite,
    is_file,
    is_int,
    meta_field,
)
from cactus_core.maths.rules import Rule, make_rule
from cactus_core.maths.tree import TreeVerdict

DRAFT_FATES = ("accepted", "rejected", "dropped")
EMIT_FATES = ("accepted", "recovered", "bonus", "sampled")
TRACE_VERSION = 1


@dataclass
class PositionTrace:
    """One verified position: top-N of q, p and h (ids and probabilities, zeros left out) and
    the divergences. The p, h and drafted-token fields are empty/None at the bonus position (the
    draft proposes nothing there) and in verifier-only steps."""

    q_ids: list[int]
    q_probs: list[float]
    p_ids: list[int] = field(default_factory=list)
    p_probs: list[float] = field(default_factory=list)
    h_ids: list[int] = field(default_factory=list)
    h_probs: list[float] = field(default_factory=list)
    draft_id: int | None = None
    p_n: float | None = None
    q_n: float | None = None
    h_n: float | None = None
    kl_h_q: float | None = None  # KL(h ‖ q), nats
    # KL(pi ‖ q), nats, pi the exact emitted distribution; None where no decision was made
    # (drafts dropped after a rejection were never verified).
    kl_pi_q: float | None = None
    # Replay rows: top-M of p and q (the drafted id always included); the rest is the tail.
    replay_p_ids: list[int] = field(default_factory=list)
    replay_p_probs: list[float] = field(default_factory=list)
    replay_q_ids: list[int] = field(default_factory=list)
    replay_q_probs: list[float] = field(default_factory=list)


@dataclass
class RoundTrace:
    """One round. The per-draft lists have k entries; `positions` has k + 1 (k drafted
    positions, then the bonus position) when the decoder records traces, else it is empty. A
    tree round's per-draft lists describe its accepted path and its `positions` has one entry
    per row of the tree (N + 1: the root, then after each node; a row with children has the
    p, h and drafted-token fields of its first child, and every child's p and q in its replay
    rows)."""

    index: int
    k: int  # tokens drafted this round (0 for a verifier-only step)
    draft_ids: list[int]
    draft_text: list[str]
    draft_fates: list[str]
    accept_probs: list[float]  # a(n) of each drafted token
    accept_coins: list[float]  # the coin u it was compared with (accepted iff u < a(n))
    num_accepted: int
    next_id: int  # the recovered / bonus / sampled token, before any truncation
    sample_coin: float  # its inverse-CDF coin
    emitted_ids: list[int]
    emitted_text: list[str]
    emitted_fates: list[str]
    draft_s: float
    verify_s: float
    truncated: bool = False  # emitted tokens were cut by EOS, max_new_tokens or the context
    positions: list[PositionTrace] = field(default_factory=list)
    # The verifier's log-probability of each emitted token at T = 1 (raw logits, no top-k or
    # top-p): how the verifier itself judges the text, whatever rule emitted it.
    emitted_logprobs: list[float] = field(default_factory=list)
    # A tree round: the whole tree and the verdict on it (`maths.tree.TreeVerdict.to_dict`);
    # the fields above then describe the accepted path. None for a chain round.
    tree: dict[str, Any] | None = None

    @property
    def sampled(self) -> bool:
        """A verifier-only step (no draft)."""
        return self.emitted_fates == ["sampled"]


def round_verdict(rnd: RoundTrace) -> TreeVerdict:
    """The round's verdict on every node: a tree round's, as stored; a chain's rebuilt as the
    one-child tree it is (`TreeVerdict.of_chain`; p, q, h at its tokens from the positions
    where it kept them, NaN otherwise)."""
    if rnd.tree is not None:
        return TreeVerdict.from_dict(rnd.tree)
    kept = rnd.positions[: rnd.k]
    values = [[getattr(pos, f) for pos in kept] for f in ("p_n", "q_n", "h_n")]
    p_n, q_n, h_n = ([math.nan if x is None else x for x in v] if v else [math.nan] * rnd.k
                     for v in values)  # fmt: skip
    return TreeVerdict.of_chain(
        rnd.draft_ids,
        rnd.num_accepted,
        [*rnd.draft_ids[: rnd.num_accepted], rnd.next_id],
        rnd.accept_probs,
        rnd.accept_coins,
        rnd.sample_coin,
        p_n,
        q_n,
        h_n,
    )


def decided_positions(rnd: RoundTrace) -> list[PositionTrace]:
    """The round's recorded positions that got a rule's decision and whose token was kept (not
    cut by EOS or the budget): the rows with candidates along the walk (a chain's drafted
    positions up to the first rejection). Empty when the round kept no positions."""
    if not rnd.positions or rnd.sampled:
        return []
    rows = round_verdict(rnd).path_rows[: len(rnd.emitted_ids)]
    return [rnd.positions[r] for r in rows if rnd.positions[r].draft_id is not None]


@dataclass
class Trace:
    meta: dict[str, Any]
    rounds: list[RoundTrace] = field(default_factory=list)
    token_text: dict[int, str] = field(default_factory=dict)

    def text(self, token_id: int) -> str:
        return self.token_text.get(int(token_id), f"<{int(token_id)}>")

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": TRACE_VERSION,
            "meta": self.meta,
            "rounds": [asdict(r) for r in self.rounds],
            # JSON object keys are strings; from_dict turns them back into ints.
            "token_text": {str(k): v for k, v in self.token_text.items()},
        }

    def to_json(self, path: str | Path | None = None, indent: int | None = None) -> str:
        """The trace as JSON (non-finite floats, e.g. an infinite KL, become null)."""
        text = json.dumps(finite(self.to_dict()), indent=indent, ensure_ascii=False)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @property
    def rule(self) -> Rule:
        return make_rule(
            meta_field(self.meta, "rule", str), **meta_field(self.meta, "rule_params", dict)
        )

    @classmethod
    def from_dict(cls, data: Any) -> Trace:
        """A trace from its to_dict() form; ValueError naming the first field that is missing,
        of the wrong type or out of range (nothing is allocated from the file's numbers before
        they are checked)."""
        if not isinstance(data, dict) or "rounds" not in data or "meta" not in data:
            raise ValueError("not a trace: expected a JSON object with 'meta' and 'rounds'")
        if data.get("version") != TRACE_VERSION:
            raise ValueError(
                f"trace version {data.get('version')!r} is not supported (expected {TRACE_VERSION})"
            )
        meta = data["meta"]
        if not isinstance(meta, dict):
            raise ValueError("not a trace: 'meta' must be an object")
        vocab = None
        if "vocab_size" in meta:
            vocab = meta["vocab_size"]
            if not is_int(vocab) or not 1 <= vocab <= MAX_VOCAB:
                raise ValueError(
                    f"not a trace: meta.vocab_size must be an integer in [1, {MAX_VOCAB}]"
                )
        if not isinstance(data["rounds"], list):
            raise ValueError("not a trace: 'rounds' must be a list")
        rounds = [_round(r, f"rounds[{i}]", vocab) for i, r in enumerate(data["rounds"])]
        raw_text = data.get("token_text", {})
        if not isinstance(raw_text, dict):
            raise ValueError("not a trace: 'token_text' must be an object")
        token_text = {}
        for k, v in raw_text.items():
            if not isinstance(v, str) or not k.lstrip("-").isdigit() or len(k) > 12:
                raise ValueError(f"not a trace: token_text[{k[:20]!r}] must map a token id to text")
            token_text[int(k)] = v
        return cls(meta=dict(meta), rounds=rounds, token_text=token_text)

    @classmethod
    def from_text(cls, text: str) -> Trace:
        """A trace from JSON text; never reads a file (use this for uploads)."""
        if not isinstance(text, str):
            raise ValueError(f"not a trace: expected JSON text, got {type(text).__name__}")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a trace: invalid JSON ({exc})") from None
        except (RecursionError, ValueError):
            raise ValueError("not a trace: the JSON is nested too deeply or too large") from None
        return cls.from_dict(data)

    @classmethod
    def from_file(cls, path: str | Path) -> Trace:
        """A trace from a JSON file; ValueError if it cannot be read."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the trace file {path}: {type(exc).__name__}") from None
        return cls.from_text(text)

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> Trace:
        """From JSON text (a string starting with "{") or a file: a Path, or a string that
        names an existing file. Any other string is an error, not a path to try."""
        if isinstance(text_or_path, Path):
            return cls.from_file(text_or_path)
        if not isinstance(text_or_path, str):
            raise ValueError(
                f"not a trace: expected text or a path, got {type(text_or_path).__name__}"
            )
        if text_or_path.lstrip().startswith("{"):
            return cls.from_text(text_or_path)
        if is_file(text_or_path):
            return cls.from_file(text_or_path)
        raise ValueError("not a trace: expected JSON text starting with '{' or an existing file")


# -- reading a trace back ------------------------------------------------------------------

_PAIRED = (("q_ids", "q_probs"), ("p_ids", "p_probs"), ("h_ids", "h_probs"),
           ("replay_p_ids", "replay_p_probs"), ("replay_q_ids", "replay_q_probs"))  # fmt: skip


def _round(raw: Any, where: str, vocab: int | None) -> RoundTrace:
    values = checked_fields(RoundTrace, raw, where, vocab)
    if not isinstance(raw.get("positions", []), list):
        raise ValueError(f"not a trace: {where}.positions must be a list")
    positions = []
    for j, p in enumerate(raw.get("positions", [])):
        at = f"{where}.positions[{j}]"
        pos = PositionTrace(**checked_fields(PositionTrace, p, at, vocab))
        for ids, probs in _PAIRED:
            if len(getattr(pos, ids)) != len(getattr(pos, probs)):
                raise ValueError(f"not a trace: {at}.{ids} and {probs} differ in length")
        positions.append(pos)
    for name, allowed in (("draft_fates", DRAFT_FATES), ("emitted_fates", EMIT_FATES)):
        if any(f not in allowed for f in values.get(name, [])):
            raise ValueError(f"not a trace: {where}.{name} must be among {', '.join(allowed)}")
    tree = raw.get("tree")
    if tree is not None:
        try:
            TreeVerdict.from_dict(tree)
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"not a trace: {where}.tree is not a tree verdict ({exc})") from None
    return RoundTrace(**values, positions=positions, tree=tree)
