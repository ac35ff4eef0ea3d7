"""Traces: what each round records, JSON round trips, and replay under another rule."""

from __future__ import annotations

import json
import math

import pytest
import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.replay import reverify
from cactus_core.engine.decoding.trace import DRAFT_FATES, EMIT_FATES, Trace
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import make_rule
from cactus_core.maths.sampling import logits_to_probs

PROMPT = "Tell me about cacti."


@pytest.fixture(scope="module")
def traced(tiny_pair):
    dec = SpeculativeDecoder(tiny_pair, make_rule("cactus", delta=0.5), k=4, temperature=0.8)
    dec.eos_ids = set()
    return dec.generate(PROMPT, max_new_tokens=40, seed=3)


def test_round_fields_are_consistent(traced, tiny_pair):
    trace = traced.trace
    assert [t for r in trace.rounds for t in r.emitted_ids] == traced.token_ids
    for rnd in trace.rounds:
        assert len(rnd.positions) == rnd.k + 1
        assert set(rnd.draft_fates) <= set(DRAFT_FATES)
        assert set(rnd.emitted_fates) <= set(EMIT_FATES)
        m = rnd.num_accepted
        assert rnd.draft_fates[:m] == ["accepted"] * m
        for j, (a, u, fate) in enumerate(
            zip(rnd.accept_probs, rnd.accept_coins, rnd.draft_fates, strict=True)
        ):
            if fate != "unreached":
                assert (u < a) == (fate == "accepted"), (rnd.index, j)
        if not rnd.truncated:
            assert rnd.emitted_ids == [*rnd.draft_ids[:m], rnd.next_id]
            assert rnd.emitted_fates[-1] == ("bonus" if m == rnd.k else "recovered")
        for j, pos in enumerate(rnd.positions[: rnd.k]):
            assert pos.draft_id == rnd.draft_ids[j]
            assert len(pos.q_ids) <= 20 and len(pos.p_ids) <= 20 and len(pos.h_ids) <= 20
            assert pos.q_probs == sorted(pos.q_probs, reverse=True)
            assert pos.kl_h_q >= 0
            assert (pos.kl_pi_q is None) == (rnd.draft_fates[j] == "unreached")
        assert rnd.positions[-1].p_ids == [] and rnd.positions[-1].kl_pi_q is None
        assert rnd.draft_text == [trace.text(t) for t in rnd.draft_ids]
        assert rnd.draft_s > 0 and rnd.verify_s > 0
    assert trace.token_text[traced.token_ids[0]] == tiny_pair.tokenizer.decode(
        [traced.token_ids[0]]
    )


def test_recorded_divergences_are_exact(traced, tiny_pair):
    """Recompute p, q, h and pi for the first round by full forwards and compare."""
    rnd = traced.trace.rounds[0]
    rule = make_rule("cactus", delta=0.5)
    ids = traced.prompt_ids + rnd.draft_ids
    with torch.no_grad():
        q_logits = tiny_pair.verifier(torch.tensor([ids])).logits[0]
        p_logits = tiny_pair.draft(torch.tensor([ids])).logits[0]
    n0 = len(traced.prompt_ids) - 1
    q = logits_to_probs(q_logits[n0 : n0 + rnd.k], 0.8)
    p = logits_to_probs(p_logits[n0 : n0 + rnd.k], 0.8)
    pi = emitted_distribution(rule, p, q)
    h = rule.adjusted_target(q, p, torch.tensor(rnd.draft_ids))
    for j, pos in enumerate(rnd.positions[: rnd.k]):
        if pos.kl_pi_q is not None:
            assert pos.kl_pi_q == pytest.approx(kl(pi[j], q[j]).item(), abs=1e-4)
        assert pos.kl_h_q == pytest.approx(kl(h[j], q[j]).item(), abs=1e-4)
        assert pos.q_ids[0] == int(q[j].argmax())
        assert pos.q_probs[0] == pytest.approx(q[j].max().item(), abs=1e-5)
        assert pos.p_n == pytest.approx(p[j, rnd.draft_ids[j]].item(), abs=1e-5)


def test_json_round_trip(traced, tmp_path):
    trace = traced.trace
    text = trace.to_json()
    json.loads(text)  # strict JSON: no NaN / Infinity
    back = Trace.from_json(text)
    assert back.to_dict() == json.loads(text)
    path = tmp_path / "trace.json"
    trace.to_json(path)
    assert Trace.from_json(path).rounds[2].draft_ids == trace.rounds[2].draft_ids
    assert back.rule == trace.rule
    with pytest.raises(ValueError, match="not a trace"):
        Trace.from_json('{"hello": 1}')
    with pytest.raises(ValueError, match="version"):
        Trace.from_dict({**json.loads(text), "version": 99})


def test_replay_same_rule_reproduces_decisions(traced):
    replay = reverify(traced.trace, make_rule("cactus", delta=0.5))
    assert replay.decisions_exact
    assert replay.flips == 0
    for rnd, rep in zip(traced.trace.rounds, replay.rounds, strict=True):
        assert rep.fates_after == rnd.draft_fates
        assert rep.accept_probs_after == pytest.approx(rnd.accept_probs, abs=1e-5)


def test_replay_is_fully_exact_when_top_m_holds_the_support(tiny_pair):
    # top_k = 50 <= replay_top_m: the kept rows are the whole distributions.
    dec = SpeculativeDecoder(tiny_pair, "sps", k=3, temperature=1.0, top_k=50, replay_top_m=64)
    out = dec.generate(PROMPT, max_new_tokens=30, seed=1)
    replay = reverify(out.trace, "sps")
    assert replay.exact
    assert [r.next_after for r in replay.rounds] == [r.next_id for r in out.trace.rounds]


def test_replay_under_larger_delta_only_accepts_more(traced):
    """cactus's a(n) grows with delta: with the same coins no accepted draft turns rejected,
    and a round's accepted prefix can only grow."""
    sps = reverify(traced.trace, make_rule("sps"))
    big = reverify(traced.trace, make_rule("cactus", delta=4.0))
    for before, after in zip(sps.rounds, big.rounds, strict=True):
        assert after.num_accepted_after >= before.num_accepted_after
        for a, b in zip(before.accept_probs_after, after.accept_probs_after, strict=True):
            assert b >= a - 1e-6
    assert big.tokens_per_call_after >= sps.tokens_per_call_after
    assert big.flips > 0


def test_record_trace_off_keeps_the_cheap_fields(tiny_pair):
    dec = SpeculativeDecoder(tiny_pair, "cactus", k=4, record_trace=False)
    out = dec.generate(PROMPT, max_new_tokens=20, seed=0)
    assert all(r.positions == [] for r in out.trace.rounds)
    assert all(len(r.accept_coins) == r.k for r in out.trace.rounds)
    assert math.isfinite(out.stats.mean_emitted_kl)
    with pytest.raises(ValueError, match="record_trace"):
        reverify(out.trace, "sps")


def test_greedy_trace_replays_as_exact_match(tiny_pair):
    dec = SpeculativeDecoder(tiny_pair, "interp", k=4, temperature=0.0)
    out = dec.generate(PROMPT, max_new_tokens=20, seed=0)
    for rule in ("interp", "tas", "cactus"):
        assert reverify(out.trace, rule).flips == 0


@pytest.mark.parametrize("rule", ["block", "cascade", "relaxed-topk", "optimal-price"])
def test_a_block_run_replays_itself_and_new_rules_replay_a_trace(tiny_pair, rule):
    """A trace recorded under a new rule replays under that rule with the same decisions when
    its rows are whole (top_k ≤ M), block's round-level decisions included."""
    dec = SpeculativeDecoder(
        tiny_pair, make_rule(rule), k=4, temperature=1.0, top_k=50, replay_top_m=64
    )
    out = dec.generate(PROMPT, max_new_tokens=30, seed=2)
    replay = reverify(out.trace, rule)
    assert replay.exact and replay.decisions_exact and replay.flips == 0
    for rnd, rep in zip(out.trace.rounds, replay.rounds, strict=True):
        assert rep.num_accepted_after == rnd.num_accepted
        assert rep.next_after == rnd.next_id
