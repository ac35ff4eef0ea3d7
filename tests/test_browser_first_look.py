"""A first-time visitor's look at the app in Chromium at 1440×900, in one page load and a few
clicks: the main controls sit above the fold, a typed prompt survives a visit to another page,
the default Generate shows no raw special token, and no two rules share a colour on the
Frontier page."""

from __future__ import annotations

import pytest
from test_browser import Session, server  # noqa: F401  (the app on the tiny pair)

from cactus_core.app.shared.links import DECODE_MAX_NEW, TOP_P
from cactus_core.app.shared.rule_style import rule_colour
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.maths.rules import DEFAULT_RULE, RULE_NAMES, make_rule

pytestmark = pytest.mark.browser

FOLD = {"width": 1440, "height": 900}
PROMPT = "Tell me about the saguaro."
SEED = 1  # on the tiny pair, this run ends at the end token


def below_fold(s: Session, locator) -> float:
    box = locator.bounding_box()
    assert box is not None
    return box["y"] + box["height"] - FOLD["height"]


def test_first_look_at_1440_by_900(server, browser, tiny_pair):  # noqa: F811
    # The default run of PROMPT emits a special token on the tiny pair: the check below is real.
    dec = SpeculativeDecoder(
        tiny_pair, make_rule(DEFAULT_RULE), k=4, temperature=0.7, top_p=TOP_P.default
    )
    ids = dec.generate(PROMPT, max_new_tokens=DECODE_MAX_NEW, seed=SEED).token_ids
    assert set(ids) & set(tiny_pair.tokenizer.all_special_ids)

    s = Session(browser, server)
    try:
        s.page.set_viewport_size(FOLD)
        s.open("decode")
        s.set_seed(SEED)
        generate = s.page.locator("button", has_text="Generate").first
        assert below_fold(s, generate) <= 0
        box = s.page.get_by_role("textbox", name="Prompt")
        box.fill(PROMPT)
        box.press("Control+Enter")
        s.idle()
        generate.click()
        s.wait_run(1)
        text = s.transcript()
        assert "<|" not in text and "|>" not in text
        assert "«" in text  # the end marker or a special token's name, never the raw token

        # Through another page and back: the prompt is the typed one, and so is the link.
        s.page.get_by_role("link", name="Playground").click()
        s.idle()
        s.page.get_by_role("link", name="Decode").first.click()
        s.idle()
        assert s.page.get_by_role("textbox", name="Prompt").input_value() == PROMPT
        assert "saguaro" in s.page.url
        s.check()

        s.page.get_by_role("link", name="Step through").first.click()
        s.idle()
        s.page.locator(".st-key-step_card").wait_for()
        assert below_fold(s, s.page.locator("button", has_text="Next step").first) <= 0
        # the step's title and narration are in view beside the controls
        card = s.page.locator(".st-key-step_card").bounding_box()
        assert card["y"] + 120 <= FOLD["height"]
        s.check()

        s.page.get_by_role("link", name="Frontier").first.click()
        s.idle()
        s.page.locator(".js-plotly-plot").first.wait_for()
        traces = s.page.evaluate(
            "() => document.querySelectorAll('.js-plotly-plot')[0].data"
            ".map(t => [t.meta, t.marker && t.marker.color])"
        )
        # a trace's meta is its rule (its legend name may say "(estimated π)")
        colours = {rule: colour for rule, colour in traces if rule in RULE_NAMES}
        assert len(colours) == len(RULE_NAMES)
        assert len(set(colours.values())) == len(colours)
        assert all(colours[r] == rule_colour(r) for r in colours)
        s.check()
    finally:
        s.close()
