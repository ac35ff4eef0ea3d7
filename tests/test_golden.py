"""Golden tokens: the same seed gives the same tokens as the decoder at fae17ec.

tests/data/golden_tokens.json was written by this file's `record()` before the architecture
redesign (issue 11) and must not be regenerated to make a change pass: a difference means the
decoder's behaviour changed. Run `python -m tests.test_golden` only when a change of behaviour
is intended, and say so in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cactus_core import SpeculativeDecoder, make_rule
from tests.conftest import make_tiny_pair

GOLDEN = Path(__file__).with_name("data") / "golden_tokens.json"
PROMPTS = ["Tell me about cacti.", "Why is the sky blue?"]
# (rule, params, decoder settings): every rule of fae17ec, at the settings the app uses, plus
# truncation, greedy, the full trace (no lazy head) and a batch.
CASES = [
    ("sps", {}, {}),
    ("cactus", {"delta": 1.0}, {}),
    ("cactus", {"delta": 0.3}, {"top_p": 0.9, "top_k": 50}),
    ("cactus-exact", {"delta": 0.5}, {}),
    ("cactus-budget", {"budget": 0.1}, {}),
    ("tas", {}, {}),
    ("topk", {"k_top": 5}, {}),
    ("interp", {"alpha": 0.5}, {}),
    ("optimal", {"budget": 0.1}, {}),
    ("cactus", {"delta": 1.0}, {"temperature": 0.0}),
    ("cactus", {"delta": 1.0}, {"record_trace": False}),
    ("sps", {}, {"record_trace": False, "k": 2}),
]


def _case_id(i: int) -> str:
    rule, params, settings = CASES[i]
    return f"{i}-{rule}-" + "-".join(f"{k}{v}" for k, v in {**params, **settings}.items())


def _decode(pair, i: int) -> dict[str, list[list[int]]]:
    rule, params, settings = CASES[i]
    kwargs = {"k": 4, "temperature": 0.7, **settings}
    dec = SpeculativeDecoder(pair, make_rule(rule, **params), **kwargs)
    single = [dec.generate(p, max_new_tokens=24, seed=7).token_ids for p in PROMPTS]
    batch = [o.token_ids for o in dec.generate(PROMPTS, max_new_tokens=24, seed=11)]
    return {"single": single, "batch": batch}


def record() -> None:
    pair = make_tiny_pair()
    GOLDEN.write_text(json.dumps({_case_id(i): _decode(pair, i) for i in range(len(CASES))}))


@pytest.mark.parametrize("i", range(len(CASES)), ids=_case_id)
def test_same_tokens_as_before_the_redesign(tiny_pair, i):
    golden = json.loads(GOLDEN.read_text())
    assert _decode(tiny_pair, i) == golden[_case_id(i)]


if __name__ == "__main__":
    record()
