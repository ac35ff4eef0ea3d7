"""Decoding from token ids (`TokenPrompt`): the same tokens as the text they encode, in a batch
with text prompts, streamed, and checked."""

from __future__ import annotations

import pytest

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.rows import TokenPrompt

TEXT = "Tell me about cacti."


def test_ids_decode_like_the_text_they_encode(tiny_pair):
    dec = SpeculativeDecoder(tiny_pair, "cactus", k=3, temperature=0.8, record_trace=False)
    ids = tuple(tiny_pair.encode_prompt(TEXT))
    by_text = dec.generate(TEXT, max_new_tokens=20, seed=4)
    by_ids = dec.generate(TokenPrompt(ids), max_new_tokens=20, seed=4)
    assert by_ids.token_ids == by_text.token_ids and by_ids.prompt_ids == list(ids)
    assert by_ids.trace.meta["chat_template"] is False
    assert by_ids.prompt == tiny_pair.tokenizer.decode(list(ids))
    batch = dec.generate([TokenPrompt(ids), TEXT], max_new_tokens=20, seed=4)
    assert batch[0].token_ids == by_text.token_ids
    streamed = dec.rounds(TokenPrompt(ids, text="shown"), max_new_tokens=20, seed=4)
    rounds = list(streamed)
    assert [t for r in rounds for t in r.emitted_ids] == by_text.token_ids
    assert streamed.output.prompt == "shown"


@pytest.mark.parametrize(
    ("ids", "match"),
    [((), "at least one"), ((1, -2), "non-negative"), ((1, True), "non-negative"),
     ((1, 2.0), "non-negative")],
)  # fmt: skip
def test_token_prompt_checks_its_ids(ids, match):
    with pytest.raises(ValueError, match=match):
        TokenPrompt(ids)


def test_ids_past_the_vocabulary_and_the_context_are_refused(tiny_pair):
    dec = SpeculativeDecoder(tiny_pair, "cactus", record_trace=False)
    with pytest.raises(ValueError, match="token id 100000"):
        dec.generate(TokenPrompt((5, 100000)), max_new_tokens=4)
    with pytest.raises(ValueError, match="context holds"):
        dec.generate(TokenPrompt((5,) * tiny_pair.context_length), max_new_tokens=4)
    with pytest.raises(ValueError, match="single prompt"):
        dec.rounds([TokenPrompt((5,))])
