"""The decoder driving a feature-conditioned draft (engine/drafting/feature_drafting.py) on
the tiny random pair, with `FeatureDraft.tiny_for(verifier)` as the draft.

What is pinned down: greedy output is the verifier's own; the p the trace records is the
draft's softmax on the verifier's real features of the committed positions (so the draft saw
the right features); the features fed after each round are exactly the verifier's pre-norm
states of the committed positions, and the draft's cache rolls back to them; the trace and
lazy-head settings change nothing; every rule, replay, streaming and the probe run; the pair's
identity names the draft; a batch equals its rows alone; the verifier's norm keeps no hook; a
multi-depth draft is fed the earlier layer's outputs beside the top features, and decodes exactly.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

from cactus_core.engine.decoding.caches import open_caches
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.replay import reverify
from cactus_core.engine.drafting.feature_drafting import (
    FeatureDrafter,
    FeatureDrafters,
)
from cactus_core.engine.loading.feature_draft import DraftKVCache, FeatureDraft
from cactus_core.engine.loading.models import load_pair, with_feature_draft
from cactus_core.maths.rules import RULE_NAMES, make_rule
from tests.near_ties import assert_greedy_agrees
from tests.test_decoder import greedy_reference

PROMPTS = ["Tell me about cacti.", "Why is the sky blue?", "Write a haiku about rain."]
ATOL = 1e-4  # a KV-cached forward against one full forward, float32


@pytest.fixture(scope="module")
def feature_pair(tiny_pair):
    return with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier))


def _captured(verifier, ids: list[int], register) -> torch.Tensor:
    """One plain full forward with the hook `register(put)` installs; what it put first."""
    seen: list[torch.Tensor] = []
    hook = register(seen.append)
    try:
        with torch.no_grad():
            verifier(torch.tensor([ids]))
    finally:
        hook.remove()
    return seen[0]


def prenorm_features(verifier, ids: list[int]) -> torch.Tensor:
    """One plain full forward; the input of the final norm, [1, T, D]."""
    norm = verifier.model.norm
    return _captured(
        verifier, ids, lambda put: norm.register_forward_pre_hook(lambda m, a: put(a[0]))
    )


def layer_outputs(verifier, ids: list[int], layer: int) -> torch.Tensor:
    """One plain full forward; the output of decoder layer `layer`, [1, T, D]."""
    module = verifier.model.layers[layer]
    return _captured(
        verifier,
        ids,
        lambda put: module.register_forward_hook(
            lambda m, a, out: put(out[0] if isinstance(out, tuple) else out)
        ),
    )


@pytest.fixture
def feeds(monkeypatch):
    """Every FeatureDrafter.feed call: start position, features, next ids, and the cache
    length and committed length right after it (the first call is the prefill's)."""
    calls: list[dict] = []
    original = FeatureDrafter.feed

    def spy(self, features, next_ids):
        start = self.length
        original(self, features, next_ids)
        calls.append(
            {
                "start": start,
                "features": features.clone(),
                "ids": next_ids[0].tolist(),
                "cache": self.cache.length,
                "length": self.length,
            }
        )

    monkeypatch.setattr(FeatureDrafter, "feed", spy)
    return calls


@pytest.mark.kernels
@pytest.mark.parametrize("lazy", [True, False])
@pytest.mark.parametrize("rule", ["sps", "cactus"])
def test_greedy_equals_the_verifiers_own_greedy(feature_pair, rule, lazy):
    dec = SpeculativeDecoder(
        feature_pair, rule, k=4, temperature=0.0, record_trace=False, lazy_head=lazy
    )
    for seed, prompt in enumerate(PROMPTS):
        out = dec.generate(prompt, max_new_tokens=24, seed=seed)
        ids = feature_pair.encode_prompt(prompt)
        ref = greedy_reference(feature_pair.verifier, ids, 24, dec.eos_ids)
        assert_greedy_agrees(out.token_ids, ref, feature_pair.verifier, ids, dec.eos_ids)
        assert out.trace.meta["draft"] == feature_pair.feature_draft_name


def test_p_rows_are_the_drafts_softmax_on_the_verifiers_real_features(feature_pair):
    """Recompute each round's p from scratch: the draft reads the verifier's features of the
    tokens committed before the round (one full forward), then chains its own features over
    the round's drafted ids. The trace's top-N p rows must match."""
    dec = SpeculativeDecoder(feature_pair, "sps", k=4, temperature=0.7, trace_top_n=20)
    draft = feature_pair.feature_draft
    out = dec.generate(PROMPTS[0], max_new_tokens=40, seed=1)
    tokens = out.prompt_ids + out.token_ids
    feats = prenorm_features(feature_pair.verifier, tokens)  # [1, L, D]
    n = len(out.prompt_ids)
    checked = 0
    with torch.no_grad():
        for rnd in out.trace.rounds:
            cache = DraftKVCache()
            logits, f = draft(feats[:, : n - 1], torch.tensor([tokens[1:n]]), cache, 0)
            for j, pos in enumerate(rnd.positions[: rnd.k]):
                p = dec.sampling.probs(logits[:, -1].float())[0]  # [V]
                assert pos.p_probs == pytest.approx(p[pos.p_ids].tolist(), abs=ATOL)
                checked += 1
                d = torch.tensor([[rnd.draft_ids[j]]])
                logits, f = draft(f[:, -1:], d, cache, cache.length)
            n += rnd.num_accepted + 1
    assert checked >= 4 * len(out.trace.rounds) - 4  # the last round may draft fewer


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy-head", "full-head"])
def test_fed_features_are_the_verifiers_prenorm_states_of_committed_positions(
    feature_pair, feeds, lazy
):
    dec = SpeculativeDecoder(
        feature_pair, "sps", k=4, temperature=1.0, record_trace=False, lazy_head=lazy
    )
    out = dec.generate(PROMPTS[1], max_new_tokens=48, seed=0)
    tokens = out.prompt_ids + out.token_ids
    ref = prenorm_features(feature_pair.verifier, tokens)  # [1, L, D]
    rounds = out.trace.rounds
    assert len(feeds) == len(rounds) + 1  # the prefill, then one feed per round
    assert [c["features"].shape[1] for c in feeds[1:]] == [r.num_accepted + 1 for r in rounds]
    assert any(r.num_accepted > 0 for r in rounds)
    position = 0
    for call in feeds:
        t = call["features"].shape[1]
        assert call["start"] == position  # contiguous: no position skipped or read twice
        torch.testing.assert_close(
            call["features"], ref[:, position : position + t], atol=ATOL, rtol=0
        )
        assert call["ids"] == tokens[position + 1 : position + 1 + t]
        position += t
    assert position == len(tokens) - 1 or out.stats.stop_reason == "eos"


def test_draft_cache_rolls_back_to_the_committed_positions(feature_pair, feeds, monkeypatch):
    appended = []  # the cache length when each round's verification starts
    original = FeatureDrafter.propose

    def spy(self, coins, probs):
        draft = original(self, coins, probs)
        appended.append(self.cache.length - self.length)
        return draft

    monkeypatch.setattr(FeatureDrafter, "propose", spy)
    dec = SpeculativeDecoder(feature_pair, "sps", k=4, temperature=1.0, record_trace=False)
    out = dec.generate(PROMPTS[2], max_new_tokens=48, seed=2)
    rounds = out.trace.rounds
    committed = len(out.prompt_ids)
    assert feeds[0]["cache"] == feeds[0]["length"] == committed - 1
    for rnd, call in zip(rounds, feeds[1:], strict=True):
        committed += rnd.num_accepted + 1
        # The verifier's cache holds every committed token but the last; so does the draft's.
        assert call["cache"] == call["length"] == committed - 1
    assert appended == [r.k - 1 for r in rounds]  # drafting appended k - 1, then rolled back
    assert any(r.num_accepted < r.k for r in rounds)  # rejections happened


def test_trace_and_lazy_head_settings_give_the_same_tokens(feature_pair):
    kw = {"k": 3, "temperature": 0.8, "top_p": 0.95}
    runs = [
        SpeculativeDecoder(feature_pair, "cactus", record_trace=True, **kw),
        SpeculativeDecoder(feature_pair, "cactus", record_trace=False, lazy_head=True, **kw),
        SpeculativeDecoder(feature_pair, "cactus", record_trace=False, lazy_head=False, **kw),
    ]
    for seed in (0, 1):
        outs = [dec.generate(PROMPTS[seed], max_new_tokens=32, seed=seed) for dec in runs]
        assert outs[0].token_ids == outs[1].token_ids == outs[2].token_ids
        fates = [[r.draft_fates for r in o.trace.rounds] for o in outs]
        assert fates[0] == fates[1] == fates[2]


@pytest.mark.parametrize("rule", RULE_NAMES)
@pytest.mark.usefixtures("tiny_judge")
def test_every_rule_runs_with_replay_streaming_and_the_probe(feature_pair, rule):
    seen = []
    dec = SpeculativeDecoder(
        feature_pair, make_rule(rule), k=3, temperature=0.9, probe=lambda *a: seen.append(a)
    )
    out = dec.generate(PROMPTS[0], max_new_tokens=16, seed=4)
    assert len(out.token_ids) == 16 or out.stats.stop_reason == "eos"
    assert len(seen) == len(out.trace.rounds)
    replay = reverify(out.trace, "sps")
    assert len(replay.rounds) == len(out.trace.rounds)
    stream = dec.rounds(PROMPTS[0], max_new_tokens=16, seed=4)
    streamed = list(stream)
    assert stream.output.token_ids == out.token_ids
    assert [r.emitted_ids for r in streamed] == [r.emitted_ids for r in out.trace.rounds]


def test_one_token_prompt_and_no_hook_left_behind(feature_pair):
    norm = feature_pair.verifier.model.norm
    dec = SpeculativeDecoder(feature_pair, "sps", k=4, temperature=0.0)
    ids = feature_pair.encode_prompt("a", chat_template=False)
    assert len(ids) == 1
    out = dec.generate("a", max_new_tokens=12, chat_template=False)
    ref = greedy_reference(feature_pair.verifier, ids, 12, dec.eos_ids)
    assert_greedy_agrees(out.token_ids, ref, feature_pair.verifier, ids, dec.eos_ids)
    stream = iter(dec.rounds(PROMPTS[0], max_new_tokens=30))
    next(stream)
    stream.close()  # abandoned mid-generation
    assert not norm._forward_pre_hooks


@pytest.mark.parametrize("rule", ["sps", "cactus"])
def test_a_batch_equals_its_rows_alone(feature_pair, rule, monkeypatch):
    """Row i of a batch is prompt i alone with seed + i, as for an independent draft: the
    verifier runs batched (right-padded prefill, holes after uneven acceptance), each row's
    draft reads its own features, and finished rows leave the batch."""
    dec = SpeculativeDecoder(feature_pair, rule, k=4, temperature=0.9)
    prompts = [*PROMPTS, "a"]  # prompt lengths differ; "a" is one token with no chat template
    batch_sizes = []
    original = FeatureDrafters.propose

    def spy(self, coins, probs):
        batch_sizes.append(len(self.rows))
        return original(self, coins, probs)

    monkeypatch.setattr(FeatureDrafters, "propose", spy)
    seen = []
    outs = dec.generate(
        prompts, 24, seed=5, chat_template=False, on_round=lambda r, i: seen.append(i)
    )
    alone = [dec.generate(p, 24, seed=5 + i, chat_template=False) for i, p in enumerate(prompts)]
    assert [o.token_ids for o in outs] == [o.token_ids for o in alone]
    assert [[r.draft_fates for r in o.trace.rounds] for o in outs] == [
        [r.draft_fates for r in o.trace.rounds] for o in alone
    ]
    assert batch_sizes[0] == 4 and len(set(batch_sizes)) > 1  # rows finished at different rounds
    assert sum(o.stats.rejected_tokens for o in outs) > 0  # holes after uneven acceptance
    assert seen.count(1) == len(outs[1].trace.rounds)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        dec.generate([PROMPTS[0], " "], max_new_tokens=4)  # every prompt checked first
    plain = dec.generate_autoregressive(PROMPTS[:2], max_new_tokens=8)
    assert [len(o.token_ids) for o in plain] == [8, 8]


def test_a_padded_prefill_in_pieces_gives_every_row_its_own_features(feature_pair, monkeypatch):
    """A long padded batch is prefilled in pieces of columns; the drafters still get each
    row's prefix features, equal to a plain forward over that row alone."""
    from cactus_core.engine.runtime import kv_cache

    monkeypatch.setattr(kv_cache, "MASK_BUDGET", 64)  # pieces of PIECE_MIN columns
    ids = [list(range(5, 45)), list(range(7, 20))]
    vocab = SpeculativeDecoder(feature_pair, "sps").vocab
    caches = open_caches(feature_pair, vocab, ids, speculative=True)
    verifier, drafters = caches.verifier, caches.drafter
    assert verifier.features.shape[1] == 39
    for row, tokens in zip(drafters.rows, ids, strict=True):
        assert row.length == len(tokens) - 1
    for b, tokens in enumerate(ids):
        want = prenorm_features(feature_pair.verifier, tokens[:-1])[0]
        got = verifier.features[b, : len(tokens) - 1]
        assert torch.allclose(got, want, atol=ATOL)


def test_identity_names_the_feature_draft_and_folders_load(tiny_pair, tiny_pair_dirs, tmp_path):
    a = with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier, seed=0))
    b = with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier, seed=1))
    assert tiny_pair.feature_draft is None and "feature_draft" not in tiny_pair.identity
    assert a.identity.startswith(tiny_pair.identity.rsplit("|", 1)[0] + "|feature_draft=")
    assert a.identity != b.identity
    with pytest.raises(ValueError, match="another verifier"):
        with_feature_draft(
            dataclasses.replace(tiny_pair, verifier=tiny_pair.draft), a.feature_draft
        )

    a.feature_draft.save(tmp_path / "fd")
    from_folder = with_feature_draft(tiny_pair, tmp_path / "fd")
    assert from_folder.feature_draft_name == str((tmp_path / "fd").resolve())
    assert from_folder.identity != a.identity  # named by the folder's files now
    loaded = load_pair(*tiny_pair_dirs, device="cpu", feature_draft=tmp_path / "fd")
    assert loaded.draft is not None and loaded.feature_draft is not None
    assert "feature_draft=" in loaded.identity and loaded.identity.endswith(
        "@torch.float32|dtype=torch.float32"
    )
    # The draft drafts in the verifier's dtype, and the identity says so.
    bf16 = load_pair(*tiny_pair_dirs, device="cpu", dtype="bfloat16", feature_draft=tmp_path / "fd")
    assert bf16.feature_draft.dtype == torch.bfloat16
    assert bf16.identity.endswith("@torch.bfloat16|dtype=torch.bfloat16")
    kw = {"k": 4, "temperature": 0.7, "record_trace": False}
    want = SpeculativeDecoder(a, "sps", **kw).generate(PROMPTS[0], max_new_tokens=24, seed=5)
    for pair in (from_folder, loaded):
        got = SpeculativeDecoder(pair, "sps", **kw).generate(PROMPTS[0], max_new_tokens=24, seed=5)
        assert got.token_ids == want.token_ids


def test_threads_sharing_the_verifier_keep_their_own_features(tiny_pair, feature_pair):
    """The app decodes for several sessions at once on one cached verifier: a thread's
    forwards must not overwrite another thread's captured features."""
    kw = {"k": 4, "temperature": 0.9, "record_trace": False}
    jobs = [(feature_pair, p, s) for s, p in enumerate(PROMPTS)] + [(tiny_pair, PROMPTS[0], 7)]
    alone = [
        SpeculativeDecoder(pair, "sps", **kw).generate(p, max_new_tokens=40, seed=s).token_ids
        for pair, p, s in jobs
    ]
    results: dict[int, list[int]] = {}

    def run(i: int) -> None:
        pair, prompt, seed = jobs[i]
        dec = SpeculativeDecoder(pair, "sps", **kw)
        results[i] = dec.generate(prompt, max_new_tokens=40, seed=seed).token_ids

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(len(jobs))] == alone


@pytest.mark.cuda
def test_cuda_greedy_and_sampling(tiny_pair_factory):
    pair = tiny_pair_factory()
    pair.verifier.to("cuda")
    pair.draft.to("cuda")
    pair.device = torch.device("cuda")
    pair = with_feature_draft(pair, FeatureDraft.tiny_for(pair.verifier))
    dec = SpeculativeDecoder(pair, "cactus", k=4, temperature=0.0)
    for prompt in PROMPTS:
        spec = dec.generate(prompt, max_new_tokens=24, seed=0)
        plain = dec.generate_autoregressive(prompt, max_new_tokens=24, seed=0)
        assert spec.token_ids == plain.token_ids
    sampler = SpeculativeDecoder(pair, "sps", k=4, temperature=0.8, record_trace=False)
    a = sampler.generate(PROMPTS[0], max_new_tokens=24, seed=0)
    b = sampler.generate(PROMPTS[0], max_new_tokens=24, seed=0)
    assert a.token_ids == b.token_ids and a.stats.new_tokens > 0


def test_subset_head_drafts_only_its_ids_and_stays_exact_at_greedy(tiny_pair):
    draft = FeatureDraft.tiny_for(tiny_pair.verifier, head_size=64, seed=2)
    pair = with_feature_draft(tiny_pair, draft)
    head = set(draft.head_ids.tolist())
    sampler = SpeculativeDecoder(pair, "sps", k=4, temperature=1.0, record_trace=False)
    out = sampler.generate(PROMPTS[2], max_new_tokens=32, seed=3)
    assert all(d in head for r in out.trace.rounds for d in r.draft_ids)
    greedy = SpeculativeDecoder(pair, "sps", k=4, temperature=0.0, record_trace=False)
    ids = pair.encode_prompt(PROMPTS[2])
    want = greedy_reference(pair.verifier, ids, 24, greedy.eos_ids)
    got = greedy.generate(PROMPTS[2], max_new_tokens=24).token_ids
    assert_greedy_agrees(got, want, pair.verifier, ids, greedy.eos_ids)


@pytest.mark.parametrize("rule", ["sps", "cactus"])
def test_a_two_layer_draft_decodes_exactly(tiny_pair, rule, monkeypatch):
    """A stacked draft (two layers, each with its own cache): greedy is the verifier's own,
    and under sampling both layers' caches hold the same positions after every feed."""
    draft = FeatureDraft.tiny_for(tiny_pair.verifier, seed=5, num_layers=2)
    pair = with_feature_draft(tiny_pair, draft)
    greedy = SpeculativeDecoder(pair, rule, k=3, temperature=0.0, record_trace=False)
    ids = pair.encode_prompt(PROMPTS[1])
    want = greedy_reference(pair.verifier, ids, 24, greedy.eos_ids)
    got = greedy.generate(PROMPTS[1], max_new_tokens=24).token_ids
    assert_greedy_agrees(got, want, pair.verifier, ids, greedy.eos_ids)
    lengths = []
    real = FeatureDrafter.feed

    def feed(self, features, next_ids):
        real(self, features, next_ids)
        lengths.append([k.shape[2] for k in self.cache.keys])

    monkeypatch.setattr(FeatureDrafter, "feed", feed)
    sampler = SpeculativeDecoder(pair, rule, k=3, temperature=1.0, record_trace=False)
    out = sampler.generate(PROMPTS[1], max_new_tokens=24, seed=1)
    assert 0 < len(out.token_ids) <= 24
    assert lengths and all(len(n) == 2 and n[0] == n[1] for n in lengths)


@pytest.mark.parametrize("rule", ["sps", "cactus"])
def test_a_multi_depth_draft_reads_the_earlier_layer_and_decodes_exactly(tiny_pair, rule, feeds):
    """A draft with feature_layers [0]: every feed holds layer 0's outputs, then the pre-norm
    top features, of the committed positions; greedy is the verifier's own; no hook is left."""
    draft = FeatureDraft.tiny_for(tiny_pair.verifier, seed=6, feature_layers=[0])
    pair = with_feature_draft(tiny_pair, draft)
    greedy = SpeculativeDecoder(pair, rule, k=3, temperature=0.0, record_trace=False)
    ids = pair.encode_prompt(PROMPTS[0])
    want = greedy_reference(pair.verifier, ids, 24, greedy.eos_ids)
    got = greedy.generate(PROMPTS[0], max_new_tokens=24).token_ids
    assert_greedy_agrees(got, want, pair.verifier, ids, greedy.eos_ids)
    feeds.clear()
    sampler = SpeculativeDecoder(pair, rule, k=3, temperature=1.0, record_trace=False)
    out = sampler.generate(PROMPTS[0], max_new_tokens=32, seed=3)
    tokens = out.prompt_ids + out.token_ids
    ref = torch.cat(
        [layer_outputs(pair.verifier, tokens, 0), prenorm_features(pair.verifier, tokens)], -1
    )  # [1, L, 2D]
    assert ref.shape[-1] == draft.input_width
    position = 0
    for call in feeds:
        t = call["features"].shape[1]
        torch.testing.assert_close(
            call["features"], ref[:, position : position + t], atol=ATOL, rtol=0
        )
        position += t
    assert position == len(tokens) - 1 or out.stats.stop_reason == "eos"
    layers = [pair.verifier.model.norm, *pair.verifier.model.layers]
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in layers)


@pytest.mark.parametrize("k", [1, 4])
def test_stops_at_the_context_limit(tiny_pair_factory, k):
    base = tiny_pair_factory(context=48)
    pair = with_feature_draft(base, FeatureDraft.tiny_for(base.verifier))
    dec = SpeculativeDecoder(pair, "sps", k=k, temperature=1.0)
    dec.eos_ids = set()  # run into the wall
    out = dec.generate(PROMPTS[0], max_new_tokens=100, seed=1)
    assert len(out.prompt_ids) + len(out.token_ids) == 48
    assert out.stats.stop_reason == "context"
