"""AppTest of the Decode page on the tiny random pair, saved to folders and named in the
sidebar the way a user names a local model: Generate produces the decoder's own trace, the
inspector, replay, comparison and export work, and bad inputs give errors, not tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core.app.shared.links import EMBEDDED_DRAFT_LABELS, TOP_P
from cactus_core.app.shared.round_view import LiveStats, live_stats
from cactus_core.app.shared.transcript import round_tokens
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.decoding.replay import reverify
from cactus_core.maths.rules import make_rule

APP = Path(__file__).resolve().parent.parent / "app.py"
MAX_NEW = 16


@pytest.fixture(scope="module")
def pair_dirs(tiny_pair_dirs) -> tuple[str, str]:
    return str(tiny_pair_dirs[0]), str(tiny_pair_dirs[1])


def set_state(at: AppTest, **values) -> None:
    for key, value in values.items():
        at.session_state[key] = value


def decode_page(pair_dirs, seed: int = 0, **state) -> AppTest:
    """The Decode page of a fresh session whose sidebar names the tiny pair."""
    at = AppTest.from_file(APP, default_timeout=180)
    set_state(
        at,
        sb_source="Hub id or local folder",
        sb_verifier=pair_dirs[0],
        sb_draft=pair_dirs[1],
        sb_device="cpu",
        sb_seed=seed,
        dec_max_new=MAX_NEW,
        **state,
    )
    at.run()
    at.switch_page("pages/decode.py").run()
    assert not at.exception
    return at


def generate(at: AppTest, open_rounds: bool = True) -> AppTest:
    at.button(key="dec_go").click().run()
    assert not at.exception
    assert not at.error
    if open_rounds:
        open_all_rounds(at)
    return at


def open_all_rounds(at: AppTest) -> AppTest:
    """Open every round's expander, as clicking each would: a round's chips and table are
    built only while it is open."""
    run = at.session_state["decode_run"]
    for rnd in run.trace.rounds:
        at.session_state[f"dec_round_{run.run_id}_{rnd.index}"] = True
    at.run()
    assert not at.exception
    return at


def test_generate_produces_the_decoders_own_trace(pair_dirs, tiny_pair):
    at = generate(decode_page(pair_dirs, seed=3))
    run = at.session_state["decode_run"]
    # Same prompt, rule and settings straight through the library: same tokens, same fates.
    # the rule picker starts at the default rule with its own default parameters
    dec = SpeculativeDecoder(
        tiny_pair, make_rule("cactus"), k=4, temperature=0.7, top_p=TOP_P.default
    )
    want = dec.generate(run.prompt, max_new_tokens=MAX_NEW, seed=3)
    assert run.output.token_ids == want.token_ids
    assert [r.draft_fates for r in run.trace.rounds] == [r.draft_fates for r in want.trace.rounds]
    labels = {m.label: m.value for m in at.metric}
    assert labels["tokens per call"] == f"{want.stats.tokens_per_call:.2f}"
    assert labels["verifier calls"] == str(want.stats.verifier_calls)
    assert any(e.label.startswith("Round 1 ·") for e in at.expander)
    assert len(at.pills) == len(run.trace.rounds)
    assert at.download_button(key="dec_export")


def test_rounds_are_built_only_while_open(pair_dirs):
    at = generate(decode_page(pair_dirs), open_rounds=False)
    run = at.session_state["decode_run"]
    assert sum(e.label.startswith("Round ") for e in at.expander) == len(run.trace.rounds)
    assert not at.pills  # closed rounds hold no chips or tables
    at.session_state[f"dec_round_{run.run_id}_0"] = True
    at.run()
    assert not at.exception
    assert len(at.pills) == 1


def test_live_counters_use_the_final_definitions(pair_dirs):
    at = generate(decode_page(pair_dirs))
    run = at.session_state["decode_run"]
    live: LiveStats = live_stats(run.trace.rounds, run.output.stats.wall_s)
    assert live.tokens_per_call == pytest.approx(run.output.stats.tokens_per_call)
    assert live.acceptance_rate == pytest.approx(run.output.stats.acceptance_rate)


def _first_unique_chip(pills) -> int:
    """AppTest finds a chip by its label: take one that no other chip of the round shares (the
    tiny random pair's byte tokens all read as U+FFFD)."""
    labels = list(pills.options)  # AppTest lists a pills widget's options by their labels
    return next(i for i, label in enumerate(labels) if labels.count(label) == 1)


def test_clicking_a_token_opens_the_inspector(pair_dirs):
    at = generate(decode_page(pair_dirs))
    chip = _first_unique_chip(at.pills[0])
    at.pills[0].set_value(chip).run()
    assert not at.exception
    run = at.session_state["decode_run"]
    view = round_tokens(run.trace.rounds[0], None)[chip]
    assert at.session_state["dec_state"].inspected[1:] == (0, view.row, view.node)
    title = (
        "**Round 1: "
        if view.node is None and view.fate == "bonus"
        else f"**Round 1, slot {view.row + 1}"
    )
    assert any(m.value.startswith(title) for m in at.markdown)
    charts = at.get("plotly_chart")
    assert len(charts) >= 3  # timeline, the coin and the bars
    # picking in another round clears the first round's selection
    if len(at.pills) > 1:
        at.pills[1].set_value(_first_unique_chip(at.pills[1])).run()
        assert at.pills[0].value is None
        assert at.session_state["dec_state"].inspected[1] == 1


def test_replay_reports_the_librarys_flips(pair_dirs):
    at = generate(decode_page(pair_dirs))
    at.selectbox(key="replay_rule").set_value("sps").run()
    at.button(key="dec_replay").click().run()
    assert not at.exception
    run = at.session_state["decode_run"]
    want = reverify(run.trace, make_rule("sps"))
    flips = next(m for m in at.metric if m.label == "flipped drafts")
    assert flips.value == str(want.flips)
    assert run.replay.flips == want.flips


def test_compare_with_verifier_only_states_the_result(pair_dirs):
    at = generate(decode_page(pair_dirs))
    at.button(key="dec_compare").click().run()
    assert not at.exception
    verdicts = [b.value for b in (*at.warning, *at.success, *at.info)]
    assert sum(v.startswith(("Speculation is", "Neither is")) for v in verdicts) == 1
    # one speedup on screen, measured; the warm-up is listed before the clocks' start
    assert [m.label for m in at.metric if "speedup" in m.label] == ["measured speedup"]
    steps = next(m.value for m in at.markdown if "warm-up (untimed)" in m.value)
    assert steps.index("warm-up") < steps.index("clocks start")


def test_export_is_the_trace_json(pair_dirs):
    from cactus_core.engine.decoding.trace import Trace

    at = generate(decode_page(pair_dirs))
    run = at.session_state["decode_run"]
    back = Trace.from_json(run.trace.to_json())
    assert [r.emitted_ids for r in back.rounds] == [r.emitted_ids for r in run.trace.rounds]


def test_playground_takes_a_position_from_the_decode_run(pair_dirs):
    at = generate(decode_page(pair_dirs))
    at.switch_page("pages/playground.py").run()
    at.radio(key="pg_source").set_value("From a decode run").run()
    assert not at.exception
    assert not at.error
    assert at.selectbox(key="pg_run_pos").options


def test_same_seed_same_output_different_seed_different_sessions(pair_dirs):
    a = generate(decode_page(pair_dirs, seed=1)).session_state["decode_run"].output
    b = generate(decode_page(pair_dirs, seed=2)).session_state["decode_run"].output
    a2 = generate(decode_page(pair_dirs, seed=1)).session_state["decode_run"].output
    assert a.token_ids == a2.token_ids
    assert a.token_ids != b.token_ids


def test_sessions_share_one_loaded_pair(pair_dirs, monkeypatch):
    import cactus_core.engine.loading.models as models
    from pages.shared import pair as pair_page

    calls = []
    real = models.load_pair

    def counting(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(models, "load_pair", counting)
    pair_page._PAIRS.clear()
    generate(decode_page(pair_dirs, seed=1))
    generate(decode_page(pair_dirs, seed=2))
    assert len(calls) == 1


def test_bad_model_folder_is_an_error_not_a_traceback(tmp_path):
    at = AppTest.from_file(APP, default_timeout=120)
    set_state(
        at,
        sb_source="Hub id or local folder",
        sb_verifier=str(tmp_path / "nowhere"),
        sb_draft=str(tmp_path / "nowhere"),
        sb_device="cpu",
    )
    at.run()
    at.switch_page("pages/decode.py").run()
    assert not at.exception
    assert any("Could not load" in e.value for e in at.error)


def test_missing_verifier_is_an_error_not_a_traceback():
    at = AppTest.from_file(APP, default_timeout=120)
    set_state(at, sb_source="Hub id or local folder", sb_verifier="", sb_draft="")
    at.run()
    at.switch_page("pages/decode.py").run()
    assert not at.exception
    assert any("enter a verifier" in e.value for e in at.error)


def test_empty_prompt_is_an_error_not_a_traceback(pair_dirs):
    at = decode_page(pair_dirs, dec_prompt="   ")
    at.button(key="dec_go").click().run()
    assert not at.exception
    assert any("prompt" in e.value for e in at.error)


def _measured_speedup(at: AppTest) -> str:
    return next((m.value for m in at.metric if m.label == "measured speedup"), "–")


def test_measured_speedup_belongs_to_the_run_it_measured(pair_dirs):
    # The comparison measures the run on screen; a new Generate with other settings is
    # another run, whose speedup nobody has measured yet.
    at = generate(decode_page(pair_dirs), open_rounds=False)
    at.button(key="dec_compare").click().run()
    assert not at.exception
    assert _measured_speedup(at).endswith("×")
    at.session_state["sb_seed"] = 7
    generate(at, open_rounds=False)
    assert _measured_speedup(at) == "–"
    shown = [*at.warning, *at.success, *at.info]
    assert not any(v.value.startswith(("Speculation is", "Neither is")) for v in shown)


@pytest.mark.slow
@pytest.mark.parametrize(
    "choice", ["feature draft, bfloat16", "feature draft, float32", "3-layer draft, float32"]
)
def test_each_embedded_draft_decodes_on_the_page(choice):
    """Each of the sidebar's choices decodes on the Decode page and names its draft, and only a
    pair other than the reference's (the feature draft in bfloat16) says the reference is
    another pair's. The default choice (the feature draft in this CPU's faster dtype) is
    reached by picking nothing, so the page's default is tested on the same decode."""
    from cactus_core.engine.loading.embedded_drafts import (
        DEFAULT_EMBEDDED_DRAFT,
        FEATURE_DRAFT_NAME,
        REFERENCE_EMBEDDED_DRAFT,
    )
    from cactus_core.engine.loading.models import embedded_draft_name
    from pages.shared import pair as pair_page

    pair_page._PAIRS.clear()
    at = AppTest.from_file(APP, default_timeout=300)
    assert choice in EMBEDDED_DRAFT_LABELS
    picked = {} if choice == DEFAULT_EMBEDDED_DRAFT else {"sb_embedded_draft": choice}
    set_state(
        at, sb_source="Embedded pair (offline)", sb_device="cpu", dec_max_new=MAX_NEW, **picked
    )
    at.run()
    at.switch_page("pages/decode.py").run()
    assert not at.exception
    generate(at, open_rounds=False)
    run = at.session_state["decode_run"]
    feature = choice.startswith("feature draft")
    assert run.trace.meta["draft"] == (FEATURE_DRAFT_NAME if feature else embedded_draft_name())
    # The default prompt may end at the end token before MAX_NEW.
    assert 0 < len(run.output.token_ids) <= MAX_NEW
    # The reference frontier beside the rule is the default pair's; the page says when not.
    other_pair = any("not on the pair you picked" in c.value for c in at.caption)
    assert other_pair == (choice != REFERENCE_EMBEDDED_DRAFT)
    pair_page._PAIRS.clear()


def test_results_of_an_earlier_setting_say_so(pair_dirs):
    """After Generate, changing the rule or the prompt leaves run 1's counters and text on
    screen marked as run 1's, naming what changed; Generate clears the mark."""
    at = generate(decode_page(pair_dirs), open_rounds=False)
    assert not [w for w in at.warning if "Run 1's results" in w.value]
    at.selectbox(key="dec_rule").set_value("sps").run()
    stale = [w.value for w in at.warning if "Run 1's results" in w.value]
    assert stale and "the rule (from cactus δ=" in stale[0]
    at.text_area(key="dec_prompt").set_value("Name three deserts.").run()
    stale = [w.value for w in at.warning if "Run 1's results" in w.value]
    assert stale and "the prompt" in stale[0]
    generate(at, open_rounds=False)
    assert not [w for w in at.warning if "results, from before" in w.value]
