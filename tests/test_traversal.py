"""Traversal verification (maths.traversal), the tree form of `block`: its output follows the
verifier's joint law (χ², children drawn without replacement), a walk that forgets to update
the weights fails the same test, on a chain it is block verification coin for coin, its exact
expected length matches sampled trees and, like RRS's, is computed without coins; it accepts at
least as much as RRS on the same trees on average."""

from __future__ import annotations

import pytest
import torch
from test_tree_verify import (
    DRAWS,
    PARENTS,
    V,
    draft_trees,
    first_tokens,
    joint_pvalue,
    markov_pair,
)

from cactus_core.maths import traversal
from cactus_core.maths.rules import make_rule
from cactus_core.maths.tree import (
    DraftTree,
    expected_accepted,
    verify_tree,
    verify_tree_batch,
)
from cactus_core.maths.verify import verify


def test_traversal_emits_the_verifiers_joint_law():
    p_tab, q_tab = markov_pair()
    seqs = first_tokens(make_rule("block"), p_tab, q_tab, length=3, draws=DRAWS, seed=11)
    assert joint_pvalue(seqs, q_tab) > 1e-3


def test_weights_left_stale_after_a_rejection_fail_the_same_test(monkeypatch):
    def reject_without_reweighing(self, c):
        row = self.parents[c] + 1
        d, _ = self.drawn_from(c)
        r = (self.w[:, row].unsqueeze(-1) * self.q[:, row] - d).clamp_min(0.0)
        self.q[:, row] = r / r.sum(-1, keepdim=True).clamp_min(1e-300)
        self.left[self.rows, row, self.tokens[:, c]] = 0.0

    monkeypatch.setattr(traversal._Walk, "reject", reject_without_reweighing)
    p_tab, q_tab = markov_pair()
    seqs = first_tokens(make_rule("block"), p_tab, q_tab, length=3, draws=DRAWS, seed=11)
    assert joint_pvalue(seqs, q_tab) < 1e-6


def _random_rows(gen, b, rows):
    q = torch.softmax(2 * torch.randn(b, rows, V, generator=gen, dtype=torch.float64), -1)
    noise = torch.softmax(2 * torch.randn(b, rows, V, generator=gen, dtype=torch.float64), -1)
    return 0.5 * q + 0.5 * noise, q


def test_on_a_chain_it_is_block_verification_coin_for_coin():
    gen = torch.Generator().manual_seed(5)
    b, k = 4000, 4
    p, q = _random_rows(gen, b, k + 1)
    drafts = torch.stack(
        [torch.multinomial(p[:, i], 1, generator=gen)[:, 0] for i in range(k)], 1
    )  # [B, k]
    u = torch.rand(b, k, generator=gen, dtype=torch.float64)
    s = torch.rand(b, generator=gen, dtype=torch.float64)
    rule = make_rule("block")
    chain = verify(rule, p[:, :k], drafts, q, u, sample_uniforms=s)
    tree_coins = torch.cat([u, s[:, None].expand(-1, k + 1)], 1)  # the tree layout
    tree = verify_tree_batch(rule, drafts, list(range(-1, k - 1)), p, q, tree_coins)
    assert torch.equal(tree.num_accepted, chain.num_accepted)
    same = tree.emitted == chain.output_token_ids
    assert same.all(-1).double().mean() > 0.999  # a coin on a rounding edge may differ
    h = make_rule("block").stop_chances(p[:, :k], drafts, q)[1]
    exact = traversal.traversal_expected_accepted(drafts, list(range(-1, k - 1)), p, q)
    torch.testing.assert_close(exact, make_rule("block").expected_accepted(h))


@pytest.mark.parametrize("name", ["block", "sps"])
def test_the_exact_expected_length_is_the_sampled_mean(name):
    p_tab, q_tab = markov_pair(seed=8)
    gen = torch.Generator().manual_seed(2)
    b = 40_000
    tokens, row_ctx = draft_trees(p_tab, torch.zeros(b, dtype=torch.long), PARENTS, gen)
    p, q = p_tab[row_ctx], q_tab[row_ctx]
    rule = make_rule(name)
    exact = expected_accepted(rule, tokens, PARENTS, p, q)  # [B]
    sampled = verify_tree_batch(rule, tokens, PARENTS, p, q, generator=gen).num_accepted.double()
    se = float(sampled.std()) / b**0.5
    assert abs(float(sampled.mean() - exact.mean())) < 4 * se


def test_traversal_accepts_more_than_rrs_on_the_same_trees():
    p_tab, q_tab = markov_pair(seed=8)
    gen = torch.Generator().manual_seed(4)
    b = 20_000
    tokens, row_ctx = draft_trees(p_tab, torch.zeros(b, dtype=torch.long), PARENTS, gen)
    p, q = p_tab[row_ctx], q_tab[row_ctx]
    trav = expected_accepted(make_rule("block"), tokens, PARENTS, p, q)
    rrs = expected_accepted(make_rule("sps"), tokens, PARENTS, p, q)
    assert float(trav.mean()) > float(rrs.mean()) + 0.02


def test_a_verdict_reports_the_chance_of_each_judged_node_and_keeps_the_path():
    p_tab, q_tab = markov_pair()
    gen = torch.Generator().manual_seed(9)
    tokens, row_ctx = draft_trees(p_tab, torch.zeros(1, dtype=torch.long), PARENTS, gen)
    tree = DraftTree(tokens[0], torch.tensor(PARENTS), p_tab[row_ctx[0]])
    for seed in range(20):
        v = verify_tree(
            make_rule("block"),
            tree,
            q_tab[row_ctx[0]],
            generator=torch.Generator().manual_seed(seed),
        )
        order = traversal.post_order(PARENTS)
        judged = [i for i in order if v.fates[i] != "unreached" and i not in v.path]
        assert all(v.fates[i] == "rejected" for i in judged)
        if v.path:  # the tip was judged; the rest of the path was kept with it
            assert v.accept_probs[v.path[-1]] == v.accept_probs[v.path[-1]]
        assert v.emitted[:-1] == [v.tokens[i] for i in v.path]


def test_fly_still_cannot_judge_a_tree():
    p_tab, q_tab = markov_pair()
    tokens = torch.tensor([[1, 2]])
    rows = torch.zeros((1, 3), dtype=torch.long)
    with pytest.raises(ValueError, match="cannot judge a tree"):
        verify_tree_batch(make_rule("fly"), tokens, [-1, -1], p_tab[rows], q_tab[rows])
