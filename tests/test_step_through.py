"""Step through without Streamlit: a StepRun decodes exactly what the decoder decodes, its
steps come in the documented order, every number a narration states is the trace's own, and
the figures carry those numbers."""

from __future__ import annotations

import pytest
import torch

from cactus_core.app.shared.request import DecodeRequest
from cactus_core.app.shared.settings import AppSettings
from cactus_core.app.shared.transcript import num, tok
from cactus_core.app.step.figures import step_figures
from cactus_core.app.step.run import StepRun
from cactus_core.app.step.view import (
    JUMP_TESTS,
    find_step,
    lossless_accept,
    round_level,
    round_steps,
)
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULES, make_rule
from cactus_core.maths.sampling import SamplingSettings

PROMPT = "Hello"
MAX_NEW = 24


def request(rule: str, seed: int = 0, temperature: float = 0.7, **params) -> DecodeRequest:
    s = AppSettings(device="cpu", sampling=SamplingSettings(seed=seed, temperature=temperature))
    return DecodeRequest(PROMPT, s, make_rule(rule, **params), MAX_NEW, True)


@pytest.fixture(scope="module")
def cactus_run(tiny_pair) -> StepRun:
    run = StepRun.start(tiny_pair, request(DEFAULT_RULE, delta=1.0))
    run.finish()
    return run


def test_the_run_is_the_decoders_own(tiny_pair, cactus_run):
    dec = SpeculativeDecoder(tiny_pair, make_rule(DEFAULT_RULE, delta=1.0), k=4)
    want = dec.generate(PROMPT, max_new_tokens=MAX_NEW, seed=0)
    assert cactus_run.output.token_ids == want.token_ids
    got = [(r.draft_ids, r.accept_coins, r.draft_fates) for r in cactus_run.rounds]
    assert got == [(r.draft_ids, r.accept_coins, r.draft_fates) for r in want.trace.rounds]


def test_the_same_seed_gives_the_same_steps_whenever_asked(tiny_pair, cactus_run):
    again = StepRun.start(tiny_pair, request(DEFAULT_RULE, delta=1.0))
    assert again.ensure(2) and len(again.rounds) == 3  # only as far as asked
    for r in range(3):
        assert round_steps(again, r) == round_steps(cactus_run, r)
    assert round_steps(again, 1) is round_steps(again, 1)  # built once, then read


def check_round(run: StepRun, r: int) -> None:
    """Order of the steps, and every narrated number against the trace."""
    rnd, steps = run.rounds[r], round_steps(run, r)
    k, m = rnd.k, rnd.num_accepted
    whole = round_level(run.judge)  # every draft's coin counts
    decided = k if whole else min(m + 1, k)
    ending = "bonus" if m == k else "residual"
    kinds = ["draft"] * k + ["verify"] + ["decide"] * decided + [ending, "summary"]
    assert [s.kind for s in steps] == kinds
    for step in steps:
        for value in step.numbers.values():
            assert num(value) in step.narration, (step.kind, value, step.narration)
    verify = steps[k]
    for j in range(k):
        assert verify.numbers[f"p_n[{j}]"] == rnd.positions[j].p_n
        assert verify.numbers[f"q_n[{j}]"] == rnd.positions[j].q_n
    for j, step in enumerate(steps[:k]):
        assert step.numbers == {"p_n": rnd.positions[j].p_n}
        assert rnd.draft_text[j] in step.bars.labels[step.bars.highlight] or not rnd.draft_text[j]
    for j, step in enumerate(steps[k + 1 : k + 1 + decided]):
        pos = rnd.positions[j]
        assert step.numbers["p_n"] == pos.p_n and step.numbers["q_n"] == pos.q_n
        assert step.numbers["u"] == rnd.accept_coins[j]
        assert step.coin == (rnd.accept_probs[j], rnd.accept_coins[j])
        a_sps = min(1.0, pos.q_n / pos.p_n) if pos.q_n > 0 else 0.0
        assert step.numbers["a_sps"] == pytest.approx(a_sps, rel=1e-6)
        accepted = rnd.draft_fates[j] == "accepted"
        if whole:
            assert accepted == (j < m)
            assert ("is kept" if accepted else "is not kept") in step.narration
            continue
        assert accepted == (rnd.accept_coins[j] < rnd.accept_probs[j])
        assert ("accepted" if accepted else "rejected") in step.narration.split("u = ")[1]
        if not run.judge.caps.lossless and pos.q_n > 0:
            assert step.numbers["h_n"] == pos.h_n and step.numbers["a"] == rnd.accept_probs[j]
        # the bars' exact values agree with the trace at the drafted token (shown first)
        assert step.bars.series["p"][0] == pytest.approx(pos.p_n, rel=1e-6)
        assert step.bars.series["q"][0] == pytest.approx(pos.q_n, rel=1e-6, abs=1e-12)
    end = steps[-2]
    assert end.numbers["coin"] == rnd.sample_coin
    assert tok(run.text(rnd.next_id)) in end.narration
    if ending == "residual" and whole:
        assert end.bars is None  # its residual is the rule's own, for the whole draft
        return
    assert end.bars.labels[end.bars.highlight] == run.text(rnd.next_id)
    if ending == "residual" and not whole:
        residual = end.bars.series["residual"]
        assert end.numbers["r"] == residual[end.bars.highlight] > 0
        assert sum(residual) <= 1 + 1e-6


def test_every_round_steps_and_narrates_its_own_numbers(cactus_run):
    kinds = set()
    for r in range(len(cactus_run.rounds)):
        check_round(cactus_run, r)
        kinds.add(round_steps(cactus_run, r)[-2].kind)
    assert kinds == {"bonus", "residual"}  # both endings occur in this run


def test_a_lossless_run_and_greedy(tiny_pair):
    run = StepRun.start(tiny_pair, request(LOSSLESS_RULE, seed=4))
    run.ensure(1)
    for r in range(2):
        check_round(run, r)
    step = next(s for s in round_steps(run, 0) if s.kind == "decide")
    assert "h_n" not in step.numbers and "h" not in step.bars.series
    greedy = StepRun.start(tiny_pair, request(DEFAULT_RULE, temperature=0.0, delta=1.0))
    greedy.ensure(0)
    assert greedy.judge.caps.lossless  # exact match at T = 0, whatever rule was picked
    check_round(greedy, 0)


def test_summary_counts_what_the_stats_count(cactus_run):
    last = len(cactus_run.rounds) - 1
    summary = round_steps(cactus_run, last)[-1]
    stats = cactus_run.output.stats
    assert summary.numbers["tokens_per_call"] == pytest.approx(stats.tokens_per_call)
    assert summary.numbers["emitted_kl"] == pytest.approx(stats.mean_emitted_kl)


def test_rejections_rescues_and_sps_on_the_same_coin(cactus_run, tiny_pair):
    for jump in JUMP_TESTS:
        where = find_step(cactus_run, jump, len(cactus_run.rounds))
        assert where is not None, jump
        r, i = where
        step = round_steps(cactus_run, r)[i]
        if jump == "rejection":
            assert step.kind == "decide" and round_steps(cactus_run, r)[i + 1].kind == "residual"
        if jump == "rescue":
            a_sps, u = step.sps_coin
            assert u < step.coin[0] and u >= a_sps
            assert "where lossless would have rejected" in step.narration
    assert lossless_accept(0.2, 0.8) == pytest.approx(0.25)
    assert lossless_accept(0.0, 0.8) == 0.0


@pytest.mark.parametrize("name", list(RULES))
@pytest.mark.usefixtures("tiny_judge")
def test_every_rule_steps_through(tiny_pair, name):
    run = StepRun.start(tiny_pair, request(name, seed=2))
    run.ensure(1)
    for r in range(2):
        check_round(run, r)


def test_step_figures(cactus_run):
    steps = round_steps(cactus_run, 0)
    decide = next(s for s in steps if s.kind == "decide")
    figs = step_figures(decide)
    assert set(figs) == {"bars", "coin", "sps_coin"}
    names = [t.name for t in figs["bars"].data]
    assert names == ["p (draft)", "q (verifier)", "h (rule's target)"]
    assert figs["coin"].data[0].x[0] == decide.coin[0]
    assert figs["sps_coin"].data[1].x[0] == decide.sps_coin[1]
    assert set(step_figures(steps[-1])) == set()  # the summary is words and numbers


def test_the_probe_keeps_no_rows(cactus_run):
    assert not cactus_run._decided  # every round that came out took its rows
    assert all(isinstance(p.p, list) for rows in cactus_run.rows for p in rows.positions.values())
    assert not any(isinstance(v, torch.Tensor) for v in vars(cactus_run.rows[0]).values())


def test_a_round_level_rule_is_narrated_as_one(tiny_pair):
    names = [name for name, cls in RULES.items() if cls.caps.round_level]
    if not names:
        pytest.skip("no rule decides on the whole draft")
    run = StepRun.start(tiny_pair, request(names[0], seed=0))
    run.ensure(3)
    for r in range(4):
        steps = round_steps(run, r)
        assert sum(s.kind == "decide" for s in steps) == run.rounds[r].k
        assert all("h_n" not in s.numbers for s in steps)


def test_a_first_visit_opens_on_a_round_with_something_to_decide(tiny_pair):
    """Rounds whose first draft lies outside the verifier's top-p (q_n = 0) are rejected by
    every rule: a poor first example. Step through opens on the first round whose first draft
    q allows."""
    from cactus_core.app.step.view import first_example, round_steps

    for seed in range(12):
        s = AppSettings(device="cpu", sampling=SamplingSettings(seed=seed, top_p=0.3))
        req = DecodeRequest(PROMPT, s, make_rule(DEFAULT_RULE, delta=1.0), 24, True)
        run = StepRun.start(tiny_pair, req)
        start = first_example(run, 8)
        decides = [
            next((x for x in round_steps(run, r) if x.kind == "decide"), None)
            for r in range(len(run.rounds))
        ]
        first_q = [None if d is None else d.numbers["q_n"] for d in decides]
        run.close()
        if start:  # a run whose first round was a poor example
            assert all(q in (None, 0) for q in first_q[:start]) and first_q[start] > 0
            return
    pytest.fail("no seed gave a first round with q_n = 0: the test checks nothing")
