"""One decoded round taken apart into steps, each with its picture's data and its narration.

Every round is a tree (`RoundTrace.verdict`: a chain is the one-child tree, a verifier-only step
a tree with no nodes), and its steps follow the tree, in order: `draft` (one per depth: a
chain's k drafted tokens one by one), `verify` (one pass over every row), `decide` (one per row
on the walk with candidates, its candidates tried in turn: a chain's drafts up to the first
rejection; a rule that decides on the whole draft has a coin for every draft), then `residual`
after every candidate of the last row was rejected or `bonus` at a leaf, then `summary`. A
verifier-only round has a `sampled` step and its summary. Only the wording, and a branching
tree's picture, follow `RoundTrace.branching`. Every number a step's narration states is in
`Step.numbers`, read from the round's verdict and trace (and, for the bars, from the exact rows
the StepRun kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from cactus_core.app.shared.round_view import live_stats, node_pq
from cactus_core.app.shared.transcript import node_fates
from cactus_core.app.shared.tree_figure import TreeFrame
from cactus_core.app.step import narration as say
from cactus_core.app.step.run import SHOWN, RoundRows, StepRun
from cactus_core.app.step.steps import Bars, Step
from cactus_core.engine.decoding.replay import row_optimum
from cactus_core.maths.rules import Drafted, Rule, lossless_rule
from cactus_core.maths.traversal import post_order

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace

TOP_P_BARS = 8  # tokens in a draft step's picture of p


def round_level(rule: Rule) -> bool:
    """Whether the rule decides on the whole draft at once (`Rule.caps.round_level`): then every
    draft's coin counts, and a token's fate is the round's outcome, not its own coin's."""
    return rule.caps.round_level


def lossless_accept(q_n: float, p_n: float) -> float:
    """a(n) of lossless speculative sampling at one position, from the rule itself."""
    rule = lossless_rule()
    qn, pn = torch.tensor(q_n, dtype=torch.float64), torch.tensor(p_n, dtype=torch.float64)
    return float(rule.accept(Drafted(qn, pn)))


class _Round:
    """What every step of one round reads: the round, its rows, the run's text and judge, and
    (for a branching tree) the picture revealed as far as a step has got."""

    def __init__(self, run: StepRun, index: int) -> None:
        self.run, self.index = run, index
        self.rnd: RoundTrace = run.rounds[index]
        self.rows: RoundRows = run.rows[index]
        self.v = self.rnd.verdict
        self.kids = self.v.children
        self.fates = node_fates(self.rnd)
        self.text: Callable[[int], str] = run.text

    def frame(self, reveal: int | None) -> TreeFrame | None:
        if not self.rnd.branching:
            return None
        prev = self.run.rounds[self.index - 1].emitted_ids[-1] if self.index > 0 else None
        root = self.text(prev) if prev is not None else "(prompt)"
        labels = [self.text(t) for t in self.v.tokens]
        return TreeFrame(self.v, labels, root, self.text(self.v.emitted[-1]), reveal)

    def position(self, row: int) -> PositionTrace | None:
        return self.rnd.positions[row] if row < len(self.rnd.positions) else None


def _p_bars(r: _Round, row: int, marked: list[int], title: str) -> Bars | None:
    pos = r.position(row)
    if pos is None or not pos.p_ids:
        return None
    ids, probs = pos.p_ids[:TOP_P_BARS], pos.p_probs[:TOP_P_BARS]
    exact = dict(zip(pos.replay_p_ids, pos.replay_p_probs, strict=True))
    for n in marked:  # the drafted tokens are always in the picture
        if n not in ids:
            ids, probs = [*ids, n], [*probs, exact.get(n, 0.0)]
    return Bars([r.text(i) for i in ids], {"p": probs}, ids.index(marked[0]), title)


def _draft_step(r: _Round, depth: int) -> Step:
    nodes = [i for i, d in enumerate(r.v.depths) if d == depth]
    rows = sorted({r.rnd.row_of(i) for i in nodes})
    numbers = {f"p[{i}]": r.v.p[i] for i in nodes}
    if not r.rnd.branching:
        (i,) = nodes
        pos = r.position(i)
        p_n = node_pq(r.rnd, i)[0] or 0.0
        top = (
            (r.text(pos.p_ids[0]), pos.p_probs[0])
            if pos and pos.p_ids
            else (r.text(r.v.tokens[i]), p_n)
        )
        line = say.draft_sentence(i, r.rnd.k, r.text(r.v.tokens[i]), p_n, *top)
        bars = _p_bars(r, i, [r.v.tokens[i]], f"p at position {i + 1}")
        return Step("draft", r.index, i, line, {"p_n": p_n}, bars)
    if depth == 1:
        first = [(r.text(r.v.tokens[i]), r.v.p[i]) for i in nodes]
        line = say.tree_draft_sentence(r.rnd.k, max(r.v.depths), first)
    else:
        up = [r.text(r.v.tokens[r.v.parents[i]]) for i in nodes]
        line = say.tree_depth_sentence(
            depth, [(r.text(r.v.tokens[i]), r.v.p[i], u) for i, u in zip(nodes, up, strict=True)]
        )
    bars = None
    if len(rows) == 1:
        where = "the root" if rows[0] == 0 else repr(r.text(r.v.tokens[rows[0] - 1]))
        bars = _p_bars(r, rows[0], [r.v.tokens[i] for i in nodes], f"p after {where}")
    return Step("draft", r.index, None, line, numbers, bars, frame=r.frame(0))


def _verify_step(r: _Round) -> Step:
    k = r.rnd.k
    pq = [node_pq(r.rnd, i) for i in range(k)]
    p_n = [p or 0.0 for p, _ in pq]
    q_n = [q or 0.0 for _, q in pq]
    numbers = {f"p_n[{j}]": p_n[j] for j in range(k)} | {f"q_n[{j}]": q_n[j] for j in range(k)}
    labels = [f"{j + 1}:{r.text(r.v.tokens[j])}" for j in range(k)]
    bars = Bars(labels, {"p": p_n, "q": q_n}, title="p_n and q_n of each drafted token")
    last = r.position(k) if not r.rnd.branching else None
    if last is not None and last.q_ids:
        top = (r.text(last.q_ids[0]), last.q_probs[0])
        line = say.verify_sentence(p_n, q_n, r.index + 1, *top)
        numbers["bonus_q"] = last.q_probs[0]
    else:  # a tree's sentence states no node's numbers: the bars show them
        line, numbers = say.tree_verify_sentence(k, r.index + 1), {}
    return Step("verify", r.index, None, line, numbers, bars, frame=r.frame(0))


def _candidates(r: _Round, row: int) -> list[say.Candidate]:
    """The children of row `row` as the walk judged them."""
    v = r.v
    return [
        say.Candidate(
            r.text(v.tokens[i]),
            v.p[i],
            v.p_left[i],
            v.q[i],
            v.h[i],
            v.accept_probs[i],
            v.coins[i],
            v.fates[i],
        )
        for i in r.kids[row]
    ]


def _decide_line(r: _Round, row: int, judge: Rule) -> tuple[str, dict[str, float], float]:
    """The decision at a row, in a chain's or a tree's words, the numbers it states, and
    lossless sampling's a(n) for its first candidate (on the same coin)."""
    first = r.kids[row][0]
    p_n, q_n = (x or 0.0 for x in node_pq(r.rnd, first))
    a, u = r.v.accept_probs[first], r.v.coins[first]
    a_sps = lossless_accept(q_n, p_n)
    accepted = r.fates[first] == "accepted"
    token = r.text(r.v.tokens[first])
    numbers = {"p_n": p_n, "q_n": q_n, "a_sps": a_sps, "u": u}
    rule = None if judge.caps.lossless else judge.label
    if r.rnd.branching:
        after = None if row == 0 else r.text(r.v.tokens[row - 1])
        cands = _candidates(r, row)
        numbers = {}
        for j, c in enumerate(cands):
            if c.fate != "unreached":
                numbers |= {f"p[{j}]": c.p, f"q[{j}]": c.q, f"h[{j}]": c.h, f"a[{j}]": c.a}
                numbers |= {f"u[{j}]": c.u} | ({f"p_left[{j}]": c.p_left} if j else {})
        line = say.tree_decide_sentence(after, cands, rule)
        best = row_optimum(r.rnd, row, r.run.decoder.vocab)
        if best is not None:
            numbers |= {"rrs": best.rrs, "optimum": best.optimum}
            line += " " + say.optimum_sentence(best.candidates, best.rrs, best.optimum)
        return line, numbers, a_sps
    if round_level(judge):
        numbers["a"] = a
        keeps = judge.card.round_in_words
        line = say.round_level_decide_sentence(
            token, p_n, q_n, a_sps, judge.label, a, u, accepted, u < a_sps, keeps
        )
        return line, numbers, a_sps
    pos = r.position(row)
    h_n = pos.h_n if pos is not None and pos.h_n is not None else r.v.h[first]
    if rule is not None and q_n > 0:
        numbers.update({"h_n": h_n, "a": a})
    line = say.decide_sentence(token, p_n, q_n, a_sps, rule, h_n, a, u, accepted, u < a_sps)
    return line, numbers, a_sps


def _decide_step(r: _Round, depth: int, row: int, judge: Rule) -> Step:
    line, numbers, a_sps = _decide_line(r, row, judge)
    first = r.kids[row][0]
    where = "the root" if row == 0 else repr(r.text(r.v.tokens[row - 1]))
    title = f"p, q and h (first candidate) after {where}"
    exact = r.rows.positions.get(row)
    if exact is not None:
        series = {"p": exact.p, "q": exact.q}
        series |= {} if judge.caps.lossless else {"h": exact.h}
        bars: Bars | None = Bars([r.text(i) for i in exact.ids], series, 0, title)
    else:
        bars = _trace_bars(r.position(row), r.text, title)
    a, u = r.v.accept_probs[first], r.v.coins[first]
    sps = (a_sps, u)
    slot = first if not r.rnd.branching else depth
    return Step("decide", r.index, slot, line, numbers, bars, (a, u), sps, frame=r.frame(depth + 1))


def _traversal_step(r: _Round, node: int) -> Step:
    """One node judged by traversal verification, leaves first (`maths.traversal`)."""
    v = r.v
    parent = v.parents[node]
    after = None if parent < 0 else r.text(v.tokens[parent])
    w, u = v.accept_probs[node], v.coins[node]
    depth = v.depths[node]
    accepted = v.fates[node] == "accepted"
    line = say.traversal_sentence(
        r.text(v.tokens[node]), depth, after, w, u, accepted, bool(r.kids[node + 1])
    )
    frame = r.frame(max(v.depths))
    return Step("decide", r.index, depth - 1, line, {"w": w, "u": u}, None, (w, u), frame=frame)


def _trace_bars(pos: PositionTrace | None, text: Callable[[int], str], title: str) -> Bars | None:
    """p and q at a row the decoder's probe did not see (a round-level rule's drafts after its
    first failing coin), from the trace's kept rows, which hold the drafted token and far more
    than the top few of p and q, exactly."""
    if pos is None or pos.draft_id is None:
        return None
    p = dict(zip(pos.replay_p_ids, pos.replay_p_probs, strict=True))
    q = dict(zip(pos.replay_q_ids, pos.replay_q_probs, strict=True))
    ids = list(dict.fromkeys([pos.draft_id, *pos.q_ids[:SHOWN], *pos.p_ids[:SHOWN]]))
    series = {"p": [p.get(i, 0.0) for i in ids], "q": [q.get(i, 0.0) for i in ids]}
    return Bars([text(i) for i in ids], series, 0, title)


def _bonus_step(r: _Round) -> Step:
    v, m = r.v, len(r.v.path)
    row = v.path_rows[-1]
    pos = r.position(row)
    q = dict(zip(pos.q_ids, pos.q_probs, strict=True)) if pos is not None else {}
    token = r.rnd.next_id
    q_bonus = q.get(token, 0.0)
    if r.rnd.branching:
        line = say.tree_bonus_sentence(m, r.text(token), q_bonus, v.emit_coin)
    else:
        line = say.bonus_sentence(r.rnd.k, r.text(token), q_bonus, v.emit_coin)
    bars = None
    if pos is not None and pos.q_ids:
        ids = list(pos.q_ids[:TOP_P_BARS])
        ids = ids if token in ids else [*ids, token]
        series = {"q": [q.get(i, 0.0) for i in ids]}
        title = f"q at the bonus position {m + 1}"
        bars = Bars([r.text(i) for i in ids], series, ids.index(token), title, "bonus token")
    numbers = {"q": q_bonus, "coin": v.emit_coin}
    return Step("bonus", r.index, None, line, numbers, bars, frame=r.frame(None))


def _residual_step(r: _Round, judge: Rule) -> Step:
    v, m = r.v, len(r.v.path)
    row = v.path_rows[-1]
    token, coin = r.rnd.next_id, v.emit_coin
    res = r.rows.residual
    numbers = {"coin": coin}
    r_prob = res.recovered_prob if res is not None else None
    if r.rnd.branching:
        line = say.tree_residual_sentence(r.text(token), coin, len(r.kids[row]), r_prob)
    else:
        dropped = sum(f == "dropped" for f in r.fates)
        line = say.residual_sentence(
            r.text(v.tokens[r.kids[row][0]]), r.text(token), r_prob, coin, dropped
        )
    bars = None
    if res is not None:
        numbers["r"] = res.recovered_prob
        title = f"the residual at position {m + 1}"
        series = {"residual": res.probs}
        labels = [r.text(i) for i in res.ids]
        bars = Bars(labels, series, res.ids.index(token), title, "recovered token")
    return Step("residual", r.index, m, line, numbers, bars, frame=r.frame(None))


def _summary_step(r: _Round) -> Step:
    live = live_stats(r.run.rounds[: r.index + 1], 0.0, not r.run.judge.caps.overrides_sps)
    emitted, m = len(r.rnd.emitted_ids), len(r.v.path)
    if r.rnd.branching:  # a rule that overrides sps judges no tree: its KL is measured here
        assert live.emitted_kl is not None
        line = say.tree_summary_sentence(
            len(r.v.emitted),
            m,
            r.rnd.k,
            r.v.decided,
            live.verifier_calls,
            live.tokens_per_call,
            live.emitted_kl,
        )
    else:
        line = say.summary_sentence(
            emitted, live.verifier_calls, live.tokens_per_call, live.emitted_kl, m, r.rnd.k
        )
    numbers = {"tokens_per_call": live.tokens_per_call}
    if live.emitted_kl is not None:
        numbers["emitted_kl"] = live.emitted_kl
    return Step("summary", r.index, None, line, numbers, frame=r.frame(None))


def _sampled_step(r: _Round) -> Step:
    pos = r.position(0)
    q = dict(zip(pos.q_ids, pos.q_probs, strict=True)) if pos else {}
    token = r.rnd.next_id
    line = (
        "No room to draft is left in the context, so the verifier samples "
        f"{say.tok(r.text(token))} alone (q = {say.num(q.get(token, 0.0))})."
    )
    return Step("sampled", r.index, None, line, {"q": q.get(token, 0.0)})


def round_steps(run: StepRun, index: int) -> list[Step]:
    """Round `index` of the run (decoded already) as its steps, in order; built once per run."""
    if index not in run.step_cache:
        run.step_cache[index] = _build_steps(run, index)
    return run.step_cache[index]


def step_after(run: StepRun, r: int, i: int) -> tuple[int, int]:
    """Where Next step goes from round r, step i: the round's next step, else the next round's
    first (which the page decodes, or it stays put when the run has ended)."""
    if r < len(run.rounds) and i + 1 < len(round_steps(run, r)):
        return r, i + 1
    return r + 1, 0


def step_before(run: StepRun, r: int, i: int) -> tuple[int, int]:
    """Where Back goes from round r, step i, within the rounds decoded: fast clicks can leave
    the page at a round it has not decoded yet (Next round ahead of the decoding), and Back
    from there is the last step decoded."""
    last = len(run.rounds) - 1
    if last < 0:
        return 0, 0
    if r > last:
        return last, len(round_steps(run, last)) - 1
    if i > 0:
        return r, min(i, len(round_steps(run, r))) - 1
    if r > 0:
        return r - 1, len(round_steps(run, r - 1)) - 1
    return 0, 0


def _build_steps(run: StepRun, index: int) -> list[Step]:
    r = _Round(run, index)
    if r.rnd.sampled:
        return [_sampled_step(r), _summary_step(r)]
    steps = [_draft_step(r, d) for d in range(1, max(r.v.depths) + 1)]
    steps.append(_verify_step(r))
    if r.rnd.branching and run.judge.caps.judges_trees_by_traversal:
        steps += [_traversal_step(r, c) for c in post_order(r.v.parents) if r.v.coin_judged(c)]
    else:
        # A round-level rule draws a coin for every draft, and each one counts.
        rows = range(r.rnd.k) if round_level(run.judge) else r.v.decided_rows
        steps += [_decide_step(r, d, row, run.judge) for d, row in enumerate(rows)]
    steps.append(_residual_step(r, run.judge) if r.v.last == "recovered" else _bonus_step(r))
    steps.append(_summary_step(r))
    return steps


# What a link's `jump` opens: the first step of the run that shows it.
JUMP_TESTS: dict[str, Callable[[Step], bool]] = {
    "rejection": lambda s: s.kind == "residual",
    "bonus": lambda s: s.kind == "bonus",
    # a draft the rule accepts where lossless sampling, on the same coin, rejects
    "rescue": lambda s: (
        s.kind == "decide"
        and s.coin is not None
        and s.sps_coin is not None
        and s.coin[1] < s.coin[0]
        and s.sps_coin[1] >= s.sps_coin[0]
    ),
}


def first_example(run: StepRun, max_rounds: int) -> int | None:
    """The first round worth opening on: its first draft has q_n > 0, so the rule has a real
    decision to make (a draft outside the verifier's top-p is rejected whatever the rule), or a
    round of a tree. None if none is in the first `max_rounds`."""
    for r in range(max_rounds):
        if not run.ensure(r):
            return None
        steps = round_steps(run, r)
        decide = next((s for s in steps if s.kind == "decide"), None)
        if decide is not None and (decide.numbers.get("q_n", 1.0) > 0 or not decide.numbers):
            return r
    return None


def find_step(run: StepRun, jump: str, max_rounds: int) -> tuple[int, int] | None:
    """(round, step) of the first step `JUMP_TESTS[jump]` accepts, decoding up to
    `max_rounds` rounds to find one; None if none does. A rejection opens at its decision."""
    test = JUMP_TESTS[jump]
    for r in range(max_rounds):
        if not run.ensure(r):
            return None
        steps = round_steps(run, r)
        for i, step in enumerate(steps):
            if test(step):
                return (r, i - 1) if jump == "rejection" else (r, i)
    return None
