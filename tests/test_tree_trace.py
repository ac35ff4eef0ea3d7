"""A tree run's trace on the tiny pair: every row's p, q and h with every candidate kept exactly,
the emitted KL in the trace and the stats, the per-depth counts, the sweep's probe, the Decode
inspector's bars, and replay: under its own rule it reproduces every verdict, and under another
delta it is the walk of that rule on the same tree, q and coins."""

from __future__ import annotations

import pytest
import torch

import cactus_core.engine.decoding.tree_round as tree_round_module
from cactus_core.app.decode.replay import replay_kl, tree_replay_note
from cactus_core.app.shared.inspector import inspect_token
from cactus_core.app.shared.round_view import decided_rows, live_stats, trace_position
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.replay import reverify
from cactus_core.engine.decoding.trace import Trace
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.loading.models import with_feature_draft
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import make_rule
from cactus_core.maths.tree import DraftTree, children_of, verify_tree

SHAPE = TreeSettings(nodes=7, depth=3, width=2, branch=2, root_branch=3)
FULL = 512  # replay rows over the tiny vocabulary (259) keep every token: replay is exact


@pytest.fixture(scope="module")
def feature_pair(tiny_pair):
    return with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier))


@pytest.fixture(scope="module")
def recorded(feature_pair):
    """A cactus tree run with its engine outcomes (tree, q, verdict) kept per round."""
    outcomes = []
    real = tree_round_module.run_tree_round

    def keep(*args, **kwargs):
        out = real(*args, **kwargs)
        outcomes.append(out)
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(tree_round_module, "run_tree_round", keep)
    try:
        rule = make_rule("cactus", delta=0.5)
        dec = SpeculativeDecoder(feature_pair, rule, temperature=1.0, tree=SHAPE, replay_top_m=FULL)
        out = dec.generate("Tell me about cacti.", max_new_tokens=24, seed=3)
    finally:
        mp.undo()
    return out, outcomes, rule


def _tree_rounds(out):
    return [r for r in out.trace.rounds if not r.sampled]


def _tree(o) -> DraftTree:
    """A round outcome's draft tree: its verdict's nodes and the p rows."""
    v = o.verdict
    return DraftTree(torch.tensor(v.tokens), torch.tensor(v.parents), o.p[0])


def test_every_row_keeps_p_q_h_and_every_candidate(recorded):
    out, outcomes, rule = recorded
    rounds = _tree_rounds(out)
    assert len(rounds) == len(outcomes) > 0
    for rnd, o in zip(rounds, outcomes, strict=True):
        tree = _tree(o)
        kids = children_of(tree.parents.tolist())
        assert len(rnd.positions) == tree.size + 1
        decided = set(rnd.verdict.decided_rows)
        for r, pos in enumerate(rnd.positions):
            assert pos.q_ids and pos.replay_q_ids
            if not kids[r]:
                assert pos.draft_id is None and not pos.p_ids and not pos.replay_p_ids
                continue
            first = int(tree.tokens[kids[r][0]])
            assert pos.draft_id == first and pos.p_ids and pos.h_ids
            assert pos.p_n == pytest.approx(float(tree.draft_probs[r, first]), abs=1e-6)
            for i in kids[r]:  # every candidate's exact p and q in the replay rows
                t = int(tree.tokens[i])
                p = dict(zip(pos.replay_p_ids, pos.replay_p_probs, strict=True))
                q = dict(zip(pos.replay_q_ids, pos.replay_q_probs, strict=True))
                assert p[t] == pytest.approx(float(tree.draft_probs[r, t]), abs=1e-6)
                assert q[t] == pytest.approx(float(o.q[0, r, t]), abs=1e-6)
            if r not in decided:  # a row off the walk: nothing was judged there
                assert pos.kl_pi_q is None
                continue
            pi = emitted_distribution(rule, tree.draft_probs[r], o.q[0, r])
            assert pos.kl_pi_q == pytest.approx(float(kl(pi, o.q[0, r])), rel=1e-4, abs=1e-6)


def test_emitted_kl_in_the_trace_equals_the_stats(recorded):
    out, _, _ = recorded
    st = out.stats
    from_trace = sum(
        pos.kl_pi_q for r in out.trace.rounds for pos in r.decided_positions() if pos.kl_pi_q
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
        assert rr.fates_after == rnd.verdict.fates and not rr.flipped
        assert rr.after.emitted == rnd.verdict.emitted
        assert rr.next_after == rr.next_before


def test_replay_under_another_delta_is_that_rules_walk(recorded):
    out, outcomes, _ = recorded
    other = make_rule("cactus", delta=0.0)
    replay = reverify(out.trace, other)
    flips = 0
    for rr, o in zip(replay.rounds, outcomes, strict=True):
        walk = verify_tree(other, _tree(o), o.q[0], o.verdict.uniforms.float())
        assert rr.fates_after == walk.fates
        assert rr.after.emitted == walk.emitted
        # a(n) where the walk decided (the replay fills in the untried rows' first candidates)
        judged = [i for i, f in enumerate(walk.fates) if f != "unreached"]
        a = [rr.accept_probs_after[i] for i in judged]
        assert a == pytest.approx([walk.accept_probs[i] for i in judged], abs=1e-5)
        flips += len(rr.flipped)
    assert replay.tokens_per_call_after <= replay.tokens_per_call_before
    assert flips > 0
    assert tree_replay_note(out.trace) is not None


def test_the_inspector_and_the_playground_read_a_tree_rows(recorded):
    out, _, _ = recorded
    rnd = next(r for r in _tree_rounds(out) if r.branching)
    for slot in range(len(rnd.emitted_ids)):
        row = rnd.verdict.path_rows[slot]
        view = inspect_token(out.trace, rnd.index, row)
        assert view.frame is not None and view.labels and "q" in view.series
        if rnd.positions[row].draft_id is not None:
            assert {"p", "h", "residual"} <= set(view.series)
            assert view.kl_pi_q == rnd.positions[row].kl_pi_q
            assert any("coin u" in n for n in view.notes)
    pos = trace_position(out.trace, rnd.index, 0)
    assert pos.labels[pos.drafted] == out.trace.text(rnd.positions[0].draft_id)
    # the picker offers every row the walk decided at, the all-rejected one included
    offered = {(c.round_index, c.row) for c in decided_rows(out.trace)}
    for r in _tree_rounds(out):
        assert {(r.index, row) for row in r.verdict.decided_rows} <= offered


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
        verdict = rounds[rnd].verdict
        judged = len(verdict.path) + (verdict.last == "recovered")
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
