"""The Decode page's compact frontier: the last run's × belongs to the run's rule (it goes when
another rule is picked), and the caption names every mark, the limit's dotted line too."""

from __future__ import annotations

import json

import pytest
from test_app_decode import decode_page, generate

from cactus_core.app.shared.reference import compact_caption


@pytest.fixture(scope="module")
def pair_dirs(tiny_pair_dirs) -> tuple[str, str]:
    return str(tiny_pair_dirs[0]), str(tiny_pair_dirs[1])


def frontier_traces(at) -> list[str]:
    chart = next(c for c in at.get("plotly_chart") if "dec_frontier" in c.proto.id)
    return [t.get("name") for t in json.loads(chart.proto.spec)["data"]]


def test_the_runs_mark_goes_with_its_rule(pair_dirs):
    at = generate(decode_page(pair_dirs), open_rounds=False)
    assert "this run" in frontier_traces(at)
    at.selectbox(key="dec_rule").set_value("tas").run()
    assert not at.exception
    assert "this run" not in frontier_traces(at)
    assert any(c.value == compact_caption(False, True) for c in at.caption)


def test_the_caption_names_the_dotted_limit():
    text = compact_caption(True, True)
    assert "dotted: the limit" in text and "×: your last run" in text and "dashed" in text
