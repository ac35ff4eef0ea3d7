"""One decoded round taken apart into steps, each with its picture's data and its narration.

Steps of a speculative round, in order: `draft` (one per drafted token), `verify` (one pass
over the k + 1 positions), `decide` (one per drafted token that got a decision), then
`residual` after a rejection or `bonus` when all k passed, then `summary`. A verifier-only
round (the context left no room to draft) has a `sampled` step and its summary. Every number a
step's narration states is in `Step.numbers`, read from the round's trace (and, for the bars,
from the exact rows the StepRun kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from cactus_core.app.decode.run import live_stats
from cactus_core.app.step import narration as say
from cactus_core.app.step.run import SHOWN, RoundRows, StepRun
from cactus_core.app.step.steps import Bars, Step
from cactus_core.app.step.tree_steps import tree_round_steps
from cactus_core.maths.rules import Drafted, Rule, lossless_rule

if TYPE_CHECKING:
    from cactus_core.engine.decoding.trace import PositionTrace, RoundTrace

TOP_P_BARS = 8  # tokens in a draft step's picture of p


def round_level(rule: Rule) -> bool:
    """Whether the rule decides on the whole draft at once (`Rule.round_level`): then every
    draft's coin counts, and a token's fate is the round's outcome, not its own coin's."""
    return rule.round_level


def lossless_accept(q_n: float, p_n: float) -> float:
    """a(n) of lossless speculative sampling at one position, from the rule itself."""
    rule = lossless_rule()
    qn, pn = torch.tensor(q_n, dtype=torch.float64), torch.tensor(p_n, dtype=torch.float64)
    return float(rule.accept(Drafted(qn, pn)))


def _draft_step(rnd: RoundTrace, j: int, text: Callable[[int], str]) -> Step:
    pos = rnd.positions[j]
    ids, probs = pos.p_ids[:TOP_P_BARS], pos.p_probs[:TOP_P_BARS]
    n = rnd.draft_ids[j]
    if n not in ids:  # the drafted token is always in the picture
        ids, probs = [*ids, n], [*probs, pos.p_n]
    top_text = text(pos.p_ids[0]) if pos.p_ids else text(n)
    top_p = pos.p_probs[0] if pos.p_probs else pos.p_n
    line = say.draft_sentence(j, rnd.k, text(n), pos.p_n, top_text, top_p)
    bars = Bars([text(i) for i in ids], {"p": probs}, ids.index(n), f"p at position {j + 1}")
    return Step("draft", rnd.index, j, line, {"p_n": pos.p_n}, bars)


def _verify_step(rnd: RoundTrace, text: Callable[[int], str]) -> Step:
    k = rnd.k
    p_n = [rnd.positions[j].p_n for j in range(k)]
    q_n = [rnd.positions[j].q_n for j in range(k)]
    bonus = rnd.positions[k]
    line = say.verify_sentence(p_n, q_n, rnd.index + 1, text(bonus.q_ids[0]), bonus.q_probs[0])
    labels = [f"{j + 1}:{text(rnd.draft_ids[j])}" for j in range(k)]
    bars = Bars(labels, {"p": p_n, "q": q_n}, title="p_n and q_n of each drafted token")
    numbers = {"bonus_q": bonus.q_probs[0]}
    numbers.update(
        {f"p_n[{j}]": p_n[j] for j in range(k)} | {f"q_n[{j}]": q_n[j] for j in range(k)}
    )
    return Step("verify", rnd.index, None, line, numbers, bars)


def _decide_step(
    rnd: RoundTrace, rows: RoundRows, j: int, judge: Rule, text: Callable[[int], str]
) -> Step:
    pos = rnd.positions[j]
    a, u = rnd.accept_probs[j], rnd.accept_coins[j]
    a_sps = lossless_accept(pos.q_n, pos.p_n)
    accepted = rnd.draft_fates[j] == "accepted"
    rule = None if judge.lossless else judge.label
    token = text(rnd.draft_ids[j])
    numbers = {"p_n": pos.p_n, "q_n": pos.q_n, "a_sps": a_sps, "u": u}
    if round_level(judge):
        line = say.round_level_decide_sentence(
            token, pos.p_n, pos.q_n, a_sps, judge.label, a, u, accepted, u < a_sps
        )
        numbers["a"] = a
    else:
        line = say.decide_sentence(
            token, pos.p_n, pos.q_n, a_sps, rule, pos.h_n, a, u, accepted, u < a_sps
        )
        if rule is not None:
            numbers.update({"h_n": pos.h_n, "a": a} if pos.q_n > 0 else {})
    title = f"p, q and h around the draft {j + 1}"
    if j < len(rows.positions):
        r = rows.positions[j]
        series = {"p": r.p, "q": r.q} if judge.lossless else {"p": r.p, "q": r.q, "h": r.h}
        bars = Bars([text(i) for i in r.ids], series, 0, title)
    else:
        bars = _trace_bars(pos, text, title)
    return Step("decide", rnd.index, j, line, numbers, bars, (a, u), (a_sps, u))


def _trace_bars(pos: PositionTrace, text: Callable[[int], str], title: str) -> Bars:
    """p and q at a position the decoder's probe did not see (a round-level rule's drafts after
    its first failing coin), from the trace's kept rows, which hold the drafted token and far
    more than the top few of p and q, exactly."""
    p = dict(zip(pos.replay_p_ids, pos.replay_p_probs, strict=True))
    q = dict(zip(pos.replay_q_ids, pos.replay_q_probs, strict=True))
    ids = [pos.draft_id, *pos.q_ids[:SHOWN], *pos.p_ids[:SHOWN]]
    ids = list(dict.fromkeys(ids))
    series = {"p": [p.get(i, 0.0) for i in ids], "q": [q.get(i, 0.0) for i in ids]}
    return Bars([text(i) for i in ids], series, 0, title)


def _ending_step(rnd: RoundTrace, rows: RoundRows, text: Callable[[int], str]) -> Step:
    k, m = rnd.k, rnd.num_accepted
    if m == k:
        pos = rnd.positions[k]
        q = dict(zip(pos.q_ids, pos.q_probs, strict=True))
        q_bonus = q.get(rnd.next_id, 0.0)
        line = say.bonus_sentence(k, text(rnd.next_id), q_bonus, rnd.sample_coin)
        ids = list(pos.q_ids[:TOP_P_BARS])
        ids = ids if rnd.next_id in ids else [*ids, rnd.next_id]
        bars = Bars(
            [text(i) for i in ids],
            {"q": [q.get(i, 0.0) for i in ids]},
            ids.index(rnd.next_id),
            f"q at the bonus position {k + 1}",
            "bonus token",
        )
        numbers = {"q": q_bonus, "coin": rnd.sample_coin}
        return Step("bonus", rnd.index, None, line, numbers, bars)
    res = rows.residual
    r_prob = res.recovered_prob if res is not None else None
    line = say.residual_sentence(
        text(rnd.draft_ids[m]), text(rnd.next_id), r_prob, rnd.sample_coin, k - m - 1
    )
    numbers = {"coin": rnd.sample_coin}
    bars = None
    if res is not None:
        numbers["r"] = res.recovered_prob
        bars = Bars(
            [text(i) for i in res.ids],
            {"residual": res.probs},
            res.ids.index(rnd.next_id),
            f"the residual at position {m + 1}",
            "recovered token",
        )
    return Step("residual", rnd.index, m, line, numbers, bars)


def _summary_step(run: StepRun, index: int) -> Step:
    rnd = run.rounds[index]
    live = live_stats(run.rounds[: index + 1], 0.0)
    line = say.summary_sentence(
        len(rnd.emitted_ids),
        live.verifier_calls,
        live.tokens_per_call,
        live.emitted_kl,
        rnd.num_accepted,
        rnd.k,
    )
    numbers = {"tokens_per_call": live.tokens_per_call, "emitted_kl": live.emitted_kl}
    return Step("summary", index, None, line, numbers)


def _sampled_step(rnd: RoundTrace, text: Callable[[int], str]) -> Step:
    pos = rnd.positions[0] if rnd.positions else None
    q = dict(zip(pos.q_ids, pos.q_probs, strict=True)) if pos else {}
    line = (
        "No room to draft is left in the context, so the verifier samples "
        f"{say.tok(text(rnd.next_id))} alone (q = {say.num(q.get(rnd.next_id, 0.0))})."
    )
    return Step("sampled", rnd.index, None, line, {"q": q.get(rnd.next_id, 0.0)})


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
    rnd, rows = run.rounds[index], run.rows[index]
    if rnd.tree is not None:
        return tree_round_steps(run, index)
    if rnd.k == 0:
        return [_sampled_step(rnd, run.text), _summary_step(run, index)]
    steps = [_draft_step(rnd, j, run.text) for j in range(rnd.k)]
    steps.append(_verify_step(rnd, run.text))
    # A round-level rule draws a coin for every draft, and each one counts.
    decided = rnd.k if round_level(run.judge) else min(rnd.num_accepted + 1, rnd.k)
    steps += [_decide_step(rnd, rows, j, run.judge, run.text) for j in range(decided)]
    steps.append(_ending_step(rnd, rows, run.text))
    steps.append(_summary_step(run, index))
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
