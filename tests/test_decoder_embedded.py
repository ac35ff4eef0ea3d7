"""The decoder on the embedded pair (slow: loads SmolLM2-135M and the trained draft)."""

from __future__ import annotations

import math

import pytest
import torch

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.maths.rules import DEFAULT_RULE, RULE_NAMES, lossless_rule, make_rule
from tests.near_ties import assert_greedy_agrees

# One worker loads the embedded pair once for the module.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("embedded-decoder")]


@pytest.fixture(scope="module")
def pair():
    from cactus_core.engine.loading.models import load_pair

    return load_pair(device="cpu")


@pytest.fixture(scope="module")
def greedy_reference(pair):
    """The verifier's own greedy continuation (transformers' generate, no draft)."""
    prompts = builtin_prompts()[:3]
    refs = []
    for prompt in prompts:
        ids = torch.tensor([pair.encode_prompt(prompt)])
        with torch.inference_mode():
            out = pair.verifier.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=64,
                pad_token_id=pair.tokenizer.eos_token_id,
            )
        refs.append(out[0, ids.shape[1] :].tolist())
    return prompts, refs


def test_every_rule_judges_greedy_as_exact_match(tiny_pair):
    """At T = 0 the decoder judges every draft with the lossless rule (exact match with the
    verifier's argmax), whatever rule it was given: the rule only names the run. So one greedy
    decode on the embedded pair stands for every rule's (tests/test_decoder.py decodes each
    rule on the tiny pair)."""
    judges = {
        rule: SpeculativeDecoder(tiny_pair, make_rule(rule), temperature=0.0).judge
        for rule in RULE_NAMES
    }
    assert {type(j) for j in judges.values()} == {type(lossless_rule())}
    assert all(j.caps.lossless for j in judges.values())


def _assert_greedy(pair, dec, prompts, refs) -> list:
    outs = dec.generate(prompts, max_new_tokens=64, seed=0)
    for prompt, out, ref in zip(prompts, outs, refs, strict=True):
        ids = pair.encode_prompt(prompt)
        assert_greedy_agrees(out.token_ids, ref, pair.verifier, ids, dec.eos_ids)
    return outs


def test_greedy_equals_verifier_greedy(pair, greedy_reference):
    prompts, refs = greedy_reference
    dec = SpeculativeDecoder(pair, DEFAULT_RULE, k=4, temperature=0.0, record_trace=False)
    outs = _assert_greedy(pair, dec, prompts, refs)
    assert sum(o.stats.verifier_calls for o in outs) <= sum(len(r) for r in refs)


def test_the_shipped_feature_draft_keeps_greedy_the_verifier_s_own(pair, greedy_reference):
    """float32, the shipped feature draft, the three prompts as one batch."""
    from cactus_core.engine.loading.embedded_drafts import FEATURE_DRAFT_DIR
    from cactus_core.engine.loading.models import with_feature_draft

    prompts, refs = greedy_reference
    fpair = with_feature_draft(pair, FEATURE_DRAFT_DIR)
    dec = SpeculativeDecoder(fpair, DEFAULT_RULE, k=4, temperature=0.0, record_trace=False)
    outs = _assert_greedy(fpair, dec, prompts, refs)
    # The feature draft agrees with greedy more often than not (a random one would not).
    assert sum(o.stats.new_tokens for o in outs) > 1.5 * sum(o.stats.verifier_calls for o in outs)


def test_a_public_server_loads_the_fast_embedded_choice():
    """The embedded verifier in bfloat16 with the shipped feature draft (the default embedded
    choice on a CPU with native bfloat16), on a public server: the shipped folder is allowed,
    and it decodes."""
    from cactus_core.engine.loading.deployment import DeploymentPolicy
    from cactus_core.engine.loading.embedded_drafts import FEATURE_BFLOAT16, FEATURE_DRAFT_NAME
    from cactus_core.engine.loading.models import load_pair

    fast = FEATURE_BFLOAT16
    assert fast.feature_draft is not None and fast.cpu_dtype == "bfloat16"
    pair = load_pair(device="cpu", policy=DeploymentPolicy(public=True), **fast.load_kwargs("cpu"))
    assert pair.dtype == torch.bfloat16 and pair.feature_draft is not None
    assert pair.feature_draft.dtype == torch.bfloat16  # the draft runs in the verifier's dtype
    # Named, never by its folder (a server path)
    assert pair.feature_draft_name == FEATURE_DRAFT_NAME
    assert f"feature_draft={FEATURE_DRAFT_NAME}#" in pair.identity
    dec = SpeculativeDecoder(pair, make_rule("cactus", delta=1.0), k=4, temperature=0.7)
    out = dec.generate(builtin_prompts()[1], max_new_tokens=24, seed=0)
    assert 0 < len(out.token_ids) <= 24 and out.stats.tokens_per_call > 1


def test_sampling_runs_and_traces(pair):
    dec = SpeculativeDecoder(pair, make_rule("cactus", delta=1.0), k=4, temperature=0.7)
    out = dec.generate(builtin_prompts()[0], max_new_tokens=24, seed=0)
    assert 0 < len(out.token_ids) <= 24
    assert out.stats.mean_emitted_kl >= 0
    assert out.trace.rounds[0].positions[0].q_ids


def _bfloat16_step(top: float) -> float:
    """The spacing of bfloat16 values (7 stored mantissa bits) at the logit `top`."""
    return 2.0 ** (math.floor(math.log2(abs(top))) - 7)


@pytest.fixture(scope="module")
def pair16():
    from cactus_core.engine.loading.models import load_pair

    return load_pair(device="cpu", dtype=torch.bfloat16)


NEAR_TIE_PROMPTS = builtin_prompts()[:4]


@pytest.fixture(scope="module")
def own_greedy16(pair16) -> dict[str, list[int]]:
    """The verifier's own autoregressive greedy run of each prompt in bfloat16: the same
    whichever draft the speculative run uses, so both near-tie tests share it."""
    dec = SpeculativeDecoder(pair16, make_rule("sps"), k=4, temperature=0.0, record_trace=False)
    return {
        prompt: dec.generate_autoregressive(prompt, max_new_tokens=40, seed=0).token_ids
        for prompt in NEAR_TIE_PROMPTS
    }


@pytest.mark.parametrize("feature_draft", [False, True], ids=["3-layer", "feature"])
def test_bfloat16_greedy_differs_from_the_verifier_s_only_at_a_rounding_tie(
    pair16, own_greedy16, feature_draft
):
    """In bfloat16 a k + 1-column verify forward and a 1-column forward round differently, and
    the logits themselves are bfloat16 (steps of 1/8 at 16–32), so two tokens can tie. The
    greedy run must equal the verifier's own autoregressive greedy run up to the first such
    tie: where they first differ, both tokens are within one bfloat16 step of the top logit of
    a plain forward over the common prefix. With either shipped draft; four prompts of 40
    tokens (most of them meet a tie on a CPU without native bfloat16)."""
    from cactus_core.engine.loading.embedded_drafts import FEATURE_DRAFT_DIR
    from cactus_core.engine.loading.models import with_feature_draft

    pair = with_feature_draft(pair16, FEATURE_DRAFT_DIR) if feature_draft else pair16
    dec = SpeculativeDecoder(pair, make_rule("sps"), k=4, temperature=0.0, record_trace=False)
    for prompt in NEAR_TIE_PROMPTS:
        spec = dec.generate(prompt, max_new_tokens=40, seed=0).token_ids
        ids = pair.encode_prompt(prompt)
        own = own_greedy16[prompt]
        assert_greedy_agrees(spec, own, pair.verifier, ids, dec.eos_ids, tie=_bfloat16_step)
