"""The replay's divergence: the emitted KL of a replay beside the run's, per round and per
token. Replayed under its own rule a run costs what it cost; lossless costs nothing; a larger
delta costs more."""

from __future__ import annotations

import pytest

from cactus_core.app.decode.replay import replay_headlines, replay_kl, replay_kl_figure
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.replay import reverify
from cactus_core.maths.rules import make_rule

PROMPT = "The cactus"


@pytest.fixture(scope="module")
def run(tiny_pair):
    # top-k 50 ≤ the 64 rows a trace keeps: the replay's rows are exact
    dec = SpeculativeDecoder(
        tiny_pair, make_rule("cactus", delta=0.3), k=4, temperature=1.0, top_k=50, replay_top_m=64
    )
    return dec.generate(PROMPT, max_new_tokens=32, seed=5)


def test_its_own_rule_costs_what_the_run_cost(run):
    data = replay_kl(run.trace, reverify(run.trace, make_rule("cactus", delta=0.3)))
    assert data.exact and len(data.rounds) == len(data.run) == len(data.replay) > 3
    assert data.replay == pytest.approx(data.run, abs=1e-4)
    assert data.run_mean > 0.01


def test_lossless_costs_nothing_and_more_delta_costs_more(run):
    lossless = replay_kl(run.trace, reverify(run.trace, "sps"))
    assert lossless.replay_mean == pytest.approx(0.0, abs=1e-6)
    assert lossless.cards()[1][2] is not None and lossless.cards()[1][2].startswith("-")
    more = replay_kl(run.trace, reverify(run.trace, make_rule("cactus", delta=2.0)))
    assert more.replay_mean > more.run_mean
    fig = replay_kl_figure(more, "cactus δ=0.3", "cactus δ=2")
    assert [t.name for t in fig.data] == ["the run (cactus δ=0.3)", "replay (cactus δ=2)"]
    assert list(fig.data[1].y) == pytest.approx(more.replay)


def test_no_arrow_for_no_change(run):
    same = reverify(run.trace, make_rule("cactus", delta=0.3))
    assert all(card.delta is None for card in replay_headlines(same))
    assert replay_kl(run.trace, same).cards()[1][2] is None
