"""Recording off the critical path records the same numbers: the trace rows, the exact
emitted KL and the stats equal, bit for bit, the snapshot taken with the recording inline
(tests/recording_snapshot.py); and the per-position acceptance counts equal a brute count of
the trace's draft fates."""

from __future__ import annotations

from typing import Any

from cactus_core.app.k_view import counts_from_rounds, k_chart, position_chart
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.generation import PositionCounts, summarize
from tests import recording_snapshot as snap


def _as_recorded(got: Any, want: Any) -> Any:
    """got, less the fields added since the snapshot (the stats' per-position counts, checked
    apart; a chain round's empty `tree`), and with special tokens' text as the snapshot wrote
    it (the trace now names them by a marker such as «end»)."""
    if isinstance(want, list):
        return [_as_recorded(g, w) for g, w in zip(got, want, strict=True)]
    if not isinstance(want, dict):
        return got
    out = {k: _as_recorded(v, want[k]) for k, v in got.items() if k in want}
    if "token_text" in want:
        special = {i: t for i, t in want["token_text"].items() if t.startswith("<|")}
        out["token_text"] = {**out["token_text"], **special}
    return out


def test_trace_and_stats_equal_the_inline_recording_bit_for_bit(tiny_pair) -> None:
    want = snap.load()
    got = snap.snapshot(tiny_pair)
    assert set(got) == set(want)
    for rule, cases in want.items():
        for case, value in cases.items():
            assert _as_recorded(got[rule][case], value) == value, (rule, case)


def brute_counts(rounds: list[Any]) -> tuple[list[int], list[int], int]:
    """Reached and accepted per draft position, and the speculative rounds, from the fates."""
    k = max((r.k for r in rounds), default=0)
    reached, accepted, n = [0] * k, [0] * k, 0
    for r in rounds:
        if r.k == 0:
            continue
        n += 1
        for j, fate in enumerate(r.draft_fates):
            reached[j] += fate in ("accepted", "rejected")
            accepted[j] += fate == "accepted"
    return reached, accepted, n


def test_per_position_counts_equal_a_brute_count_of_the_trace(tiny_pair) -> None:
    dec = SpeculativeDecoder(tiny_pair, "cactus", k=5, temperature=1.0, trace_top_n=3)
    outs = dec.generate(snap.PROMPTS, max_new_tokens=40, seed=11)
    for out in outs:
        reached, accepted, rounds = brute_counts(out.trace.rounds)
        pos = out.stats.positions
        assert (list(pos.reached), list(pos.accepted), pos.rounds) == (reached, accepted, rounds)
        assert reached[0] == rounds and all(a <= r for a, r in zip(accepted, reached, strict=True))
        # vLLM's mean acceptance length is tokens per call, before truncation cuts a round
        emitted = sum(r.num_accepted + 1 for r in out.trace.rounds)
        assert pos.mean_acceptance_length == emitted / rounds
        assert out.stats.to_dict()["acceptance_by_position"]["reached"] == reached
        assert counts_from_rounds(out.trace.rounds) == pos  # Step through's count
    pooled = summarize(outs)["acceptance_by_position"]
    columns = zip(*(o.stats.position_reached for o in outs), strict=True)
    assert pooled["reached"] == [sum(x) for x in columns]
    lo_hi = PositionCounts.pooled([o.stats.positions for o in outs]).intervals()
    for (lo, hi), rate in zip(lo_hi, pooled["conditional"], strict=True):
        assert lo <= rate <= hi


def test_position_and_k_charts_draw_the_counts() -> None:
    from cactus_core.experiments.k_tuner import predict_k
    from tests.test_k_tuner import COSTS

    counts = PositionCounts((10, 6, 3), (6, 3, 1), 10)
    fig = position_chart(counts)
    assert list(fig.data[0].y) == [0.6, 0.5, 1 / 3] and fig.data[0].text == ("6/10", "3/6", "1/3")
    assert list(fig.data[1].y) == [0.6, 0.3, 0.1]  # vLLM's: accepted ÷ rounds
    pred = predict_k(counts.conditional(), COSTS)
    fig = k_chart({"cactus δ=1": pred})
    stars = [t for t in fig.data if t.name.startswith("best k")]
    assert stars and stars[0].x[0] == pred.best_k
    assert any("extrapolated" in t.name for t in fig.data)
