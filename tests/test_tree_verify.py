"""Tree verification (maths.tree): the emitted tokens follow the verifier's joint law on a small
Markov pair, a deliberately wrong acceptance fails the same test, T = 0 is exact match, every
per-token rule emits its chain pi at a node whatever the number of candidates, and the
interface (DraftTree, the sampler, TreeVerdict) refuses bad input."""

from __future__ import annotations

import json
import math

import pytest
import torch
from scipy import stats

from cactus_core.maths import tree as tree_maths
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import RULE_NAMES, RULES, make_rule
from cactus_core.maths.tree import (
    DraftTree,
    TreeVerdict,
    coin_count,
    sample_without_replacement,
    tree_emitted,
    verify_tree,
    verify_tree_batch,
)

V, START = 6, 0
# Root with three candidates; depth 3; one to three children per node.
PARENTS = [-1, -1, -1, 0, 0, 1, 1, 2, 3, 3, 5, 7]
DRAWS = 200_000
# A non-default parameter per per-token rule, in the regime where it relaxes.
RELAXED = {
    "sps": {},
    "cactus": {"delta": 0.5},
    "cactus-exact": {"delta": 0.3},
    "cactus-budget": {"budget": 0.05},
    "cactus-adaptive": {"delta": 0.5},
    "tas": {"epsilon": 0.09, "alpha": 0.3},
    "topk": {"k_top": 2},
    "relaxed-topk": {"delta_r": 0.2, "K": 3},
    "interp": {"alpha": 0.4},
    "cascade": {"alpha": 0.5},
    "fuzzy": {"T": 0.3},
    "kl-judge": {"tau": 0.3},
    "optimal": {"budget": 0.05},
    "optimal-price": {"t": 1.0},
    "sglang": {"threshold_acc": 0.3, "threshold_single": 0.6},
}
assert set(RELAXED) == {n for n in RULE_NAMES if not RULES[n].caps.round_level}


def markov_pair(seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """p(·|previous), q(·|previous) [V, V]: the draft a noisy copy of the verifier."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.softmax(1.5 * torch.randn(V, V, generator=gen, dtype=torch.float64), -1)
    noise = torch.softmax(1.5 * torch.randn(V, V, generator=gen, dtype=torch.float64), -1)
    return 0.5 * q + 0.5 * noise, q


def draft_trees(p_tab, ctx, parents, gen):
    """B trees of one shape from the Markov draft, children drawn without replacement:
    (tokens [B, N], the context token of each row [B, N + 1])."""
    b, n = ctx.shape[0], len(parents)
    tokens = torch.full((b, n), -1, dtype=torch.long)
    kids = tree_maths.children_of(parents)
    row_ctx = torch.empty((b, n + 1), dtype=torch.long)
    row_ctx[:, 0] = ctx
    for r, children in enumerate(kids):  # rows in topological order: a parent comes first
        if r > 0:
            row_ctx[:, r] = tokens[:, r - 1]
        if children:
            ids = sample_without_replacement(
                p_tab[row_ctx[:, r]], count=len(children), generator=gen
            )
            tokens[:, children] = ids
    return tokens, row_ctx


def first_tokens(rule, p_tab, q_tab, length: int, draws: int, seed: int) -> torch.Tensor:
    """The first `length` tokens of `draws` independent generations from START, [B, length]:
    one tree round for every generation, then more rounds for those still short."""
    gen = torch.Generator().manual_seed(seed)
    out = torch.full((draws, length), -1, dtype=torch.long)
    have = torch.zeros(draws, dtype=torch.long)  # tokens so far
    ctx = torch.full((draws,), START)
    todo = torch.arange(draws)
    while todo.numel():
        tokens, row_ctx = draft_trees(p_tab, ctx[todo], PARENTS, gen)
        rows = (p_tab[row_ctx], q_tab[row_ctx])
        res = verify_tree_batch(rule, tokens, PARENTS, *rows, generator=gen, validate=False)
        for j in range(res.emitted.shape[1]):
            put = (res.emitted[:, j] >= 0) & (have[todo] < length)
            idx = todo[put]
            out[idx, have[idx]] = res.emitted[put, j]
            have[idx] += 1
        ctx[todo] = res.last
        todo = todo[have[todo] < length]
    return out


def joint_pvalue(seqs: torch.Tensor, q_tab: torch.Tensor) -> float:
    """χ² of the observed sequences [B, L] against the verifier's law from START."""
    law = q_tab[START]  # over V^j sequences, first token most significant
    codes = seqs[:, 0].clone()
    for j in range(1, seqs.shape[1]):
        law = (law.unsqueeze(-1) * q_tab[torch.arange(law.numel()) % V]).reshape(-1)
        codes = codes * V + seqs[:, j]
    counts = torch.bincount(codes, minlength=law.numel()).double()
    expected = law * seqs.shape[0]
    keep = expected >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum().view(1)])
    exp = torch.cat([expected[keep], expected[~keep].sum().view(1)])
    obs, exp = obs[exp > 0], exp[exp > 0]
    return float(stats.chisquare(obs.numpy(), (exp * obs.sum() / exp.sum()).numpy()).pvalue)


def test_the_tree_emits_the_verifiers_joint_law():
    p_tab, q_tab = markov_pair()
    seqs = first_tokens(make_rule("sps"), p_tab, q_tab, length=3, draws=DRAWS, seed=11)
    assert joint_pvalue(seqs, q_tab) > 1e-3


@pytest.mark.parametrize(
    "wrong",
    [
        # later candidates judged against p itself, as if drawn with replacement
        ("_drop", lambda left, c: left),
        # the residual kept after a rejection instead of normalise(max(0, r − p))
        ("_next_residual", lambda r, p_i: r),
    ],
    ids=["not-renormalised", "residual-not-updated"],
)
def test_a_wrong_acceptance_fails_the_same_test(monkeypatch, wrong):
    name, fake = wrong
    monkeypatch.setattr(tree_maths, name, fake)
    p_tab, q_tab = markov_pair()
    seqs = first_tokens(make_rule("sps"), p_tab, q_tab, length=3, draws=DRAWS, seed=11)
    assert joint_pvalue(seqs, q_tab) < 1e-6


@pytest.mark.parametrize("name", list(RELAXED))
def test_each_per_token_rule_emits_its_chain_pi_at_a_node(name):
    """A node with three candidates, first emitted token against emitted_distribution."""
    gen = torch.Generator().manual_seed(hash(name) % 1000)
    p = torch.softmax(1.5 * torch.randn(V, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(1.5 * torch.randn(V, generator=gen, dtype=torch.float64), -1)
    rule = make_rule(name, **RELAXED[name])
    b, parents = 30_000, [-1, -1, -1]
    tokens = sample_without_replacement(p.expand(b, V), count=3, generator=gen)
    rows = lambda x: x.expand(b, 4, V)  # noqa: E731 (the leaves' rows are never read)
    res = verify_tree_batch(rule, tokens, parents, rows(p), rows(q), generator=gen)
    pi = emitted_distribution(rule, p, q)
    counts = torch.bincount(res.emitted[:, 0], minlength=V).double()
    assert counts[pi == 0].sum() == 0
    keep = pi * b >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum().view(1)])
    exp = torch.cat([pi[keep], pi[~keep].sum().view(1)]) * b
    obs, exp = obs[exp > 0], exp[exp > 0]
    if obs.numel() > 1:
        assert stats.chisquare(obs.numpy(), (exp * obs.sum() / exp.sum()).numpy()).pvalue > 1e-3
    # more candidates accept more, without moving pi
    chain = verify_tree_batch(
        rule, tokens[:, :1], [-1], p.expand(b, 2, V), q.expand(b, 2, V), generator=gen
    )
    assert (res.num_accepted > 0).double().mean() >= (chain.num_accepted > 0).double().mean() - 0.01


@pytest.mark.parametrize("name", ["sps", "block"])
def test_greedy_trees_are_exact_match(name):
    """One-hot p and q (T = 0): the walk (RRS, or block's traversal) follows the child that
    is the verifier's argmax and ends with the argmax, whatever else the tree holds (later
    children have p = 0 there)."""
    gen = torch.Generator().manual_seed(2)
    b, n = 2_000, len(PARENTS)
    kids = tree_maths.children_of(PARENTS)
    tokens = torch.zeros((b, n), dtype=torch.long)
    for children in kids:  # distinct siblings
        if children:
            perm = torch.rand((b, V), generator=gen).argsort(-1)[:, : len(children)]
            tokens[:, children] = perm
    # the draft's argmax is a row's first child, as a greedy drafter puts it
    first = torch.tensor([c[0] if c else 0 for c in kids])
    has = torch.tensor([bool(c) for c in kids])
    p_top = torch.where(has, tokens[:, first], torch.randint(V, (b, n + 1), generator=gen))
    # the verifier's argmax: often one of the children, so that paths go deep
    pick = torch.randint(3, (b, n + 1), generator=gen)
    q_top = torch.where(pick < 2, p_top, torch.randint(V, (b, n + 1), generator=gen))
    hot = torch.nn.functional.one_hot
    p, q = hot(p_top, V).double(), hot(q_top, V).double()
    res = verify_tree_batch(make_rule(name), tokens, PARENTS, p, q, generator=gen)
    assert res.num_accepted.max() == 3
    for i in range(b):
        row, want = 0, []
        while True:
            want.append(int(q_top[i, row]))
            match = [c for c in kids[row] if tokens[i, c] == q_top[i, row]]
            if not match:
                break
            row = match[0] + 1
        assert res.emitted[i][res.emitted[i] >= 0].tolist() == want


def one_tree(seed: int = 0) -> tuple[DraftTree, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    p_tab, q_tab = markov_pair(seed)
    tokens, row_ctx = draft_trees(p_tab, torch.tensor([START]), PARENTS, gen)
    tree = DraftTree(tokens[0], torch.tensor(PARENTS), p_tab[row_ctx[0]])
    return tree, q_tab[row_ctx[0]]


def test_a_verdict_replays_from_its_coins_and_round_trips_through_json():
    tree, q = one_tree()
    rule = make_rule("cactus", delta=0.5)
    verdict = verify_tree(rule, tree, q, generator=torch.Generator().manual_seed(4))
    assert len(verdict.uniforms) == coin_count(PARENTS) == len(PARENTS) + tree.depth + 1
    again = verify_tree(rule, tree, q, verdict.uniforms)
    assert again.to_dict() == verdict.to_dict()
    back = TreeVerdict.from_dict(json.loads(json.dumps(verdict.to_dict(), allow_nan=False)))
    assert back.to_dict() == verdict.to_dict()
    # the fates: the path accepted, every judged node has a(n), unreached ones none
    assert [i for i, f in enumerate(verdict.fates) if f == "accepted"] == verdict.path
    for a, f in zip(verdict.accept_probs, verdict.fates, strict=True):
        assert math.isnan(a) == (f == "unreached")
    # another rule from the same coins: a first candidate with a(n) ≥ its lossless a(n) and
    # the same coin is accepted by both
    lossless = verify_tree(make_rule("sps"), tree, q, verdict.uniforms)
    assert lossless.coins == verdict.coins


def test_tree_emitted_is_pi_at_judged_nodes_and_q_at_leaves():
    tree, q = one_tree(1)
    rule = make_rule("cactus", delta=1.0)
    pi = tree_emitted(rule, tree, q)
    has = {pa + 1 for pa in PARENTS}
    for r in range(len(PARENTS) + 1):
        want = emitted_distribution(rule, tree.draft_probs[r], q[r]) if r in has else q[r]
        torch.testing.assert_close(pi[r], want)
    torch.testing.assert_close(tree_emitted(make_rule("sps"), tree, q), q)


def test_sample_without_replacement():
    p = torch.tensor([0.5, 0.0, 0.3, 0.2], dtype=torch.float64)
    ids = sample_without_replacement(p, torch.tensor([0.1, 0.1, 0.1, 0.1, 0.9]))
    assert ids.tolist() == [0, 2, 3, -1, -1]  # three tokens have mass: the rest is −1
    same = sample_without_replacement(p, torch.tensor([0.7, 0.2]))
    assert same.tolist() == sample_without_replacement(p, torch.tensor([0.7, 0.2])).tolist()
    # the law of ordered pairs: p(a)·p(b)/(1 − p(a))
    gen = torch.Generator().manual_seed(0)
    pairs = sample_without_replacement(p.expand(50_000, 4), count=2, generator=gen)
    codes = torch.bincount(pairs[:, 0] * 4 + pairs[:, 1], minlength=16).double()
    law = (p[:, None] * p[None, :] / (1 - p[:, None])).fill_diagonal_(0).reshape(-1)
    keep = law > 0
    assert codes[~keep].sum() == 0
    assert stats.chisquare(codes[keep].numpy(), (law[keep] * 50_000).numpy()).pvalue > 1e-3


def test_bad_trees_and_rules_are_refused():
    p = torch.full((3, V), 1 / V)
    with pytest.raises(ValueError, match="earlier node"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 1]), p)
    with pytest.raises(ValueError, match="distinct"):
        DraftTree(torch.tensor([1, 1]), torch.tensor([-1, -1]), p)
    with pytest.raises(ValueError, match=r"\[N \+ 1, V\]"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), p[:2])
    with pytest.raises(ValueError, match="outside"):
        DraftTree(torch.tensor([1, V]), torch.tensor([-1, 0]), p)
    tree = DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), p)
    with pytest.raises(ValueError, match="cannot judge a tree"):
        verify_tree(make_rule("fly"), tree, p)
    with pytest.raises(ValueError, match="sum to 1"):
        verify_tree(make_rule("sps"), tree, p * 2)
    with pytest.raises(ValueError, match="shape"):
        verify_tree(make_rule("sps"), tree, p, torch.zeros(2))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        verify_tree(make_rule("sps"), tree, p, torch.ones(coin_count([-1, 0])))


def test_a_bad_verdict_dict_is_refused():
    tree, q = one_tree()
    good = verify_tree(
        make_rule("sps"), tree, q, generator=torch.Generator().manual_seed(1)
    ).to_dict()
    cases = {
        "missing": {k: v for k, v in good.items() if k != "h"},
        "fate": {**good, "fates": ["maybe"] * len(PARENTS)},
        "path": {**good, "path": [5], "emitted": [good["tokens"][5], 0]},
        "coin": {**good, "coins": [1.5] * len(PARENTS)},
        "last": {**good, "last": "sampled"},
        "length": {**good, "p": good["p"][:-1]},
    }
    for case, raw in cases.items():
        with pytest.raises(ValueError):
            TreeVerdict.from_dict(raw)
        assert case
