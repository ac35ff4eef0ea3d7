"""The Playground in words: every rule has its own plain sentence (shown beside the rule in
focus), and each preset's note is worded from the numbers on screen, so it turns when they do."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from cactus_core.app.playground import comparison as P
from cactus_core.app.shared.positions import PRESETS, STORIES, WORKED_EXAMPLE, with_drafted
from cactus_core.maths.rules import RULES
from cactus_core.maths.rules.table import rule_anchor

APP = Path(__file__).resolve().parent.parent / "app.py"
FLAT = PRESETS["Flat verifier, peaky draft"]
NUCLEUS = PRESETS["Outside the verifier's nucleus (top-p)"]


def _note(position, delta: float) -> P.Note | None:
    rows = P.compare_rules(position, P.playground_rules({P.headline_group().key: delta}))
    return P.position_note(position, rows, delta)


def test_every_rule_has_its_own_sentence_and_a_docs_heading():
    docs = (Path(__file__).resolve().parent.parent / "docs" / "rules.md").read_text()
    sentences = set()
    for name, cls in RULES.items():
        assert "card" in vars(cls), f"{name} inherits its card"
        assert cls.card.in_words.endswith(".") and 40 < len(cls.card.in_words) < 260, name
        sentences.add(cls.card.in_words)
        assert f"### `{name}`" in docs and rule_anchor(name) == f"docs/rules.md#{name}"
    assert len(sentences) == len(RULES)


def test_tas_says_why_its_residual_sits_on_the_drafted_token():
    # The worked example drafts q's most likely token: tas's residual (argmax q) is that token.
    worked = PRESETS[WORKED_EXAMPLE]
    rows = {r.name: r for r in P.compare_rules(worked, P.playground_rules())}
    assert float(rows["tas"].residual[worked.drafted]) == 1.0
    words = P.rule_words(worked, rows["tas"])
    assert len(words) == 2 and "drafted token itself" in words[1]
    assert len(P.rule_words(worked, rows["sps"])) == 1  # sps's residual is never on n


@pytest.mark.parametrize(
    ("delta", "more"), [(0.1, True), (0.88, True), (0.89, False), (1.5, False)]
)
def test_the_drift_note_follows_kl_against_delta(delta, more):
    # KL(pi ‖ q) = 0.887 from delta ≈ 0.87 on: the statement turns between 0.88 and 0.89.
    rows = {r.name: r for r in P.compare_rules(FLAT, P.playground_rules({"delta": delta}))}
    kl = f"{rows['cactus'].kl_pi_q:.3f}"
    note = _note(FLAT, delta)
    assert note is not None and not note.warning
    assert f"KL(π ‖ q) = {kl} nats" in note.text
    assert ("nats is more than δ" in note.text) == more
    assert ("nats is within δ" in note.text) != more
    assert (float(kl) > delta) == more


def test_every_preset_note_quotes_the_cards():
    for name, position in PRESETS.items():
        assert position.story in STORIES, name
        for delta in (0.0, 0.21, 1.0):
            rows = P.compare_rules(position, P.playground_rules({"delta": delta}))
            note = P.position_note(position, rows, delta)
            assert note is not None, name
            if not note.warning:
                main = next(r for r in rows if r.name == "cactus")
                quoted = (f"{main.kl_h_q:.3f}", f"{main.kl_pi_q:.3f}", f"{main.accept_drafted:.1%}")
                assert any(x in note.text for x in quoted) or "inside" in note.text, name
    assert "82.4%" in _note(PRESETS[WORKED_EXAMPLE], 0.21).text  # the README's numbers
    assert "0.197" in _note(PRESETS[WORKED_EXAMPLE], 0.21).text
    # the nucleus preset: the warning when its draft is cut, a note for a token inside
    assert _note(NUCLEUS, 1.0).warning
    inside = _note(with_drafted(NUCLEUS, 0), 1.0)
    assert not inside.warning and "London, Rome" in inside.text


def test_the_page_shows_the_sentence_and_one_alert():
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("pages/playground.py").run()
    assert not at.exception
    captions = " ".join(c.value for c in at.caption)
    assert RULES["cactus"].card.in_words in captions and "docs/rules.md#cactus" in captions
    at.segmented_control(key="pg_focus").set_value("tas").run()
    captions = " ".join(c.value for c in at.caption)
    assert (
        RULES["tas"].card.in_words in captions and RULES["tas"].card.residual_in_words in captions
    )
    at.selectbox(key="pg_preset").set_value("Flat verifier, peaky draft").run()
    at.select_slider(key="pg_delta").set_value(1.5).run()
    assert [i.value for i in at.info if "KL(π ‖ q)" in i.value] == [_note(FLAT, 1.5).text]
    at.select_slider(key="pg_delta").set_value(0.5).run()
    assert "more than δ = 0.5" in " ".join(i.value for i in at.info)
    at.selectbox(key="pg_preset").set_value("Outside the verifier's nucleus (top-p)").run()
    assert not at.exception
    assert len(at.warning) + len(at.info) == 1 and len(at.warning) == 1
