"""What the decoder saw and decided, round by round, and replaying it under another rule.

One `RoundTrace` per verifier call. Positions j = 0..k of a speculative round are the k drafted
positions and the bonus position after them; a verifier-only step has one position.

Fates of drafted tokens: "accepted", "rejected" (the first rejection ends the round), "dropped"
(drafted after a rejection, never judged). Fates of emitted tokens: "accepted" (a drafted token
kept), "recovered" (drawn from the residual after a rejection), "bonus" (drawn from q after k
acceptances), "sampled" (a verifier-only step).

Replay (`reverify`) takes the same drafts and the same coins and asks what another rule would
have decided. It needs p and q at the verified positions. Storing them whole (V = 49,152 floats
each) would make a trace hundreds of MB, so each position keeps its top-M entries of p and of q
(M = `replay_top_m`, 128 by default) plus the drafted token's exact p_n and q_n, and the mass
left over (the tail) is spread evenly over the other tokens when the rows are rebuilt. Hence:
- the replay is exact whenever the tails are empty (top-k ≤ M, or a top-p nucleus of ≤ M
  tokens), which `RoundReplay.exact` reports;
- otherwise accept decisions are still exact for the rules whose a(n) needs only p_n and q_n
  (`Rule.needs_rows` False) and for those whose rows-statistic survives the cut (a rule says
  so in `Rule.decisions_replay_exactly`); the others are approximate, and so is every
  recovered token (the residual's tail is smeared). `python -m cactus_core rules` lists which.
Replay judges each round on its own: the later rounds keep the drafts that were actually made.

A tree round (`RoundTrace.tree`) keeps one position per row of its tree (row 0 the root, row
i + 1 after node i). Its replay walks the same tree with the same coins under the other rule
(`maths.tree.verify_tree`): the tree and q at every node do not depend on the rule, only the
walk does. It is exact when the kept rows hold all the mass; otherwise the first child's
decision at a node is exact for the rules above, and every later candidate's decision and the
last token are approximate (they read residuals, which need the whole rows).
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from cactus_core.maths.rules import Rule, lossless_rule, make_rule
from cactus_core.maths.tree import DraftTree, TreeVerdict, children_of, verify_tree
from cactus_core.maths.verify import verify

DRAFT_FATES = ("accepted", "rejected", "dropped")
EMIT_FATES = ("accepted", "recovered", "bonus", "sampled")
TRACE_VERSION = 1
# Below this the tail of a kept row is treated as empty (float32 rounding of the kept mass).
_TAIL_EPS = 1e-6


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


def decided_positions(rnd: RoundTrace) -> list[PositionTrace]:
    """The round's recorded positions that got a rule's decision and whose token was kept (not
    cut by EOS or the budget): a chain's drafted positions up to the first rejection; a tree's
    rows with candidates along the walk. Empty when the round kept no positions."""
    if not rnd.positions:
        return []
    if rnd.tree is None:
        return rnd.positions[: min(rnd.k, len(rnd.emitted_ids), rnd.num_accepted + 1)]
    rows = TreeVerdict.from_dict(rnd.tree).path_rows[: len(rnd.emitted_ids)]
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
        text = json.dumps(_finite(self.to_dict()), indent=indent, ensure_ascii=False)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @property
    def rule(self) -> Rule:
        return make_rule(
            _meta_field(self.meta, "rule", str), **_meta_field(self.meta, "rule_params", dict)
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
            if not _is_int(vocab) or not 1 <= vocab <= MAX_VOCAB:
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
        if _is_file(text_or_path):
            return cls.from_file(text_or_path)
        raise ValueError("not a trace: expected JSON text starting with '{' or an existing file")


def _is_file(text: str) -> bool:
    try:
        return len(text) < 4096 and "\n" not in text and Path(text).is_file()
    except (OSError, ValueError):
        return False


# -- checking a trace read from a file -------------------------------------------------------

# The largest vocabulary a trace may declare: replay allocates rows of this size, and real
# models stay far below it (262k for the largest common tokenizers).
MAX_VOCAB = 1 << 20


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _as_float(v: Any) -> float:
    # to_json writes non-finite floats (an infinite KL, a -inf log-probability) as null.
    return math.nan if v is None else float(v)


def _check_value(kind: str, v: Any) -> tuple[bool, Any]:
    """(valid, value as the dataclass holds it) for a field annotated `kind`."""
    optional = kind.endswith(" | None")
    base = kind.removesuffix(" | None")
    if v is None and optional:
        return True, None
    if base == "int":
        return _is_int(v), v
    if base == "float":
        return (v is None or _is_num(v)), _as_float(v)
    if base == "bool":
        return isinstance(v, bool), v
    if base == "str":
        return isinstance(v, str), v
    if base.startswith("list[") and isinstance(v, list):
        item = base[5:-1]
        if item == "int":
            return all(_is_int(x) for x in v), v
        if item == "float":
            return all(x is None or _is_num(x) for x in v), [_as_float(x) for x in v]
        if item == "str":
            return all(isinstance(x, str) for x in v), v
    return False, v


_KIND_TEXT = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "text"}


def _fields_from(cls: type, raw: Any, where: str, vocab: int | None) -> dict[str, Any]:
    """The dataclass's fields from a JSON object, each checked against its annotation."""
    if not isinstance(raw, dict):
        raise ValueError(f"not a trace: {where} must be an object")
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in ("positions", "tree"):
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
            _check_ids(value, f"{where}.{f.name}", vocab)
        out[f.name] = value
    return out


def _check_ids(value: Any, where: str, vocab: int | None) -> None:
    ids = [] if value is None else value if isinstance(value, list) else [value]
    high = vocab if vocab is not None else MAX_VOCAB
    if any(not 0 <= i < high for i in ids):
        raise ValueError(f"not a trace: {where} holds a token id outside [0, {high})")


_PAIRED = (("q_ids", "q_probs"), ("p_ids", "p_probs"), ("h_ids", "h_probs"),
           ("replay_p_ids", "replay_p_probs"), ("replay_q_ids", "replay_q_probs"))  # fmt: skip


def _round(raw: Any, where: str, vocab: int | None) -> RoundTrace:
    values = _fields_from(RoundTrace, raw, where, vocab)
    if not isinstance(raw.get("positions", []), list):
        raise ValueError(f"not a trace: {where}.positions must be a list")
    positions = []
    for j, p in enumerate(raw.get("positions", [])):
        at = f"{where}.positions[{j}]"
        pos = PositionTrace(**_fields_from(PositionTrace, p, at, vocab))
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


def _meta_field(meta: dict[str, Any], name: str, kind: type) -> Any:
    value = meta.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"not a trace: meta.{name} is missing or not {kind.__name__}")
    return value


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


# -- replay ---------------------------------------------------------------------------------


@dataclass
class RoundReplay:
    index: int
    fates_before: list[str]
    fates_after: list[str]
    accept_probs_after: list[float]
    num_accepted_before: int
    num_accepted_after: int
    # The token emitted after the accepted drafts (recovered or bonus), before and after.
    next_before: int
    next_after: int
    decisions_exact: bool  # the accept/reject fates are exactly what the full rows give
    exact: bool  # ... and so is next_after (the kept rows held all the mass)
    # A tree round: the fates above are per node, and these are the verdicts before and after
    # (`TreeVerdict.to_dict`). None for a chain round.
    tree_before: dict[str, Any] | None = None
    tree_after: dict[str, Any] | None = None

    @property
    def flipped(self) -> list[int]:
        """Drafted positions (a tree's nodes) whose fate changed."""
        pairs = zip(self.fates_before, self.fates_after, strict=True)
        return [j for j, (a, b) in enumerate(pairs) if a != b]

    @property
    def flipped_slots(self) -> list[int]:
        """Emitted slots of the run whose drafted token's fate changed (a tree: the nodes on
        the run's path)."""
        if self.tree_before is None:
            return self.flipped
        flipped = set(self.flipped)
        return [j for j, node in enumerate(self.tree_before["path"]) if node in flipped]

    @property
    def tokens_before(self) -> int:
        return self.num_accepted_before + 1

    @property
    def tokens_after(self) -> int:
        return self.num_accepted_after + 1


@dataclass
class Replay:
    rule: str
    rule_params: dict[str, Any]
    rounds: list[RoundReplay]

    @property
    def flips(self) -> int:
        return sum(len(r.flipped) for r in self.rounds)

    @property
    def tokens_per_call_before(self) -> float:
        return sum(r.tokens_before for r in self.rounds) / max(len(self.rounds), 1)

    @property
    def tokens_per_call_after(self) -> float:
        return sum(r.tokens_after for r in self.rounds) / max(len(self.rounds), 1)

    @property
    def exact(self) -> bool:
        return all(r.exact for r in self.rounds)

    @property
    def decisions_exact(self) -> bool:
        return all(r.decisions_exact for r in self.rounds)


def _check_round_lengths(rnd: RoundTrace) -> None:
    """A replayed round needs k drafts and coins and k + 1 positions (k drafted, the bonus)."""
    k = rnd.k
    lists = {
        "draft_ids": rnd.draft_ids,
        "accept_coins": rnd.accept_coins,
        "draft_fates": rnd.draft_fates,
    }
    for name, values in lists.items():
        if len(values) != k:
            raise ValueError(f"not a trace: round {rnd.index} has k = {k} but {len(values)} {name}")
    if len(rnd.positions) != k + 1:
        raise ValueError(
            f"not a trace: round {rnd.index} has k = {k} but {len(rnd.positions)} positions"
        )
    if any(not pos.replay_q_ids for pos in rnd.positions):
        raise ValueError(f"not a trace: round {rnd.index} lacks the replay rows")


def _rebuild(ids: list[int], probs: list[float], vocab: int) -> tuple[torch.Tensor, bool]:
    """A full row [V] (float64) from its kept entries; the tail is spread over the rest."""
    row = torch.zeros(vocab, dtype=torch.float64)
    row[torch.tensor(ids, dtype=torch.long)] = torch.tensor(probs, dtype=torch.float64)
    tail = 1.0 - float(row.sum())
    others = vocab - len(set(ids))
    if tail > _TAIL_EPS and others > 0:
        kept = torch.zeros(vocab, dtype=torch.bool)
        kept[torch.tensor(ids, dtype=torch.long)] = True
        row[~kept] = tail / others
        return row / row.sum(), False
    return row / row.sum(), True


def position_rows(pos: PositionTrace, vocab: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """p and q [V] (float64) of a drafted position, rebuilt from its replay rows as `reverify`
    rebuilds them, and whether both are exact (no tail was smeared)."""
    p, ok_p = _rebuild(pos.replay_p_ids, pos.replay_p_probs, vocab)
    q, ok_q = _rebuild(pos.replay_q_ids, pos.replay_q_probs, vocab)
    return p, q, ok_p and ok_q


def reverify(trace: Trace, rule: Rule | str) -> Replay:
    """Judge every round's drafts again under `rule`, with the same coins.

    At temperature 0 the decoder verifies by exact match whatever the rule, and so does the
    replay. See the module docstring for what is exact.
    """
    if isinstance(rule, str):
        rule = make_rule(rule)
    vocab = _meta_field(trace.meta, "vocab_size", int)
    if not 1 <= vocab <= MAX_VOCAB:
        raise ValueError(f"not a trace: meta.vocab_size must be an integer in [1, {MAX_VOCAB}]")
    temperature = trace.meta.get("temperature")
    if not _is_num(temperature):
        raise ValueError("not a trace: meta.temperature is missing or not a number")
    greedy = float(temperature) == 0.0
    judge = lossless_rule() if greedy else rule
    out = []
    for rnd in trace.rounds:
        if rnd.k == 0 and rnd.tree is None:
            continue
        if not rnd.positions:
            raise ValueError("this trace was recorded without positions (record_trace=False)")
        if rnd.tree is not None:
            out.append(_replay_tree(judge, rnd, vocab))
            continue
        k = rnd.k
        _check_round_lengths(rnd)
        p_rows, q_rows, exact_rows = [], [], True
        for j, pos in enumerate(rnd.positions):
            q, ok_q = _rebuild(pos.replay_q_ids, pos.replay_q_probs, vocab)
            q_rows.append(q)
            exact_rows &= ok_q
            if j < k:
                p, ok_p = _rebuild(pos.replay_p_ids, pos.replay_p_probs, vocab)
                p_rows.append(p)
                exact_rows &= ok_p
        drafts = torch.tensor([rnd.draft_ids], dtype=torch.long)
        res = verify(
            judge,
            torch.stack(p_rows)[None].float(),
            drafts,
            torch.stack(q_rows)[None].float(),
            uniforms=torch.tensor([rnd.accept_coins], dtype=torch.float32),
            sample_uniforms=torch.tensor([rnd.sample_coin], dtype=torch.float32),
        )
        m = int(res.num_accepted[0])
        fates = ["accepted"] * m + (["rejected"] if m < k else []) + ["dropped"] * (k - m - 1)
        kept = len(rnd.positions[0].replay_q_ids)
        decisions_exact = exact_rows or judge.decisions_replay_exactly(judge.params, kept)
        out.append(
            RoundReplay(
                index=rnd.index,
                fates_before=rnd.draft_fates,
                fates_after=fates[:k],
                accept_probs_after=res.accept_probs[0].tolist(),
                num_accepted_before=rnd.num_accepted,
                num_accepted_after=m,
                next_before=rnd.next_id,
                next_after=int(res.output_token_ids[0, m]),
                decisions_exact=decisions_exact,
                exact=exact_rows,
            )
        )
    return Replay(rule=rule.name, rule_params=dict(rule.params), rounds=out)


def _replay_tree(judge: Rule, rnd: RoundTrace, vocab: int) -> RoundReplay:
    """A tree round walked again under `judge` with its own coins (module docstring)."""
    v = TreeVerdict.from_dict(rnd.tree)
    kids = children_of(v.parents)
    if len(rnd.positions) != len(kids) or any(not pos.replay_q_ids for pos in rnd.positions):
        raise ValueError(
            f"not a trace: tree round {rnd.index} needs the replay rows of its "
            f"{len(kids)} rows, got {len(rnd.positions)}"
        )
    if any(not 0 <= t < vocab for t in v.tokens):
        raise ValueError(
            f"not a trace: tree round {rnd.index} holds a token id outside [0, {vocab})"
        )
    p_rows, q_rows, exact = [], [], True
    for r, pos in enumerate(rnd.positions):
        q, ok_q = _rebuild(pos.replay_q_ids, pos.replay_q_probs, vocab)
        p, ok_p = (q, True)  # a leaf's p is never read by the walk
        if kids[r]:
            if not pos.replay_p_ids:
                raise ValueError(f"not a trace: tree round {rnd.index} lacks p at row {r}")
            p, ok_p = _rebuild(pos.replay_p_ids, pos.replay_p_probs, vocab)
        p_rows.append(p)
        q_rows.append(q)
        exact &= ok_q and ok_p
    tree = DraftTree(
        torch.tensor(v.tokens, dtype=torch.long),
        torch.tensor(v.parents, dtype=torch.long),
        torch.stack(p_rows).float(),
    )
    after = verify_tree(judge, tree, torch.stack(q_rows).float(), v.uniforms.float())
    # With a tail, only a node's first child is judged from values the cut keeps (p_n, q_n).
    firsts = {k[0] for k in kids if k}
    judged = {i for w in (v, after) for i, f in enumerate(w.fates) if f != "unreached"}
    kept = len(rnd.positions[0].replay_q_ids)
    pointwise = judge.decisions_replay_exactly(judge.params, kept) and judged <= firsts
    return RoundReplay(
        index=rnd.index,
        fates_before=list(v.fates),
        fates_after=list(after.fates),
        accept_probs_after=list(after.accept_probs),
        num_accepted_before=len(v.path),
        num_accepted_after=len(after.path),
        next_before=v.emitted[-1],
        next_after=after.emitted[-1],
        decisions_exact=exact or pointwise,
        exact=exact,
        tree_before=rnd.tree,
        tree_after=after.to_dict(),
    )
