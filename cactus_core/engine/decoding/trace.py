"""What the decoder saw and decided, round by round (`Trace`, `RoundTrace`, `PositionTrace`),
and reading a trace back from JSON, strictly (`trace_io`); `replay.reverify` replays one under
another rule.

One `RoundTrace` per verifier call. Every round holds its verdict as a tree
(`maths.tree_verdict.TreeVerdict`): a chain of k drafts is the one-child tree whose node i is
draft i, a draft tree is itself, and a verifier-only step is a tree with no nodes. The per-draft
lists (`draft_ids`, `draft_fates`, `accept_probs`, ...) are views of it, node by node, and what
a chain and a tree that branches still do differently is wording (`RoundTrace.branching`).

Fates of drafted tokens (nodes): "accepted", "rejected" (a chain's first rejection ends the
round; a tree's walk tries the next candidate), "unreached" (never judged: a chain's drafts after
its rejection, which the pages call dropped; a tree's candidates the walk did not try). Fates
of emitted tokens: "accepted" (a drafted token kept), "recovered" (drawn from the residual after
a rejection), "bonus" (drawn from q at a leaf), "sampled" (a verifier-only step).

Positions follow the rows of the round's tree: row 0 before the first drafted token (the root),
row i + 1 after node i, so a chain's rows are its positions 0..k and a verifier-only step has
one. Emitted token j was drawn at row `verdict.path_rows[j]`; the rows where the rule decided
are `verdict.decided_rows`. This row is the one index every view of a round uses.

Each position keeps top-N of q, p and h for the inspector and, for replay, its top-M entries
of p and of q (M = `replay_top_m`, 128 by default) plus the drafted token's exact p_n and q_n
(`replay` says what is exact). A row with several candidates keeps p, h and the drafted-token
fields of its first child, and every child's p and q in its replay rows.

Version 2 of the file format stores the verdict; version 1 files (per-draft lists, and the
verdict only for tree rounds) are read into it (`trace_io.upgrade_round_v1`).
"""

from __future__ import annotations

import json
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
    upgrade_round_v1,
)
from cactus_core.maths.rules import Rule, make_rule
from cactus_core.maths.tree_verdict import FATES, TreeVerdict

DRAFT_FATES = FATES
EMIT_FATES = ("accepted", "recovered", "bonus", "sampled")
TRACE_VERSION = 2
READ_VERSIONS = (1, 2)


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
    """One round: its verdict as a tree, what it emitted once cut at EOS or the budget, and
    (when the decoder records traces) one position per row of its tree."""

    index: int
    verdict: TreeVerdict
    draft_text: list[str]  # each node's token as the pages show it
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

    # -- views of the verdict, node by node --------------------------------------------------
    @property
    def k(self) -> int:
        """Tokens drafted this round (the tree's nodes; 0 for a verifier-only step)."""
        return self.verdict.size

    @property
    def branching(self) -> bool:
        """A draft tree with several candidates somewhere, rather than a chain."""
        return self.verdict.branching

    @property
    def sampled(self) -> bool:
        """A verifier-only step (no draft)."""
        return self.verdict.last == "sampled"

    @property
    def draft_ids(self) -> list[int]:
        return self.verdict.tokens

    @property
    def draft_fates(self) -> list[str]:
        return self.verdict.fates

    @property
    def accept_probs(self) -> list[float]:
        """a(n) of each node (NaN where none was computed)."""
        return self.verdict.accept_probs

    @property
    def accept_coins(self) -> list[float]:
        """The coin u each node was compared with (accepted iff u < a(n))."""
        return self.verdict.coins

    @property
    def num_accepted(self) -> int:
        return len(self.verdict.path)

    @property
    def next_id(self) -> int:
        """The recovered / bonus / sampled token, before any truncation."""
        return self.verdict.emitted[-1]

    @property
    def sample_coin(self) -> float:
        """The inverse-CDF coin of `next_id`."""
        return self.verdict.emit_coin

    def row_of(self, node: int) -> int:
        """The row node `node` was judged at (its parent's row)."""
        return self.verdict.parents[node] + 1

    def decided_positions(self) -> list[PositionTrace]:
        """The recorded positions where the rule decided and whose token was kept (not cut by
        EOS or the budget), root first. Empty when the round kept no positions."""
        if not self.positions:
            return []
        rows = self.verdict.path_rows[: len(self.emitted_ids)]
        return [self.positions[r] for r in rows if self.positions[r].draft_id is not None]


@dataclass
class Trace:
    meta: dict[str, Any]
    rounds: list[RoundTrace] = field(default_factory=list)
    token_text: dict[int, str] = field(default_factory=dict)

    def text(self, token_id: int) -> str:
        return self.token_text.get(int(token_id), f"<{int(token_id)}>")

    def to_dict(self) -> dict[str, Any]:
        rounds = []
        for r in self.rounds:
            row = asdict(r)
            row["verdict"] = r.verdict.to_dict()
            rounds.append(row)
        return {
            "version": TRACE_VERSION,
            "meta": self.meta,
            "rounds": rounds,
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
        version = data.get("version")
        if version not in READ_VERSIONS:
            raise ValueError(
                f"trace version {version!r} is not supported (this lab reads "
                f"{', '.join(map(str, READ_VERSIONS))})"
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
        raw_text = data.get("token_text", {})
        if not isinstance(raw_text, dict):
            raise ValueError("not a trace: 'token_text' must be an object")
        token_text = {}
        for k, v in raw_text.items():
            if not isinstance(v, str) or not k.lstrip("-").isdigit() or len(k) > 12:
                raise ValueError(f"not a trace: token_text[{k[:20]!r}] must map a token id to text")
            token_text[int(k)] = v
        rounds = []
        for i, raw in enumerate(data["rounds"]):
            if version == 1:
                raw = upgrade_round_v1(raw, f"rounds[{i}]", vocab, token_text)
            rounds.append(_round(raw, f"rounds[{i}]", vocab))
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
    if any(f not in EMIT_FATES for f in values.get("emitted_fates", [])):
        raise ValueError(
            f"not a trace: {where}.emitted_fates must be among {', '.join(EMIT_FATES)}"
        )
    try:
        verdict = TreeVerdict.from_dict(raw.get("verdict"))
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"not a trace: {where}.verdict is not a round's verdict ({exc})") from None
    if any(not 0 <= t < (vocab or MAX_VOCAB) for t in [*verdict.tokens, *verdict.emitted]):
        raise ValueError(f"not a trace: {where}.verdict holds a token id outside the vocabulary")
    if len(values["draft_text"]) != verdict.size:
        raise ValueError(f"not a trace: {where}.draft_text must have one entry per node")
    if positions and len(positions) != verdict.size + 1:
        raise ValueError(f"not a trace: {where} must keep one position per row of its tree")
    return RoundTrace(**values, verdict=verdict, positions=positions)
