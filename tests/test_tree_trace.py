"""A tree run's trace on the tiny pair: every row's p, q and h with every candidate kept exactly,
the emitted KL in the trace and the stats, the per-depth counts, the sweep's probe, the Decode
inspector's bars, and replay: under its own rule it reproduces every verdict, and under another
delta it is the walk of that rule on the same tree, q and coins."""

from __future__ import annotations

import math

import pytest
import torch

import cactus_core.engine.decoding.decoder as decoder_module
from cactus_core.app.decode.replay import replay_kl
from cactus_core.app.decode.run import inspect_token, live_stats, trace_position
from cactus_core.app.shared.tree_view import tree_replay_note
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.replay import reverify
from cactus_core.engine.decoding.trace import Trace, decided_positions
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.loading.models import with_feature_draft
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import make_rule
from cactus_core.maths.tree import children_of, verify_tree

SHAPE = TreeSettings(nodes=7, depth=3, width=2, branch=2, root_branch=3)
FULL = 512  # replay rows over the tiny vocabulary (259) keep every token: replay is exact


@pytest.fixture(scope="module")
def feature_pair(tiny_pair):
    return with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier))


@pytest.fixture(scope="module")
def recorded(feature_pair):
    """A cactus tree run with its engine outcomes (tree, q, verdict) kept per round."""
    outcomes = []
    real = decoder_module.run_tree_round

    def keep(*args, **kwargs):
        out = real(*args, **kwargs)
        outcomes.append(out)
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(decoder_module, "run_tree_round", keep)
    try:
        rule = make_rule("cactus", delta=0.5)
        dec = SpeculativeDecoder(feature_pair, rule, temperature=1.0, tree=SHAPE, replay_top_m=FULL)
        out = dec.generate("Tell me about cacti.", max_new_tokens=24, seed=3)
    finally:
        mp.undo()
    return out, outcomes, rule


def _tree_rounds(out):
    return [r for r in out.trace.rounds if r.tree is not None]


def test_every_row_keeps_p_q_h_and_every_candidate(recorded):
    out, outcomes, rule = recorded
    rounds = _tree_rounds(out)
    assert len(rounds) == len(outcomes) > 0
    for rnd, o in zip(rounds, outcomes, strict=True):
        kids = children_of(o.tree.parents.tolist())
        assert len(rnd.positions) == o.tree.size + 1
        for r, pos in enumerate(rnd.positions):
            assert pos.q_ids and pos.replay_q_ids
            if not kids[r]:
                assert pos.draft_id is None and not pos.p_ids and not pos.replay_p_ids
                continue
            first = int(o.tree.tokens[kids[r][0]])
            assert pos.draft_id == first and pos.p_ids and pos.h_ids
            assert pos.p_n == pytest.approx(float(o.tree.draft_probs[r, first]), abs=1e-6)
            for i in kids[r]:  # every candidate's exact p and q in the replay rows
                t = int(o.tree.tokens[i])
                p = dict(zip(pos.replay_p_ids, pos.replay_p_probs, strict=True))
                q = dict(zip(pos.replay_q_ids, pos.replay_q_probs, strict=True))
                assert p[t] == pytest.approx(float(o.tree.draft_probs[r, t]), abs=1e-6)
                assert q[t] == pytest.approx(float(o.q[0, r, t]), abs=1e-6)
            pi = emitted_distribution(rule, o.tree.draft_probs[r], o.q[0, r])
            assert pos.kl_pi_q == pytest.approx(float(kl(pi, o.q[0, r])), rel=1e-4, abs=1e-6)


def test_emitted_kl_in_the_trace_equals_the_stats(recorded):
    out, _, _ = recorded
    st = out.stats
    from_trace = sum(
        pos.kl_pi_q for r in out.trace.rounds for pos in decided_positions(r) if pos.kl_pi_q
    )
    assert st.kl_sum == pytest.approx(from_trace, rel=1e-6)
    assert st.kl_sum > 0
    assert live_stats(out.trace.rounds, 1.0).emitted_kl == pytest.approx(
        st.mean_emitted_kl, rel=1e-6
    )
    # per-depth counts: depth 1 is reached every tree round; accepted ones sum to the paths
    rounds = _tree_rounds(out)
    assert st.position_reached[0] == len(rounds)
    assert sum(st.position_accepted) == sum(r.num_accepted for r in rounds)


def test_replay_under_its_own_rule_reproduces_every_verdict(recorded):
    out, _, rule = recorded
    again = Trace.from_json(out.trace.to_json())
    replay = reverify(again, rule)
    assert replay.exact and replay.decisions_exact
    assert len(replay.rounds) == len(_tree_rounds(out))
    for rr, rnd in zip(replay.rounds, _tree_rounds(out), strict=True):
        assert rr.fates_after == rnd.tree["fates"] and not rr.flipped
        assert rr.tree_after["emitted"] == rnd.tree["emitted"]
        assert rr.next_after == rr.next_before


def test_replay_under_another_delta_is_that_rules_walk(recorded):
    out, outcomes, _ = recorded
    other = make_rule("cactus", delta=0.0)
    replay = reverify(out.trace, other)
    flips = 0
    for rr, o in zip(replay.rounds, outcomes, strict=True):
        walk = verify_tree(other, o.tree, o.q[0], o.verdict.uniforms.float())
        assert rr.fates_after == walk.fates
        assert rr.tree_after["emitted"] == walk.emitted
        a, b = rr.accept_probs_after, walk.accept_probs
        assert all(math.isnan(x) == math.isnan(y) for x, y in zip(a, b, strict=True))
        assert [x for x in a if not math.isnan(x)] == pytest.approx(
            [y for y in b if not math.isnan(y)], abs=1e-5
        )
        flips += len(rr.flipped)
    assert replay.tokens_per_call_after <= replay.tokens_per_call_before
    assert flips > 0
    assert tree_replay_note(out.trace) is not None


def test_the_inspector_and_the_playground_read_a_tree_rows(recorded):
    out, _, _ = recorded
    rnd = _tree_rounds(out)[0]
    for slot in range(len(rnd.emitted_ids)):
        view = inspect_token(out.trace, rnd.index, slot)
        assert view.tree is not None and view.labels and "q" in view.series
        row = rnd.tree["path"][slot - 1] + 1 if slot else 0
        if rnd.positions[row].draft_id is not None:
            assert {"p", "h", "residual"} <= set(view.series)
            assert view.kl_pi_q == rnd.positions[row].kl_pi_q
            assert any("coin u" in n for n in view.notes)
            assert any("KL(pi ‖ q) =" in n for n in view.notes)
    if rnd.num_accepted:
        pos = trace_position(out.trace, rnd.index, 0)
        assert pos.labels[pos.drafted] == out.trace.text(rnd.positions[0].draft_id)


def test_the_sweep_probe_sees_the_judged_rows_on_the_path(feature_pair):
    seen = []
    dec = SpeculativeDecoder(
        feature_pair,
        make_rule("cactus", delta=0.5),
        temperature=1.0,
        tree=SHAPE,
        record_trace=False,
        measure_kl=False,
        probe=lambda row, rnd, p, q: seen.append((rnd, p.shape[0], q.shape[0])),
    )
    out = dec.generate("Why is the sky blue?", max_new_tokens=12, seed=1)
    assert out.trace.rounds[0].positions == []
    rounds = {r.index: r for r in out.trace.rounds}
    for rnd, n_p, n_q in seen:
        tree = rounds[rnd].tree
        judged = len(tree["path"]) + (tree["last"] == "recovered")
        assert n_p == n_q == judged
    assert torch.isfinite(torch.tensor(out.stats.kl_sum))


def test_a_tree_replay_costs_its_rules_kl_node_by_node(recorded):
    out, _, rule = recorded
    same = replay_kl(out.trace, reverify(out.trace, rule))
    assert same.exact and same.rounds
    assert same.replay_mean == pytest.approx(same.run_mean, rel=1e-4)
    looser = replay_kl(out.trace, reverify(out.trace, make_rule("cactus", delta=3.0)))
    assert looser.rounds == same.rounds and looser.run_mean == same.run_mean
    assert looser.replay_mean > same.run_mean
