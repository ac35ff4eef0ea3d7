"""Recording off the critical path records the same numbers: the trace rows, the exact
emitted KL and the stats equal, bit for bit, those recorded inline in the same process
(tests/recording_cases.py); and the per-position acceptance counts equal a brute count of the
trace's draft fates."""

from __future__ import annotations

import gc
import math
import threading
from typing import Any

import pytest

from cactus_core.app.shared.k_panel import counts_from_rounds, k_chart, position_chart
from cactus_core.app.shared.round_view import live_stats
from cactus_core.engine.decoding import decoder as decoder_module
from cactus_core.engine.decoding import recording
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.generation import PositionCounts, summarize
from cactus_core.engine.decoding.recording import RECORDER_THREAD
from tests import recording_cases as snap


@pytest.mark.kernels
def test_trace_and_stats_equal_the_inline_recording_bit_for_bit(tiny_pair, monkeypatch) -> None:
    threaded = snap.snapshot(tiny_pair)

    def inline(self: recording.Recorder, what: str, fn: Any, *args: Any) -> recording.Recorded:
        return recording.Recorded(self._run(fn, *args))  # on the decoding thread, at once

    monkeypatch.setattr(recording.Recorder, "submit", inline)
    seen: list[str] = []
    real = decoder_module.record_round
    monkeypatch.setattr(
        decoder_module,
        "record_round",
        lambda *a: seen.append(threading.current_thread().name) or real(*a),
    )
    want = snap.snapshot(tiny_pair)
    assert seen and not any(name.startswith(RECORDER_THREAD) for name in seen)
    assert set(threaded) == set(want)
    for rule, cases in want.items():
        for case, value in cases.items():
            assert threaded[rule][case] == value, (rule, case)


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
    from cactus_core.experiments.tuning.k_tuner import predict_k
    from tests.test_k_tuner import COSTS

    counts = PositionCounts((10, 6, 3), (6, 3, 1), 10)
    fig = position_chart(counts)
    assert list(fig.data[0].y) == [0.6, 0.5, 1 / 3] and fig.data[0].text == ("6/10", "3/6", "1/3")
    assert list(fig.data[1].y) == [0.6, 0.3, 0.1]  # vLLM's: accepted ÷ rounds
    pred = predict_k(counts.conditional(), COSTS)
    fig = k_chart({"cactus δ=1": pred})
    stars = [t for t in fig.data if "best k" in t.name]
    assert stars and stars[0].x[0] == pred.best_k
    assert any("extrapolated" in t.name for t in fig.data)


# -- the recording thread ----------------------------------------------------------------------


def _recorder_threads(before: frozenset[threading.Thread] = frozenset()) -> list[threading.Thread]:
    """Live recording threads, less those in `before` (a module-scoped fixture elsewhere in
    this process may hold a stream it has not finished)."""
    live = [t for t in threading.enumerate() if t.name.startswith(RECORDER_THREAD)]
    return [t for t in live if t not in before]


def _complete(rnd: Any) -> bool:
    """A speculative round with its trace rows and the emitted KL at its decided positions."""
    if len(rnd.positions) != rnd.k + 1:
        return False
    decided = min(rnd.num_accepted + 1, rnd.k)
    return all(p.kl_pi_q is not None for p in rnd.positions[:decided]) and all(
        p.kl_pi_q is None for p in rnd.positions[decided : rnd.k]
    )


def _kl_of(rounds: list[Any]) -> float:
    return sum(pos.kl_pi_q for r in rounds for pos in r.positions[: min(len(r.emitted_ids), r.k)])


def test_recording_runs_on_the_worker_and_is_complete_when_generate_returns(
    tiny_pair, monkeypatch
) -> None:
    before = frozenset(_recorder_threads())
    where: list[str] = []
    real = decoder_module.record_round

    def spy(*args: Any) -> Any:
        where.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(decoder_module, "record_round", spy)
    seen: list[bool] = []
    dec = SpeculativeDecoder(tiny_pair, "cactus", k=4, temperature=0.7, trace_top_n=3)
    out = dec.generate(
        snap.PROMPTS[0], max_new_tokens=20, seed=2, on_round=lambda r, _: seen.append(_complete(r))
    )
    assert where and all(name.startswith(RECORDER_THREAD) for name in where)
    assert seen and all(seen) and len(seen) == len(out.trace.rounds)
    assert all(_complete(r) for r in out.trace.rounds)
    assert out.stats.kl_sum == _kl_of(out.trace.rounds) > 0
    assert 0 <= out.stats.record_s < out.stats.wall_s and out.stats.record_work_s > 0
    assert not _recorder_threads(before)


def test_a_streamed_round_is_complete_when_the_page_reads_it(tiny_pair) -> None:
    before = frozenset(_recorder_threads())
    dec = SpeculativeDecoder(tiny_pair, "cactus-budget", k=3, temperature=1.0, trace_top_n=3)
    stream = dec.rounds(snap.PROMPTS[1], max_new_tokens=24, seed=4)
    kl = []
    for rnd in stream:
        assert _complete(rnd)  # read at once, as the Decode page's live counters do
        kl.append(live_stats([rnd], 1.0).emitted_kl * len(rnd.emitted_ids))
    out = stream.output
    assert out is not None and len(out.trace.rounds) == len(kl) > 1
    assert math.isclose(out.stats.kl_sum, sum(kl), rel_tol=1e-9, abs_tol=1e-12)
    assert not _recorder_threads(before)


def test_closing_a_stream_midway_ends_its_recording_thread(tiny_pair) -> None:
    before = frozenset(_recorder_threads())
    dec = SpeculativeDecoder(tiny_pair, "cactus-exact", k=4, temperature=1.0, trace_top_n=3)
    stream = dec.rounds(snap.PROMPTS[0], max_new_tokens=60, seed=1)
    events = iter(stream)
    first = next(events)
    assert _complete(first) and _recorder_threads(before)  # the next round's recording is running
    stream.close()
    assert not _recorder_threads(before) and stream.output is None
    # an abandoned stream ends its thread when it is collected
    events = iter(dec.rounds(snap.PROMPTS[0], max_new_tokens=60, seed=1))
    next(events)
    assert _recorder_threads(before)
    del events
    gc.collect()
    assert not _recorder_threads(before)


def test_a_consumer_that_raises_midway_leaves_no_thread(tiny_pair) -> None:
    before = frozenset(_recorder_threads())
    dec = SpeculativeDecoder(tiny_pair, "cactus", k=4, temperature=1.0, trace_top_n=3)

    def stop(rnd: Any, row: int) -> None:
        if rnd.index == 1:
            raise KeyboardInterrupt  # a cancelled run

    with pytest.raises(KeyboardInterrupt):
        dec.generate(snap.PROMPTS[2], max_new_tokens=40, seed=0, on_round=stop)
    assert not _recorder_threads(before)


def test_an_error_on_the_recording_thread_surfaces_in_the_caller(tiny_pair, monkeypatch) -> None:
    before = frozenset(_recorder_threads())

    def broken(*args: Any) -> Any:
        raise ArithmeticError("the emitted distribution went wrong")

    monkeypatch.setattr(decoder_module, "record_round", broken)
    dec = SpeculativeDecoder(tiny_pair, "cactus", k=4, temperature=1.0, trace_top_n=3)
    with pytest.raises(ArithmeticError, match="the emitted distribution went wrong") as info:
        dec.generate(snap.PROMPTS[0], max_new_tokens=20, seed=0)
    assert any("recording thread while recording round 0" in n for n in info.value.__notes__)
    assert not _recorder_threads(before)


def test_a_lean_decoder_starts_no_recording_thread(tiny_pair, monkeypatch) -> None:
    started: list[bool] = []
    monkeypatch.setattr(
        recording.Recorder,
        "submit",
        lambda *a, **k: started.append(True),  # never called
    )
    dec = SpeculativeDecoder(
        tiny_pair, "cactus", k=4, temperature=1.0, record_trace=False, measure_kl=False
    )
    out = dec.generate(snap.PROMPTS[0], max_new_tokens=16, seed=0)
    assert not started and out.stats.mean_emitted_kl is None
    assert out.stats.record_work_s <= out.stats.record_s  # all inline: no worker


def test_the_race_times_both_decoders_without_recording(tiny_pair) -> None:
    """The race measures the speedup as `experiments.estimates.speedup` defines it, recording
    outside
    the clocks: neither lane records (no trace rows, no emitted KL), and no
    recording thread is left behind."""
    before = frozenset(_recorder_threads())
    from cactus_core.app.decode.race import Race
    from cactus_core.app.shared.request import DecodeRequest
    from cactus_core.app.shared.settings import AppSettings
    from cactus_core.maths.rules import make_rule
    from cactus_core.maths.sampling import SamplingSettings

    sampling = SamplingSettings(k=3, temperature=0.7, top_k=0, top_p=1.0, seed=5)
    request = DecodeRequest(
        "Hello there", AppSettings(sampling=sampling), make_rule("cactus", delta=0.3), 16, True
    )
    race = Race.start(tiny_pair, request, "cactus δ=0.3").run()
    for lane in race.lanes:
        out = lane.output
        assert out is not None and out.stats.new_tokens > 0
        assert all(not r.positions for r in out.trace.rounds)
    assert race.speculative.output.stats.mean_emitted_kl is None  # not measured
    assert not _recorder_threads(before)
