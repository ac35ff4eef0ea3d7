"""A draft-tree round taken apart into Step through's steps, from the verdict the trace keeps.

Steps, in order: `draft` (the tree as grown), `verify` (one tree-masked pass), one `decide` per
node the walk reached that has children (the root first; its children tried in turn), then
`residual` (every child of the last node rejected) or `bonus` (the walk reached a leaf), then
`summary`. Each step carries the tree picture (`tree_figure.TreeFrame`) revealed as far as
the walk has got, and every number its narration states is in `Step.numbers`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cactus_core.app.shared.tree_figure import TreeFrame
from cactus_core.app.shared.tree_view import row_bars
from cactus_core.app.step import narration as say
from cactus_core.app.step.steps import Bars, Step
from cactus_core.maths.tree import TreeVerdict, children_of, node_depths

if TYPE_CHECKING:
    from cactus_core.app.step.run import StepRun
    from cactus_core.engine.decoding.trace import PositionTrace


def candidates(v: TreeVerdict, row: int, text: Callable[[int], str]) -> list[say.Candidate]:
    """The children of row `row` (0: the root, i + 1: node i) as the walk judged them."""
    return [
        say.Candidate(
            text(v.tokens[i]),
            v.p[i],
            v.p_left[i],
            v.q[i],
            v.h[i],
            v.accept_probs[i],
            v.coins[i],
            v.fates[i],
        )
        for i in children_of(v.parents)[row]
    ]


def _numbers(cands: list[say.Candidate]) -> dict[str, float]:
    out: dict[str, float] = {}
    for j, c in enumerate(cands):
        if c.fate == "unreached":
            continue
        out |= {f"p[{j}]": c.p, f"q[{j}]": c.q, f"h[{j}]": c.h, f"a[{j}]": c.a, f"u[{j}]": c.u}
        if j:
            out[f"p_left[{j}]"] = c.p_left
    return out


def _bars(run: StepRun, pos: PositionTrace | None, after: str | None, v: TreeVerdict, d: int):
    """The decide step's bars: p, q, the first candidate's h and residual at the row, from the
    round's recorded rows (None without them); the token emitted there marked."""
    if pos is None:
        return None
    b = row_bars(pos, run.text, run.judge, 12, v.emitted[d])
    where = "the root" if after is None else repr(after)
    title = f"p, q, h (first candidate) and the residual after {where}"
    return Bars(b.labels, b.series, b.highlight, title=title, mark="emitted")


def tree_round_steps(run: StepRun, index: int) -> list[Step]:
    """Round `index` of the run, a tree round, as its steps (module docstring)."""
    rnd = run.rounds[index]
    text = run.text
    root = text(run.rounds[index - 1].emitted_ids[-1]) if index > 0 else "(prompt)"
    v = TreeVerdict.from_dict(rnd.tree)
    n, depth = len(v.tokens), max(node_depths(v.parents))
    kids = children_of(v.parents)
    judge = None if run.judge.lossless else run.judge.label

    def frame(reveal: int | None) -> TreeFrame:
        return TreeFrame(v, [text(t) for t in v.tokens], root, text(v.emitted[-1]), reveal)

    first = [(text(v.tokens[i]), v.p[i]) for i in kids[0]]
    steps = [
        Step(
            "draft",
            index,
            None,
            say.tree_draft_sentence(n, depth, first),
            {f"p_root[{j}]": p for j, (_, p) in enumerate(first)},
            tree=frame(0),
        ),
        Step("verify", index, None, say.tree_verify_sentence(n, index + 1), tree=frame(0)),
    ]
    rows = [0] + [i + 1 for i in v.path]  # the rows the walk stood on
    for d, row in enumerate(rows):
        if not kids[row]:
            continue
        cands = candidates(v, row, text)
        after = None if row == 0 else text(v.tokens[row - 1])
        line = say.tree_decide_sentence(after, cands, judge)
        bars = _bars(run, rnd.positions[row] if row < len(rnd.positions) else None, after, v, d)
        steps.append(Step("decide", index, d, line, _numbers(cands), bars=bars, tree=frame(d + 1)))
    last = text(v.emitted[-1])
    m = len(v.path)
    if v.last == "recovered":
        tried = len(kids[rows[-1]])
        line = say.tree_residual_sentence(last, v.emit_coin, tried)
        steps.append(Step("residual", index, m, line, {"coin": v.emit_coin}, tree=frame(None)))
    else:
        line = say.tree_bonus_sentence(m, last, v.emit_coin)
        steps.append(Step("bonus", index, None, line, {"coin": v.emit_coin}, tree=frame(None)))
    calls = index + 1
    tokens = sum(len(r.emitted_ids) for r in run.rounds[: index + 1])
    judged = sum(f != "unreached" for f in v.fates)
    line = say.tree_summary_sentence(len(v.emitted), m, n, judged, calls, tokens / calls)
    numbers = {"tokens_per_call": tokens / calls}
    steps.append(Step("summary", index, None, line, numbers, tree=frame(None)))
    return steps
