"""The guided tour in Chromium at 1440×900: every stop opens its page with the element it
describes in view (scrolled to when it sat below, and outlined), not at the top of the page,
and without a Streamlit warning."""

from __future__ import annotations

import pytest
from test_browser import Session, server  # noqa: F401  (the app on the tiny pair)

from cactus_core.app.shared.tour import tour

pytestmark = pytest.mark.browser

FOLD = {"width": 1440, "height": 900}
IN_VIEW = """(sel) => {
  const el = document.querySelector(sel);
  if (!el) return false;
  const top = el.getBoundingClientRect().top;
  return top >= 0 && top <= window.innerHeight - 120 && el.style.outline.includes("solid");
}"""


def test_every_tour_stop_lands_on_what_it_describes(server, browser):  # noqa: F811
    s = Session(browser, server)
    try:
        s.page.set_viewport_size(FOLD)
        below = 0
        s.open()
        for i, stop in enumerate(tour()):
            if i:  # back to the Overview in the same session, as a visitor would
                s.page.get_by_role("link", name="Overview").first.click()
                s.idle()
            s.page.get_by_role("link", name=f"{i + 1}. {stop.title}").click()
            s.idle()
            sel = f".st-key-{stop.target}"
            s.page.locator(sel).first.wait_for()
            # ... below the fold before the page scrolled to it, for some stops at least
            below += s.page.evaluate("(sel) => document.querySelector(sel).offsetTop > 900", sel)
            s.page.wait_for_function(IN_VIEW, arg=sel, timeout=30_000)
            # a stop that sets a widget (stop 2, the rule) sets it without Streamlit's warning
            # about a widget given a value both ways
            assert s.page.get_by_text("Session State API").count() == 0, stop.title
            s.check()
        assert below >= 2  # the check above is not vacuous: some targets sit far down
    finally:
        s.close()
