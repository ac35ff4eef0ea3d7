"""The lab's decoder inside transformers' `model.generate(custom_generate=...)` on the tiny pair:
the output law at delta = 0 is the model's own sampling and at delta > 0 the lab's exact pi,
greedy is generate's greedy, the streamer, EOS, left-padded batches, the return types, the
Hub-style folder, the arguments transformers hands each of them, and what it refuses."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import pytest
import torch
from cactus_transformers import cactus_generate
from scipy import stats
from transformers.generation import GenerateDecoderOnlyOutput, GenerationMixin
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
)

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.rows import TokenPrompt
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import make_rule

FOLDER = Path(__file__).resolve().parent.parent / "integrations/transformers/cactus_generate"
PROMPT = "The cactus"
EOS = 2
DRAWS = 3000


def prompt_ids(pair, text: str = PROMPT) -> torch.Tensor:
    return torch.tensor([pair.tokenizer(text)["input_ids"]])


def run(pair, ids, **kw):
    kw.setdefault("num_assistant_tokens", 2)
    return pair.verifier.generate(
        ids, custom_generate=cactus_generate, cactus_draft=pair.draft, **kw
    )


def warped(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """generate's own sampling distribution: its warpers, then softmax."""
    procs = LogitsProcessorList([TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k)])
    return torch.softmax(procs(None, logits.clone()), -1)


def two_token_law(model, ids: torch.Tensor, temperature: float, top_k: int) -> dict:
    """P(x1, x2) of generate's sampling for two new tokens (x2 = pad after an EOS)."""
    with torch.no_grad():
        first = warped(model(ids).logits[:, -1], temperature, top_k)[0]
        law = {}
        for x1 in first.nonzero()[:, 0].tolist():
            if x1 == EOS:
                law[(x1, None)] = float(first[x1])
                continue
            ext = torch.cat([ids, torch.tensor([[x1]])], 1)
            second = warped(model(ext).logits[:, -1], temperature, top_k)[0]
            for x2 in second.nonzero()[:, 0].tolist():
                law[(x1, x2)] = float(first[x1] * second[x2])
    return law


def chi_square(observed: list, law: dict) -> float:
    counts: dict = {}
    for o in observed:
        counts[o] = counts.get(o, 0) + 1
    assert set(counts) <= set(law), "an outcome the model's sampling never gives"
    exp = torch.tensor(list(law.values()), dtype=torch.float64) * len(observed)
    obs = torch.tensor([counts.get(o, 0) for o in law], dtype=torch.float64)
    small = exp < 5
    obs = torch.cat([obs[~small], obs[small].sum().view(1)])
    exp = torch.cat([exp[~small], exp[small].sum().view(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    exp = exp * obs.sum() / exp.sum()  # the law sums to 1 up to float32 rounding
    return float(stats.chisquare(obs.numpy(), exp.numpy()).pvalue)


def test_delta_zero_law_is_the_models_own_sampling(tiny_pair):
    """Two new tokens from a batch of identical prompts (each row its own coins): the joint law
    equals the law of generate's own sampling, through the rule's accept/reject path; at
    delta = 0.1 the same test tells the difference."""
    ids = prompt_ids(tiny_pair, "Why")
    law = two_token_law(tiny_pair.verifier, ids, 0.9, 6)
    pvalues = []
    for delta in (0.0, 0.1):
        out = run(
            tiny_pair, ids.expand(DRAWS, -1), do_sample=True, temperature=0.9, top_k=6,
            max_new_tokens=2, cactus_rule={"rule": "cactus", "delta": delta}, cactus_seed=11,
        )  # fmt: skip
        new = out[:, ids.shape[1] :].tolist()
        pvalues.append(chi_square([(a, None if a == EOS else b) for a, b in new], law))
    assert pvalues[0] > 1e-3 and pvalues[1] < 1e-6


def test_delta_positive_first_token_follows_the_exact_pi(tiny_pair):
    ids = prompt_ids(tiny_pair, "Why")
    rule = make_rule("cactus", delta=0.5)
    out = run(
        tiny_pair, ids.expand(DRAWS, -1), do_sample=True, temperature=1.0, top_k=6,
        max_new_tokens=1, cactus_rule=rule, cactus_seed=5,
    )  # fmt: skip
    with torch.no_grad():
        q = warped(tiny_pair.verifier(ids).logits[:, -1], 1.0, 6)[0]
        p = warped(tiny_pair.draft(ids).logits[:, -1], 1.0, 6)[0]
    pi = emitted_distribution(rule, p.double(), q.double())
    first = out[:, ids.shape[1]].tolist()
    law = {(t,): float(pi[t]) for t in pi.nonzero()[:, 0].tolist()}
    assert chi_square([(t,) for t in first], law) > 1e-3
    assert (pi - q.double()).abs().sum() > 0.3  # the test tells pi from q apart


@pytest.fixture(scope="module")
def pair64(tiny_pair):
    """The tiny pair in float64: greedy has no near-ties that rounding could flip."""
    pair = copy.copy(tiny_pair)
    pair.verifier = copy.deepcopy(tiny_pair.verifier).double()
    pair.draft = copy.deepcopy(tiny_pair.draft).double()
    return pair


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_equals_generates_greedy(pair64, k):
    ids = prompt_ids(pair64, "Tell me about cacti.")
    ref = pair64.verifier.generate(ids, do_sample=False, max_new_tokens=30, eos_token_id=None)
    out = run(pair64, ids, do_sample=False, max_new_tokens=30, num_assistant_tokens=k,
              eos_token_id=None, cactus_rule="cactus")  # fmt: skip
    assert torch.equal(out, ref)


def test_left_padded_batch_decodes_each_row_as_alone(pair64):
    texts = ["Hi", "Why is the sky blue?"]
    rows = [pair64.tokenizer(t)["input_ids"] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    out = run(pair64, ids, attention_mask=mask, do_sample=False, max_new_tokens=12,
              eos_token_id=None)  # fmt: skip
    assert torch.equal(out[:, :width], ids)
    for b, r in enumerate(rows):
        alone = pair64.verifier.generate(
            torch.tensor([r]), do_sample=False, max_new_tokens=12, eos_token_id=None
        )
        assert out[b, width:].tolist() == alone[0, len(r) :].tolist()
    right = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    with pytest.raises(ValueError, match="left padding"):
        run(pair64, right, attention_mask=(right != 0).long(), max_new_tokens=4)


class Recorder:
    def __init__(self) -> None:
        self.puts: list[list[int]] = []
        self.ended = 0

    def put(self, value: torch.Tensor) -> None:
        self.puts.append(value.reshape(-1).tolist())

    def end(self) -> None:
        self.ended += 1


def check_stream(streamer: Recorder, ids: torch.Tensor, out: torch.Tensor) -> None:
    assert streamer.puts[0] == ids[0].tolist()  # the prompt first, as generate puts it
    streamed = [t for put in streamer.puts[1:] for t in put]
    assert streamed == out[0, ids.shape[1] :].tolist() and len(streamed) == 20
    assert len(streamer.puts) > 2 and streamer.ended == 1  # round by round, then end


def test_streamer_receives_the_prompt_then_every_token(tiny_pair):
    ids = prompt_ids(tiny_pair)
    kw = {"do_sample": True, "temperature": 0.8, "max_new_tokens": 20, "eos_token_id": None,
          "cactus_seed": 2, "num_assistant_tokens": 2}  # fmt: skip
    streamer = Recorder()
    out = run(tiny_pair, ids, cactus_streamer=streamer, **kw)
    check_stream(streamer, ids, out)
    with pytest.raises(ValueError, match="one sequence"):
        run(tiny_pair, ids.expand(2, -1), max_new_tokens=4, cactus_streamer=Recorder())
    streamer = Recorder()  # the folder gets generate's own `streamer` and hands it on
    folder = tiny_pair.verifier.generate(
        ids, assistant_model=tiny_pair.draft, streamer=streamer, custom_generate=str(FOLDER),
        trust_remote_code=True, **kw,
    )  # fmt: skip
    assert torch.equal(folder, out)
    check_stream(streamer, ids, folder)


def test_eos_stops_and_rows_are_padded(pair64):
    ids = prompt_ids(pair64)
    free = run(pair64, ids, do_sample=False, max_new_tokens=16, eos_token_id=None)
    new = free[0, ids.shape[1] :].tolist()
    stop_at = 5
    eos = new[stop_at]
    assert eos not in new[:stop_at]
    out = run(pair64, ids, do_sample=False, max_new_tokens=16, eos_token_id=eos)
    assert out[0, ids.shape[1] :].tolist() == new[: stop_at + 1]
    other = prompt_ids(pair64, "Rain falls")[:, -ids.shape[1] :]
    both = run(pair64, torch.cat([ids, other]), do_sample=False, max_new_tokens=16,
               eos_token_id=eos, pad_token_id=0)  # fmt: skip
    row = both[0, ids.shape[1] :].tolist()
    assert row[: stop_at + 1] == new[: stop_at + 1] and set(row[stop_at + 1 :]) <= {0}


def test_return_types_match_generates(tiny_pair):
    ids = prompt_ids(tiny_pair)
    plain = tiny_pair.verifier.generate(ids, do_sample=True, max_new_tokens=4)
    ours = run(tiny_pair, ids, do_sample=True, max_new_tokens=4)
    assert type(ours) is type(plain) and ours.dtype == plain.dtype == torch.long
    assert ours.shape == plain.shape
    plain_d = tiny_pair.verifier.generate(
        ids, do_sample=True, max_new_tokens=4, return_dict_in_generate=True
    )
    ours_d = run(tiny_pair, ids, do_sample=True, max_new_tokens=4, return_dict_in_generate=True)
    assert isinstance(ours_d, GenerateDecoderOnlyOutput) and type(ours_d) is type(plain_d)
    assert ours_d.sequences.shape == plain_d.sequences.shape


def test_same_coins_as_the_labs_decoder_and_the_folder(tiny_pair):
    ids = prompt_ids(tiny_pair)
    rule = make_rule("cactus", delta=0.3)
    kw = {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 0, "max_new_tokens": 16,
          "eos_token_id": None, "cactus_rule": rule, "cactus_seed": 7}  # fmt: skip
    out = run(tiny_pair, ids, num_assistant_tokens=3, **kw)
    dec = SpeculativeDecoder(tiny_pair, rule, k=3, temperature=0.7, top_p=0.9, eos_ids=())
    lab = dec.generate(TokenPrompt(tuple(ids[0].tolist())), max_new_tokens=16, seed=7)
    assert out[0, ids.shape[1] :].tolist() == lab.token_ids
    folder = tiny_pair.verifier.generate(
        ids, assistant_model=tiny_pair.draft, custom_generate=str(FOLDER),
        trust_remote_code=True, num_assistant_tokens=3, **kw,
    )  # fmt: skip
    assert torch.equal(folder, out)


def test_global_seed_makes_a_call_repeatable(tiny_pair):
    ids = prompt_ids(tiny_pair)
    torch.manual_seed(3)
    a = run(tiny_pair, ids, do_sample=True, max_new_tokens=12)
    torch.manual_seed(3)
    b = run(tiny_pair, ids, do_sample=True, max_new_tokens=12)
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"num_assistant_tokens": 20}, "num_assistant_tokens"),
        ({"repetition_penalty": 1.3, "do_sample": True}, "RepetitionPenalty"),
        ({"num_beams": 2}, "num_beams"),
        ({"output_scores": True, "return_dict_in_generate": True}, "output_scores"),
        ({"cactus_rule": "no-such-rule"}, "unknown rule"),
        ({"cactus_rule": {"rule": "cactus", "delta": -1}}, "delta"),
        ({"cactus_seed": -1}, "cactus_seed"),
    ],
)
def test_refuses_what_it_cannot_honour(tiny_pair, kw, match):
    with pytest.raises(ValueError, match=match):
        run(tiny_pair, prompt_ids(tiny_pair), max_new_tokens=4, **kw)


def test_needs_a_draft(tiny_pair):
    """generate keeps assistant_model to itself: without cactus_draft the callable says so."""
    for kw in ({}, {"assistant_model": tiny_pair.draft}):
        with pytest.raises(ValueError, match="cactus_draft=draft"):
            tiny_pair.verifier.generate(
                prompt_ids(tiny_pair), custom_generate=cactus_generate, max_new_tokens=4, **kw
            )


def test_the_callable_takes_only_what_transformers_hands_it(tiny_pair):
    """transformers 5.24 passes a custom_generate callable the keywords its signature names
    beyond `_sample`'s, and never generate's own named parameters: the callable's keywords
    are all of the first kind, and it is a plain function of its arguments (called directly
    with generate's prepared config, it gives what generate gives)."""
    own = set(inspect.signature(cactus_generate).parameters)
    handed = own - set(inspect.signature(GenerationMixin._sample).parameters)
    assert {"cactus_draft", "cactus_streamer", "cactus_rule", "cactus_seed"} <= handed
    assert not handed & set(inspect.signature(GenerationMixin.generate).parameters)
    ids = prompt_ids(tiny_pair)
    through = run(tiny_pair, ids, do_sample=True, temperature=0.7, top_k=0, max_new_tokens=8,
                  eos_token_id=None, cactus_seed=4)  # fmt: skip
    config = copy.deepcopy(tiny_pair.verifier.generation_config)
    config.update(do_sample=True, temperature=0.7, top_k=0, num_assistant_tokens=2,
                  eos_token_id=None, max_length=ids.shape[1] + 8)  # fmt: skip
    direct = cactus_generate(tiny_pair.verifier, ids, generation_config=config,
                             cactus_draft=tiny_pair.draft, cactus_seed=4)  # fmt: skip
    assert torch.equal(direct, through)
