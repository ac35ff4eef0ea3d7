"""The decoder on the embedded pair (slow: loads SmolLM2-135M and the trained draft)."""

from __future__ import annotations

import pytest
import torch

from cactus_core.engine.decoder import SpeculativeDecoder
from cactus_core.engine.prompts import builtin_prompts
from cactus_core.maths.rules import RULE_NAMES, make_rule

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair():
    from cactus_core.engine.models import load_pair

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


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_greedy_equals_verifier_greedy(pair, greedy_reference, rule):
    prompts, refs = greedy_reference
    dec = SpeculativeDecoder(pair, make_rule(rule), k=4, temperature=0.0, record_trace=False)
    outs = dec.generate(prompts, max_new_tokens=64, seed=0)
    for out, ref in zip(outs, refs, strict=True):
        assert out.token_ids == ref
    assert sum(o.stats.verifier_calls for o in outs) <= sum(len(r) for r in refs)


def test_sampling_runs_and_traces(pair):
    dec = SpeculativeDecoder(pair, make_rule("cactus", delta=1.0), k=4, temperature=0.7)
    out = dec.generate(builtin_prompts()[0], max_new_tokens=24, seed=0)
    assert 0 < len(out.token_ids) <= 24
    assert out.stats.mean_emitted_kl >= 0
    assert out.trace.rounds[0].positions[0].q_ids
