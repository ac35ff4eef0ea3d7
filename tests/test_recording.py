"""Recording off the critical path records the same numbers: the trace rows, the exact
emitted KL and the stats equal, bit for bit, the snapshot taken with the recording inline
(tests/recording_snapshot.py)."""

from __future__ import annotations

from tests import recording_snapshot as snap


def test_trace_and_stats_equal_the_inline_recording_bit_for_bit(tiny_pair) -> None:
    want = snap.load()
    got = snap.snapshot(tiny_pair)
    assert set(got) == set(want)
    for rule, cases in want.items():
        for case, value in cases.items():
            assert got[rule][case] == value, (rule, case)
