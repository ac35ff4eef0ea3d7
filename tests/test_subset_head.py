"""A draft whose head scores only a subset of the vocabulary: p is 0 outside the subset, and
speculative decoding with it stays exact (greedy equality, sps's first-token distribution)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from scipy.stats import chisquare

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.loading.models import ModelLoadError, _check_logit_sizes
from cactus_core.engine.runtime.subset_head import FILL, VocabSubsetHead, attach_subset_head
from cactus_core.maths.sampling import logits_to_probs


@pytest.fixture(scope="module")
def subset_pair(tiny_pair):
    """The tiny pair with a draft that scores only the even ids (plus the end marker)."""
    draft = copy.deepcopy(tiny_pair.draft)
    vocab = draft.config.vocab_size
    ids = sorted(set(range(0, vocab, 2)) | {tiny_pair.tokenizer.eos_token_id})
    attach_subset_head(draft, torch.tensor(ids))
    return dataclasses.replace(tiny_pair, draft=draft), torch.tensor(ids)


def test_head_scores_the_subset_and_fills_the_rest():
    torch.manual_seed(0)
    emb = torch.randn(50, 8)
    ids = torch.tensor([3, 7, 11, 49])
    head = VocabSubsetHead(emb, ids)
    hidden = torch.randn(2, 5, 8)
    logits = head(hidden)
    assert logits.shape == (2, 5, 50)
    torch.testing.assert_close(logits[..., ids], hidden @ emb[ids].T)
    rest = torch.ones(50, dtype=torch.bool)
    rest[ids] = False
    assert (logits[..., rest] == FILL).all()
    probs = logits_to_probs(logits, temperature=0.05)
    assert (probs[..., rest] == 0).all() and torch.isfinite(probs).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 5))


@pytest.mark.parametrize(
    "ids, match", [([], "empty"), ([0, 50], r"\[0, 50\)"), ([-1], r"\[0, 50\)"), ([1, 1], "repeat")]
)
def test_bad_token_ids_raise(ids, match):
    with pytest.raises(ValueError, match=match):
        VocabSubsetHead(torch.zeros(50, 4), torch.tensor(ids, dtype=torch.long))


def test_pair_check_counts_the_full_vocabulary(subset_pair, tiny_pair):
    pair, _ = subset_pair
    _check_logit_sizes(pair.verifier, pair.draft, "v", "d")  # subset head still scores all V
    small = copy.deepcopy(tiny_pair.draft)
    small.lm_head = torch.nn.Linear(64, 10, bias=False)
    with pytest.raises(ModelLoadError, match="one vocabulary"):
        _check_logit_sizes(pair.verifier, small, "v", "d")


def test_greedy_speculation_with_a_subset_draft_is_the_verifiers_greedy(subset_pair, tiny_pair):
    pair, _ = subset_pair
    prompts = ["Tell me about cacti.", "Why is the sky blue?"]
    spec = SpeculativeDecoder(pair, "sps", k=4, temperature=0.0, record_trace=False)
    ref = SpeculativeDecoder(tiny_pair, "sps", k=4, temperature=0.0, record_trace=False)
    for a, b in zip(
        spec.generate(prompts, max_new_tokens=24, seed=0),
        ref.generate_autoregressive(prompts, max_new_tokens=24, seed=0),
        strict=True,
    ):
        assert a.token_ids == b.token_ids


def test_sps_with_a_subset_draft_still_samples_the_verifier(subset_pair):
    """Drafts never propose odd ids, yet odd ids come out at q's rate: the residual emits them."""
    pair, ids = subset_pair
    prompt, n = "Tell me", 3000
    x = torch.tensor([pair.encode_prompt(prompt, chat_template=False)])
    with torch.no_grad():
        q = logits_to_probs(pair.verifier(x).logits[0, -1].double(), temperature=1.0)
    dec = SpeculativeDecoder(pair, "sps", k=4, temperature=1.0, record_trace=True)
    outs = dec.generate([prompt] * n, max_new_tokens=1, seed=0, chat_template=False)
    drafted = {pos.draft_id for o in outs for r in o.trace.rounds for pos in r.positions}
    drafted.discard(None)  # the bonus position drafts nothing
    assert drafted and drafted <= set(ids.tolist())
    first = torch.tensor([o.token_ids[0] for o in outs])
    odd = (first % 2 == 1) & (first != pair.tokenizer.eos_token_id)
    assert odd.any()
    obs = torch.bincount(first, minlength=q.shape[0]).double()
    big = q * n >= 5
    o = torch.cat([obs[big], obs[~big].sum()[None]])
    e = torch.cat([q[big] * n, (q[~big] * n).sum()[None]])
    assert chisquare(o.numpy(), (e * o.sum() / e.sum()).numpy()).pvalue > 1e-3
