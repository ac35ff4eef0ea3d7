"""One position of a speculative round as the Playground shows it: p, q, the drafted token,
the presets and the editable table's checks."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch

from cactus_core.maths.rules import Cactus

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import PositionTrace


@dataclass(frozen=True, eq=False)
class Position:
    """One position: token labels, draft p, verifier q (each [V], sums to 1) and the draft n.

    `params` holds parameter values that belong to the example (the worked example is stated
    at delta = 0.21); widgets start there instead of at the rules' defaults. `story` names
    what a preset shows (one of STORIES); the Playground writes its note from the numbers on
    screen (playground.position_note), so the note follows the slider.

    Equal content means equal positions (hash and == use a fingerprint of the numbers), so a
    Position can key the per-rule cache of the Playground.
    """

    labels: tuple[str, ...]
    p: torch.Tensor
    q: torch.Tensor
    drafted: int
    story: str = ""
    note: str = ""  # fixed words about where it came from (a position of a decode run)
    notices: tuple[str, ...] = field(default_factory=tuple)
    params: Mapping[str, float] = field(default_factory=dict)
    fingerprint: str = field(init=False, repr=False, default="")

    def __post_init__(self) -> None:
        if not 0 <= self.drafted < len(self.labels):
            raise ValueError(f"drafted index {self.drafted} outside 0..{len(self.labels) - 1}")
        if self.p.shape != (len(self.labels),) or self.q.shape != (len(self.labels),):
            raise ValueError("p, q and labels must have the same length")
        digest = hashlib.sha1()
        digest.update(self.p.detach().cpu().float().numpy().tobytes())
        digest.update(self.q.detach().cpu().float().numpy().tobytes())
        digest.update(repr((self.labels, self.drafted)).encode())
        object.__setattr__(self, "fingerprint", digest.hexdigest())

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Position) and self.fingerprint == other.fingerprint


def _position(
    labels: Sequence[str],
    p: Sequence[float],
    q: Sequence[float],
    drafted: str,
    story: str,
    params: Mapping[str, float] | None = None,
) -> Position:
    return Position(
        labels=tuple(labels),
        p=torch.tensor(p, dtype=torch.float32),
        q=torch.tensor(q, dtype=torch.float32),
        drafted=list(labels).index(drafted),
        story=story,
        params=dict(params or {}),
    )


def trace_row_position(
    pos: PositionTrace, text: Callable[[int], str], drafted: int, note: str
) -> Position:
    """A trace's position (its replay rows: top-M of p and q, the drafted tokens' exact p and
    q) as a Position over a reduced vocabulary: their union plus one "(rest)" token holding
    each row's remaining mass, so rule maths on it is exact for the kept tokens' own a(n) and
    approximate elsewhere. `drafted`: the token to mark."""
    ids = list(dict.fromkeys([*pos.replay_q_ids, *pos.replay_p_ids]))
    p = dict(zip(pos.replay_p_ids, pos.replay_p_probs, strict=True))
    q = dict(zip(pos.replay_q_ids, pos.replay_q_probs, strict=True))
    pv = torch.tensor([p.get(i, 0.0) for i in ids], dtype=torch.float64)
    qv = torch.tensor([q.get(i, 0.0) for i in ids], dtype=torch.float64)
    labels = [text(i) for i in ids]
    rest_p, rest_q = max(0.0, 1.0 - float(pv.sum())), max(0.0, 1.0 - float(qv.sum()))
    if rest_p > 1e-6 or rest_q > 1e-6:
        pv = torch.cat([pv, torch.tensor([rest_p], dtype=torch.float64)])
        qv = torch.cat([qv, torch.tensor([rest_q], dtype=torch.float64)])
        labels.append("(rest)")
    return Position(
        labels=tuple(labels),
        p=(pv / pv.sum()).float(),
        q=(qv / qv.sum()).float(),
        drafted=ids.index(drafted),
        note=note,
    )


_DELTA = Cactus.swept().name  # the worked example is stated for one value of it
WORKED_EXAMPLE = "Worked example (reference README)"
# What each preset shows; playground.position_note words it from the numbers.
STORIES = ("worked", "bet", "drift", "nucleus")

PRESETS: dict[str, Position] = {
    WORKED_EXAMPLE: _position(
        ["decode", "generate", "output"],
        [0.05, 0.80, 0.15],
        [0.30, 0.35, 0.35],
        "generate",
        "worked",
        {_DELTA: 0.21},
    ),
    "Confident verifier, draft disagrees": _position(
        ["the", "a", "this", "that"],
        [0.10, 0.15, 0.05, 0.70],
        [0.70, 0.20, 0.06, 0.04],
        "that",
        "bet",
    ),
    # A draft sure of two colours the verifier rates like any other: KL(pi ‖ q) exceeds delta
    # up to delta ≈ 0.89, where it reaches KL(p ‖ q) and stops growing.
    "Flat verifier, peaky draft": _position(
        ["red", "blue", "green", "black", "white", "grey"],
        [0.60, 0.38, 0.01, 0.01, 0.0, 0.0],
        [0.20, 0.18, 0.17, 0.16, 0.15, 0.14],
        "red",
        "drift",
    ),
    "Outside the verifier's nucleus (top-p)": _position(
        ["Paris", "the", "a", "London", "Rome"],
        [0.30, 0.10, 0.05, 0.40, 0.15],
        [0.62, 0.25, 0.13, 0.0, 0.0],
        "London",
        "nucleus",
    ),
}


def _column(name: str, values: Sequence[object]) -> tuple[torch.Tensor, str | None]:
    """A checked, normalised column and the notice to show if it had to be normalised."""
    try:
        arr = torch.tensor(
            [float("nan") if v is None else float(v) for v in values], dtype=torch.float64
        )
    except (TypeError, ValueError, OverflowError) as err:  # OverflowError: float(10**400)
        raise ValueError(f"column {name} must hold numbers") from err
    if not torch.isfinite(arr).all():
        raise ValueError(f"column {name} has an empty, NaN or infinite entry")
    if (arr < 0).any():
        raise ValueError(f"column {name} has a negative entry; probabilities are ≥ 0")
    total = float(arr.sum())
    if not math.isfinite(total):
        # 1e308 twice: each entry is finite, their sum is not, and dividing by it would turn
        # the column into zeros behind a "normalised" notice.
        raise ValueError(
            f"column {name} sums past the largest number a float holds; use smaller values "
            "(probabilities, or any weights up to about 1e300)"
        )
    if total <= 0:
        raise ValueError(f"column {name} is all zeros; it needs some probability mass")
    notice = f"{name} summed to {total:.4g}; normalised to 1." if abs(total - 1.0) > 1e-6 else None
    return (arr / total).to(torch.float32), notice


def parse_table(labels: Sequence[object], p: Sequence[object], q: Sequence[object]) -> Position:
    """Check an edited table of tokens, p and q, and turn it into a Position.

    Raises ValueError with a message meant for the user (negative, NaN, all-zero, too few
    rows, repeated or empty tokens). Columns that are valid but do not sum to 1 are
    normalised, and a notice says so.
    """
    if not (len(labels) == len(p) == len(q)):
        raise ValueError("every row needs a token, a p value and a q value")
    if len(labels) < 2:
        raise ValueError("the table needs at least two tokens")
    names = [("" if x is None else str(x)).strip() for x in labels]
    if any(not n for n in names):
        raise ValueError("every row needs a token name")
    if len(set(names)) != len(names):
        raise ValueError("token names must be distinct")
    p_col, p_notice = _column("p", p)
    q_col, q_notice = _column("q", q)
    notices = tuple(n for n in (p_notice, q_notice) if n)
    return Position(labels=tuple(names), p=p_col, q=q_col, drafted=0, notices=notices)


def with_drafted(position: Position, drafted: int) -> Position:
    """The same position with another drafted token."""
    return replace(position, drafted=drafted)


def display_indices(position: Position, top: int = 12) -> list[int]:
    """Which tokens a figure shows: all of them for a small vocabulary, else the `top` with the
    most mass under p or q, always including the drafted token, in vocabulary order."""
    v = len(position.labels)
    if v <= top:
        return list(range(v))
    score = torch.maximum(position.p, position.q)
    idx = set(torch.topk(score, top).indices.tolist())
    idx.add(position.drafted)
    return sorted(idx)


def truncation_warning(position: Position) -> str | None:
    """The design-notes fact, stated for this position when it applies."""
    n = position.drafted
    if float(position.q[n]) > 0:
        return None
    return (
        f"q puts no mass on the drafted token {position.labels[n]!r} (it sits outside the "
        "verifier's top-k / top-p nucleus), so h_n = 0 for every Cactus delta and the draft is "
        "always rejected. Only a rule that verifies against something other than q's support "
        "(interp, optimal, tas/topk's thresholds) can change that."
    )
