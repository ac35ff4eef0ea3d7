"""Draft trees in the engine, on the tiny random pair with a tiny feature draft: the verifier's
one tree-masked pass equals a chain pass along every path, the KV caches keep exactly the
accepted path, greedy tree decoding is the verifier's own greedy, and a tree run's trace,
settings and refusals. (Greedy on the embedded pair: tests/test_decoder_embedded.py.)"""

from __future__ import annotations

import argparse

import pytest
import torch

import cactus_core.engine.decoding.tree_round as tree_round
from cactus_core.cli import add_tree_args, tree_from_args
from cactus_core.engine.decoding.caches import open_caches
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.trace import Trace
from cactus_core.engine.drafting.feature_drafting import FeatureCache, FeatureDrafter
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.loading.models import with_feature_draft
from cactus_core.engine.runtime.kv_cache import SequenceCache
from cactus_core.maths.rules import lossless_rule
from cactus_core.maths.sampling import SamplingSettings
from tests.near_ties import assert_greedy_agrees
from tests.test_decoder import greedy_reference

PROMPTS = ["Tell me about cacti.", "Why is the sky blue?"]
ATOL = 1e-4  # float32, one tree-masked forward against a causal one


@pytest.fixture(scope="module")
def feature_pair(tiny_pair):
    return with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier))


def _path(parents: list[int], j: int) -> list[int]:
    out = []
    while j >= 0:
        out.append(j)
        j = parents[j]
    return out[::-1]


def test_one_tree_pass_equals_a_chain_pass_along_every_path(tiny_pair):
    model = tiny_pair.verifier
    vocab = model.get_output_embeddings().out_features
    context = list(range(5, 24))
    tokens = [30, 41, 42, 43, 51, 52, 61]
    parents = [-1, 0, 0, 0, 1, 1, 4]  # column 0 follows the context
    cache = SequenceCache(model, vocab)
    cache.prefill([context])
    tree_logits = cache.step_tree(torch.tensor([tokens]), parents)[0]  # [7, V]
    for j in range(len(tokens)):
        cols = _path(parents, j)
        chain = SequenceCache(model, vocab)
        chain.prefill([context])
        logits = chain.step(torch.tensor([[tokens[i] for i in cols]]), None, len(cols))
        assert torch.allclose(tree_logits[j], logits[0, -1], atol=ATOL), j
    with pytest.raises(ValueError, match="parent comes before"):
        cache.step_tree(torch.tensor([[1, 2]]), [-1, 1])


def _accept_along_the_draft(monkeypatch) -> None:
    """verify_tree judged against q := p: a node's first child is always accepted, so a round
    accepts a path (acceptance on the random tiny pair is near 0 otherwise)."""
    real = tree_round.verify_tree

    def along(judge, tree, q, *coins, **options):
        return real(judge, tree, tree.draft_probs, *coins, **options)

    monkeypatch.setattr(tree_round, "verify_tree", along)


def test_the_caches_keep_only_the_accepted_path(feature_pair, monkeypatch):
    """After a round, the verifier's KV cache and the draft's equal a fresh prefill of the
    committed text (the draft's: read from a fresh verifier's features)."""
    _accept_along_the_draft(monkeypatch)
    vocab = SpeculativeDecoder(feature_pair, "sps").vocab
    prompt = feature_pair.encode_prompt(PROMPTS[0])
    # At T = 0 the first child is the draft's top token, the one node expanded (width 1): the
    # accepted path runs through the whole depth, past nodes with siblings.
    settings = TreeSettings(nodes=9, depth=4, width=1, branch=2, root_branch=3)
    sampling = SamplingSettings(temperature=0.0)
    caches = open_caches(feature_pair, vocab, [prompt], True, settings, greedy=True)
    verifier, drafter = caches.verifier, caches.drafter
    gen = torch.Generator().manual_seed(0)
    coins = tree_round.draw_tree_coins(gen, settings, torch.device("cpu"))
    out = tree_round.run_tree_round(lossless_rule(), verifier, drafter, prompt[-1], coins, sampling)
    assert len(out.verdict.path) == 4 and out.verdict.size == 9
    committed = prompt + list(out.verdict.emitted)
    fresh = FeatureCache(feature_pair.verifier, vocab, feature_pair.feature_draft.feature_layers)
    fresh.prefill([committed[:-1]])
    assert verifier.lengths == fresh.lengths
    for got, want in zip(verifier.cache.layers, fresh.cache.layers, strict=True):
        assert torch.allclose(got.keys, want.keys, atol=ATOL)
        assert torch.allclose(got.values, want.values, atol=ATOL)
    row = drafter.rows.rows[0]
    ref = FeatureDrafter(feature_pair.feature_draft, vocab)
    ref.prefill(committed, fresh.features)
    assert row.length == ref.length == len(committed) - 1
    mine, theirs = row.cache.keys + row.cache.values, ref.cache.keys + ref.cache.values
    for got, want in zip(mine, theirs, strict=True):
        assert torch.allclose(got, want, atol=ATOL)
    assert torch.allclose(row.logits, ref.logits, atol=ATOL)


@pytest.mark.kernels
def test_greedy_tree_decoding_is_the_verifiers_own_greedy(feature_pair, monkeypatch):
    dec = SpeculativeDecoder(feature_pair, "cactus", temperature=0.0, tree=TreeSettings())
    for seed, prompt in enumerate(PROMPTS):
        out = dec.generate(prompt, max_new_tokens=20, seed=seed)
        ids = feature_pair.encode_prompt(prompt)
        ref = greedy_reference(feature_pair.verifier, ids, 20, dec.eos_ids)
        assert_greedy_agrees(out.token_ids, ref, feature_pair.verifier, ids, dec.eos_ids)
        assert out.trace.meta["tree"] == TreeSettings().to_dict()


def test_a_tree_run_records_its_trees_and_counts(feature_pair, monkeypatch):
    _accept_along_the_draft(monkeypatch)
    settings = TreeSettings(nodes=6, depth=3)
    dec = SpeculativeDecoder(feature_pair, "cactus", temperature=0.7, tree=settings)
    out = dec.generate(PROMPTS[1], max_new_tokens=16, seed=2)
    st = out.stats
    assert st.new_tokens == 16 == len(out.token_ids)
    assert st.verifier_calls == st.rounds == len(out.trace.rounds)
    assert st.tokens_per_call > 1  # every round accepts a path (q := p)
    for rnd in out.trace.rounds:
        if rnd.sampled:  # the verifier-only steps near the budget's end
            continue
        assert len(rnd.verdict.fates) == settings.nodes == rnd.k
        assert rnd.num_accepted == len(rnd.verdict.path) <= settings.depth
        kept = len(rnd.emitted_ids)  # the last round may be cut at the token budget
        path = [rnd.draft_ids[i] for i in rnd.verdict.path]
        assert rnd.emitted_ids[: rnd.num_accepted] == path[:kept]
    again = Trace.from_json(out.trace.to_json())
    for a, b in zip(again.rounds, out.trace.rounds, strict=True):
        # JSON writes the NaN a(n) of unreached nodes as null: compare the rest.
        same = ("path", "emitted", "fates", "tokens", "parents")
        assert all(getattr(a.verdict, f) == getattr(b.verdict, f) for f in same)
    broken = out.trace.to_dict()
    broken["rounds"][0]["verdict"] = {"path": "nope"}
    with pytest.raises(ValueError, match="verdict"):
        Trace.from_dict(broken)


def test_tree_settings_and_refusals(tiny_pair, feature_pair):
    with pytest.raises(ValueError, match="nodes must be an integer in"):
        TreeSettings(nodes=0)
    with pytest.raises(ValueError, match="unknown tree settings"):
        TreeSettings.from_dict({"nodes": 4, "leaves": 2})
    assert TreeSettings.from_dict(TreeSettings(depth=3).to_dict()) == TreeSettings(depth=3)
    with pytest.raises(ValueError, match="needs a feature draft"):
        SpeculativeDecoder(tiny_pair, "sps", tree=TreeSettings())
    dec = SpeculativeDecoder(feature_pair, "sps", tree=TreeSettings())
    with pytest.raises(ValueError, match="one sequence at a time"):
        dec.generate(PROMPTS, max_new_tokens=4)
    parser = argparse.ArgumentParser()
    add_tree_args(parser, "trees")
    assert tree_from_args(parser.parse_args([])) is None
    args = parser.parse_args(["--tree", "--tree-nodes", "8", "--tree-depth", "3"])
    assert tree_from_args(args) == TreeSettings(nodes=8, depth=3)
