"""The race view's pieces without a browser: both lanes decode what the library decodes, take
turns by the tokens they have written, and the figure shows every round; every rule keeps its
own colour on every chart; the reference's pair reads in words; special tokens never show raw."""

from __future__ import annotations

import pytest

from cactus_core.app.decode.race import CLOCKS_START, EQUAL_WORK, WARM_UP, Race, race_figure
from cactus_core.app.frontier.figures import frontier_chart
from cactus_core.app.playground.comparison_figure import rule_comparison_figure
from cactus_core.app.shared.reference import compact_frontier, pair_in_words, reference_part
from cactus_core.app.shared.request import DecodeRequest
from cactus_core.app.shared.rule_style import SHOWN_FIRST, STYLES, rule_colour, style
from cactus_core.app.shared.settings import AppSettings
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.loading.pair import END_MARKER, token_display
from cactus_core.experiments.estimates.rule_comparison import RulePoint
from cactus_core.experiments.sweeps.config import BASELINE
from cactus_core.experiments.sweeps.reference import load_reference
from cactus_core.maths.rules import RULE_NAMES, RULES, make_rule
from cactus_core.maths.sampling import SamplingSettings


@pytest.fixture(scope="module")
def race(tiny_pair):
    sampling = SamplingSettings(k=3, temperature=0.7, top_k=0, top_p=1.0, seed=5)
    request = DecodeRequest(
        "Hello there", AppSettings(sampling=sampling), make_rule("cactus", delta=0.3), 24, True
    )
    race = Race.start(tiny_pair, request, "cactus δ=0.3")
    order = []
    while True:
        before = {lane.name: lane.tokens for lane in race.lanes if not lane.done}
        counts = {lane.name: len(lane.rounds) for lane in race.lanes}
        if not race.step():
            break
        moved = [lane.name for lane in race.lanes if len(lane.rounds) != counts[lane.name]]
        if moved and len(before) == 2:
            # the lane that moved was the one behind in tokens written
            assert before[moved[0]] == min(before.values())
        order.extend(moved)
    return race, order


def test_race_lanes_decode_what_the_library_decodes(race, tiny_pair):
    race, order = race
    dec = SpeculativeDecoder(
        tiny_pair, make_rule("cactus", delta=0.3), k=3, temperature=0.7, top_p=1.0
    )
    spec = dec.generate("Hello there", max_new_tokens=24, seed=5)
    base = dec.generate_autoregressive("Hello there", max_new_tokens=24, seed=5)
    assert race.speculative.output.token_ids == spec.token_ids
    assert race.verifier_only.output.token_ids == base.token_ids
    assert race.speculative.tokens == len(spec.token_ids)
    assert race.verifier_only.tokens == len(base.token_ids)
    # the turns interleave: both lanes move before either finishes
    assert set(order[:4]) == {"speculative", "verifier only"}
    for lane in race.lanes:
        times = [r.t for r in lane.rounds]
        assert times == sorted(times) and times[-1] <= lane.clock
    cmp = race.comparison()
    assert cmp.tokens_per_call == pytest.approx(spec.stats.tokens_per_call)
    assert cmp.speedup > 0
    # the clocks time decoding only: neither lane records the lab's trace rows or exact KL
    for lane in race.lanes:
        assert all(not r.positions for r in lane.output.trace.rounds)
    assert race.speculative.output.stats.mean_emitted_kl is None  # no exact KL measured


def test_one_time_work_runs_before_either_clock(race):
    race, _ = race
    what = [(e.what, e.lane) for e in race.events]
    # each decoder ran once on the prompt, untimed, and only then did the clocks start
    assert what[:3] == [
        (WARM_UP, "speculative"),
        (WARM_UP, "verifier only"),
        (CLOCKS_START, ""),
    ]
    assert all(e.seconds > 0 for e in race.events[:2])
    assert {lane for w, lane in what[3:] if w == "finished"} == {"speculative", "verifier only"}


def test_race_figure_has_every_round_and_the_headline_is_its_equal_work(race):
    race, _ = race
    work = race.equal_work()
    fig = race_figure(race.lanes, work)
    assert [t.meta for t in fig.data] == ["speculative", "verifier only", EQUAL_WORK]
    for trace, lane in zip(fig.data[:2], race.lanes, strict=True):
        # the first round (with the prefill) is the start, then one point per round
        assert len(trace.x) == len(lane.rounds) and (trace.x[0], trace.y[0]) == (0, 0)
        assert trace.y[-1] == lane.tokens - len(lane.rounds[0].tokens)
        assert list(trace.x) == sorted(trace.x)
    # the line of equal work meets both lanes at the same tokens, and its ratio is the headline
    spec, base, line = fig.data
    assert line.y[0] == line.y[1] == work.tokens
    assert (line.x[0], line.y[0]) in set(zip(spec.x, spec.y, strict=True))
    assert (line.x[1], line.y[1]) in set(zip(base.x, base.y, strict=True))
    cmp = race.comparison()
    assert cmp.speedup == pytest.approx(line.x[1] / line.x[0])
    assert cmp.spread is None or cmp.spread.low <= cmp.speedup <= cmp.spread.high
    assert f"over the same {work.tokens} tokens" in cmp.verdict()


def test_every_rule_has_its_own_colour_everywhere():
    assert set(STYLES) == set(RULE_NAMES)
    colours = [style(r).colour for r in RULE_NAMES]
    assert len(set(colours)) == len(colours)
    part = load_reference().for_top_p(1.0)
    fig = frontier_chart(part.rows, "tokens_per_call")
    rules = [t for t in fig.data if t.meta in RULE_NAMES]
    assert {t.meta for t in rules} == {r["rule"] for r in part.rows} - {BASELINE}
    for t in rules:
        assert t.marker.color == rule_colour(t.meta)
        # a rule whose pi is estimated (FLy, the learned judge) says so in its name and with
        # an open marker
        estimated = t.name == f"{t.meta} (estimated π)"
        assert estimated == RULES[t.meta].caps.overrides_sps or t.name == t.meta
        own = style(t.meta).symbol
        assert t.marker.symbol == (f"{own}-open" if estimated else own)
        # a few rules first, the rest one legend click away
        assert (t.visible is not False and t.visible != "legendonly") == (t.meta in SHOWN_FIRST)
    # the legend sits beside the plot, not in the title's band
    assert fig.layout.legend.orientation == "v" and fig.layout.legend.x > 1
    compact = compact_frontier(part, "tas", {"epsilon": 0.01})
    assert not compact.layout.showlegend
    assert {t.line.color for t in compact.data if t.name == "tas (estimated)"} == {
        rule_colour("tas")
    }
    docs = rule_comparison_figure(
        {"top-p 1": [RulePoint("fuzzy", "fuzzy JS≤0.1", 0.1, 2.0, 1.9, 2.1, 0.9)]}
    )
    assert docs.data[0].line.color == rule_colour("fuzzy")


def test_reference_pair_in_words():
    ref = load_reference()
    words = pair_in_words(ref.model)
    assert "#" not in words and "|" not in words and "torch." not in words
    assert words.startswith("verifier SmolLM2-135M-Instruct")
    assert (
        pair_in_words("verifier=a#1|draft=b#2|dtype=torch.float32")
        == "verifier a, draft b, in float32"
    )
    part, note = reference_part(ref, SamplingSettings(temperature=0.7, top_p=0.95, k=4))
    assert part.top_p == 0.95 and note is None  # the app's default sampling is the reference's


def test_special_tokens_never_show_raw(tiny_pair):
    tok = tiny_pair.tokenizer
    eos = {tok.eos_token_id}
    assert token_display(tok, tok.eos_token_id, eos) == END_MARKER
    assert token_display(tok, tok.convert_tokens_to_ids("<|im_start|>"), eos) == "«im_start»"
    assert token_display(tok, tok.convert_tokens_to_ids("a"), eos) == "a"


def test_round_diagram_is_one_svg_with_the_four_steps():
    from xml.etree import ElementTree

    from cactus_core.app.overview.round_diagram import round_diagram_svg

    svg = ElementTree.fromstring(round_diagram_svg())
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert [t for t in texts if "·" in t] == [
        "1 · Draft",
        "2 · Verify",
        "3 · Accept or resample",
        "4 · Bonus",
    ]
    assert len(list(svg.iter("{http://www.w3.org/2000/svg}rect"))) == 4
