"""The feature-conditioned draft (engine/loading/feature_draft.py) on a tiny random verifier.

No embedded model: a 2-layer Llama (hidden 64, vocab 128) stands in for the verifier. The
checks pin down what the decoder relies on: shapes, the logits being the verifier's own
norm + head applied to the predicted feature, one-token steps through the cache agreeing with
one multi-token forward, crop-and-reforward replaying the same outputs, the unrolled training
forward agreeing with real cache-based drafting, and save/load round trips; for a multi-depth
draft (EAGLE-3 style: it also reads an earlier verifier layer), the same with its wide inputs,
and a fuse that starts as the top feature alone.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from cactus_core.engine.loading.feature_draft import DraftKVCache, FeatureDraft

VOCAB, HIDDEN = 128, 64
ATOL = 1e-5


@pytest.fixture(scope="module")
def verifier() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg).eval()


def verifier_features(verifier, ids: torch.Tensor) -> torch.Tensor:
    """The last decoder layer's output before the final norm, [B, T, D]."""
    out = verifier(ids, output_hidden_states=True)
    feats = []
    hook = verifier.model.layers[-1].register_forward_hook(lambda m, i, o: feats.append(o))
    try:
        verifier(ids)
    finally:
        hook.remove()
    assert out.logits.shape[-1] == VOCAB
    return feats[0]


@pytest.fixture(
    params=[(None, 1, None), (48, 1, None), (None, 2, None), (48, 1, [0])],
    ids=["full-head", "subset-head", "two-layers", "multi-depth"],
)
def draft(request, verifier) -> FeatureDraft:
    head_size, layers, feature_layers = request.param
    return FeatureDraft.tiny_for(
        verifier, head_size=head_size, seed=1, num_layers=layers, feature_layers=feature_layers
    ).eval()


def verifier_inputs(draft: FeatureDraft, *shape: int) -> torch.Tensor:
    """Random verifier features [*shape, input_width]: what the verifier feeds this draft."""
    return torch.randn(*shape, draft.input_width)


@torch.no_grad()
def test_shapes_and_cache_length(draft):
    feats, ids = verifier_inputs(draft, 2, 5), torch.randint(0, VOCAB, (2, 5))
    cache = DraftKVCache()
    logits, new = draft(feats, ids, cache, start_pos=0)
    assert logits.shape == (2, 5, VOCAB) and new.shape == (2, 5, HIDDEN)
    assert cache.length == 5
    kv = draft.config.num_key_value_heads
    assert len(cache.keys) == len(draft.layers) == draft.config.num_hidden_layers
    for keys in cache.keys:
        assert keys.shape == (2, kv, 5, HIDDEN // draft.config.num_attention_heads)
    with pytest.raises(ValueError):
        draft(feats, ids, cache, start_pos=0)  # the cache already holds 5 positions
    with pytest.raises(ValueError, match="wide"):
        draft(torch.randn(2, 1, HIDDEN * 3), ids[:, :1], cache, start_pos=5)


@torch.no_grad()
def test_logits_are_the_verifiers_norm_and_head(draft, verifier):
    feats, ids = verifier_inputs(draft, 1, 4) * 3, torch.randint(0, VOCAB, (1, 4))
    logits, new = draft(feats, ids, DraftKVCache(), start_pos=0)
    ref = verifier.lm_head(verifier.model.norm(new))  # [1, 4, V]
    if draft.head_ids is None:
        torch.testing.assert_close(logits, ref, atol=ATOL, rtol=1e-5)
    else:
        inside = torch.zeros(VOCAB, dtype=torch.bool)
        inside[draft.head_ids] = True
        torch.testing.assert_close(logits[..., inside], ref[..., inside], atol=ATOL, rtol=1e-5)
        assert (torch.softmax(logits, -1)[..., ~inside] == 0).all()  # p = 0 outside the head


@torch.no_grad()
def test_from_verifier_reads_real_features(verifier):
    ids = torch.randint(0, VOCAB, (1, 9))
    f = verifier_features(verifier, ids)  # [1, 9, D]
    head = torch.arange(0, VOCAB, 2)
    draft = FeatureDraft.from_verifier(verifier, head_ids=head, embed_scale=2.0, feature_scale=0.5)
    logits, new = draft(f[:, :-1], ids[:, 1:], DraftKVCache(), start_pos=0)
    assert torch.isfinite(new).all() and logits.shape == (1, 8, VOCAB)
    torch.testing.assert_close(
        draft.layer.mlp.up_proj.weight, verifier.model.layers[-1].mlp.up_proj.weight
    )


@torch.no_grad()
def test_a_grown_layer_starts_as_the_identity(verifier):
    """A second layer from `from_verifier` adds nothing at first, so a two-layer draft warm-
    started from a trained one-layer draft (training.train_feature_draft --layers 2) starts
    exactly where that one was."""
    one = FeatureDraft.tiny_for(verifier, head_size=48, seed=4).eval()
    two = FeatureDraft.from_verifier(verifier, one.head_ids, num_layers=2).eval()
    missing, unexpected = two.load_state_dict(one.state_dict(), strict=False)
    assert not unexpected and missing and all(m.startswith("extra_layers.0.") for m in missing)
    feats, ids = torch.randn(1, 6, HIDDEN), torch.randint(0, VOCAB, (1, 9))
    unrolled = one.forward_unrolled(feats, ids, 3), two.forward_unrolled(feats, ids, 3)
    for a, b in zip(*unrolled, strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="at least one layer"):
        FeatureDraft.from_verifier(verifier, num_layers=0)


@torch.no_grad()
def test_a_multi_depth_draft_starts_as_the_draft_it_grew_from(verifier):
    """`from_verifier(feature_layers=...)` with a one-depth draft's weights loaded predicts the
    same features whatever the earlier layer holds (its fuse reads the top feature alone), so
    training.train_feature_draft --feature-layers warm-starts where that draft was; after a
    change to the fuse, the earlier layer's features do change the prediction."""
    one = FeatureDraft.tiny_for(verifier, head_size=48, seed=4).eval()
    multi = FeatureDraft.from_verifier(
        verifier, one.head_ids, feature_layers=[0], layer_scales=[0.5]
    ).eval()
    missing, unexpected = multi.load_state_dict(one.state_dict(), strict=False)
    assert (missing, unexpected) == (["fuse.weight"], [])
    assert multi.input_width == 2 * HIDDEN
    top, ids = torch.randn(1, 6, HIDDEN), torch.randint(0, VOCAB, (1, 9))
    wide = torch.cat([torch.randn(1, 6, HIDDEN) * 7, top], dim=-1)
    before, after = one.forward_unrolled(top, ids, 3), multi.forward_unrolled(wide, ids, 3)
    for a, b in zip(before, after, strict=True):
        torch.testing.assert_close(a, b)
    multi.fuse.weight[:, :HIDDEN] = 0.01
    other = multi.forward_unrolled(wide, ids, 1)[0]
    assert not torch.allclose(other, one.forward_unrolled(top, ids, 1)[0])


@pytest.mark.parametrize("layers", [[1], [0, 0], [-1], [3]])
def test_feature_layers_must_be_earlier_distinct_and_ascending(verifier, layers):
    # The tiny verifier has layers 0 and 1; layer 1 is the top, which every draft reads.
    with pytest.raises(ValueError, match="feature_layers"):
        FeatureDraft.tiny_for(verifier, feature_layers=layers)


@torch.no_grad()
def test_one_token_steps_equal_one_multi_token_forward(draft):
    feats, ids = verifier_inputs(draft, 1, 7), torch.randint(0, VOCAB, (1, 7))
    full_logits, full_new = draft(feats, ids, DraftKVCache(), start_pos=0)
    cache = DraftKVCache()
    # A 3-token prefill, then one token at a time.
    logits, new = [], []
    lg, nf = draft(feats[:, :3], ids[:, :3], cache, start_pos=0)
    logits.append(lg)
    new.append(nf)
    for t in range(3, 7):
        lg, nf = draft(feats[:, t : t + 1], ids[:, t : t + 1], cache, start_pos=t)
        logits.append(lg)
        new.append(nf)
    torch.testing.assert_close(torch.cat(new, 1), full_new, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(torch.cat(logits, 1), full_logits, atol=1e-4, rtol=1e-5)


@torch.no_grad()
def test_crop_then_reforward_gives_the_same_outputs(draft):
    feats, ids = verifier_inputs(draft, 1, 6), torch.randint(0, VOCAB, (1, 6))
    cache = DraftKVCache()
    draft(feats[:, :4], ids[:, :4], cache, start_pos=0)
    # Draft three tokens on the draft's own features, then roll them back.
    ref_logits, ref_new = draft(feats[:, 4:6], ids[:, 4:6], _clone(cache), start_pos=4)
    f, tok = feats[:, 3:4], ids[:, 3:4]
    for step in range(3):
        lg, f = draft(f, tok, cache, start_pos=4 + step)
        tok = lg.argmax(-1)  # [1, 1]
    assert cache.length == 7
    cache.crop(4)
    assert cache.length == 4
    logits, new = draft(feats[:, 4:6], ids[:, 4:6], cache, start_pos=4)
    torch.testing.assert_close(new, ref_new, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=1e-5)
    cache.crop(0)
    assert cache.length == 0 and cache.keys == []
    with pytest.raises(ValueError):
        cache.crop(1)


def _clone(cache: DraftKVCache) -> DraftKVCache:
    out = DraftKVCache()
    out.keys, out.values = [k.clone() for k in cache.keys], [v.clone() for v in cache.values]
    return out


@torch.no_grad()
def test_unrolled_forward_equals_drafting_with_the_cache(draft):
    """Training-time test: chain i, step d of forward_unrolled is what decoding computes after
    the verifier has read positions 0..i and the draft has fed back its own features."""
    t, depth = 8, 3
    feats = verifier_inputs(draft, 1, t)
    tokens = torch.randint(0, VOCAB, (1, t + depth))
    unrolled = draft.forward_unrolled(feats, tokens, depth)  # depth x [1, T, D]
    for i in (0, 3, 7):
        cache = DraftKVCache()
        _, f = draft(feats[:, : i + 1], tokens[:, 1 : i + 2], cache, start_pos=0)
        f = f[:, -1:]
        torch.testing.assert_close(f[:, 0], unrolled[0][:, i], atol=ATOL, rtol=1e-5)
        for d in range(2, depth + 1):
            _, f = draft(f, tokens[:, i + d : i + d + 1], cache, start_pos=i + d - 1)
            torch.testing.assert_close(f[:, 0], unrolled[d - 1][:, i], atol=1e-4, rtol=1e-4)


def test_save_load_round_trip(draft, verifier, tmp_path):
    draft.save(tmp_path / "fd", info={"note": "test"})
    loaded = FeatureDraft.load(tmp_path / "fd", verifier)
    assert (loaded.head_ids is None) == (draft.head_ids is None)
    if draft.head_ids is not None:
        assert torch.equal(loaded.head_ids, draft.head_ids)
    names = set(loaded.state_dict())
    assert names == set(draft.state_dict())
    assert not any("embed" in n or "head" in n for n in names)  # the verifier's, not stored
    assert loaded.feature_layers == draft.feature_layers
    assert loaded.layer_scales == draft.layer_scales
    feats, ids = verifier_inputs(draft, 1, 5), torch.randint(0, VOCAB, (1, 5))
    with torch.no_grad():
        a = draft(feats, ids, DraftKVCache(), start_pos=0)
        b = loaded(feats, ids, DraftKVCache(), start_pos=0)
    torch.testing.assert_close(a[0], b[0])
    torch.testing.assert_close(a[1], b[1])
    with pytest.raises(ValueError):
        FeatureDraft.load(tmp_path, verifier)  # no config.json there -> not a draft folder


def test_bfloat16_draft_runs(draft, tmp_path, verifier):
    draft.save(tmp_path / "fd")
    bf = FeatureDraft.load(tmp_path / "fd", verifier, dtype=torch.bfloat16)
    with torch.no_grad():
        logits, new = bf(
            verifier_inputs(draft, 1, 3), torch.randint(0, VOCAB, (1, 3)), DraftKVCache(), 0
        )
    assert new.dtype == torch.bfloat16 and torch.isfinite(new).all()
    assert logits.shape == (1, 3, VOCAB)
