"""The guided tour in Chromium at 1440×900: every stop opens its page with the element it
describes in view (scrolled to when it sat below, and outlined), not at the top of the page,
and without a Streamlit warning; the sidebar names the stop and links the next one."""

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
        stops = tour()
        for i, stop in enumerate(stops):
            if i:  # back to the Overview in the same session, as a visitor would
                s.page.get_by_role("link", name="Overview").first.click()
                s.idle()
            s.page.get_by_role("link", name=f"{i + 1}. {stop.title}", exact=True).click()
            s.idle()
            # the sidebar says which stop this is and links the next one
            box = s.page.locator(".st-key-tour_next")
            box.get_by_text(f"stop {i + 1} of {len(stops)}").wait_for()
            if i + 1 < len(stops):
                nxt = f"Next stop: {i + 2}. {stops[i + 1].title}"
                assert box.get_by_role("link", name=nxt).count() == 1
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
        # "Next stop" from the second-to-last stop opens the last one
        s.page.get_by_role("link", name="Overview").first.click()
        s.idle()
        s.page.get_by_role("link", name=f"{len(stops) - 1}. {stops[-2].title}", exact=True).click()
        s.idle()
        s.page.get_by_role("link", name=f"Next stop: {len(stops)}. {stops[-1].title}").click()
        s.idle()
        s.page.locator(f".st-key-{stops[-1].target}").first.wait_for()
        s.page.get_by_text("That is the last stop").wait_for()
    finally:
        s.close()
