"""The guided tour on the Overview: short stops across the pages, each a page, the query
string (links.py's names) that opens it in the right state, and the element on that page the
stop describes, which the page scrolls into view and outlines when the stop opens."""

from __future__ import annotations

import json
from dataclasses import dataclass

from cactus_core.app.shared.param_groups import headline_group
from cactus_core.app.shared.positions import WORKED_EXAMPLE
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULES


@dataclass(frozen=True)
class TourStop:
    title: str
    text: str
    page: str  # url_path
    query: dict[str, str]
    # The key of the element the stop describes: Streamlit gives a keyed element the class
    # st-key-<key>, and the stop's link asks the page to bring it into view (FOCUS_PARAM).
    target: str

    @property
    def link_query(self) -> dict[str, str]:
        """The stop's link: its settings and the element to bring into view."""
        return {**self.query, FOCUS_PARAM: self.target}


# Query parameters of a tour link: the element to scroll to, and the stop's number (1 on). No
# page keeps them in its URL (they are one-shots, like Step through's `jump`), so a copied link
# opens at the top.
FOCUS_PARAM = "focus"
STOP_PARAM = "stop"


def stop_link(number: int) -> dict[str, str]:
    """The query string of tour stop `number` (1 on): its settings, its element, its number."""
    return {**tour()[number - 1].link_query, STOP_PARAM: str(number)}


def stop_number(raw: str | None) -> int | None:
    """The tour stop a link names, if it is one (1 … the number of stops)."""
    if raw is None or not raw.isdigit():
        return None
    number = int(raw)
    return number if 1 <= number <= len(tour()) else None


def tour() -> list[TourStop]:
    delta = RULES[DEFAULT_RULE].swept().name  # the default rule's budget parameter
    group = headline_group().key  # the Playground's widget for it
    same_coins = {"seed": "0", "k": "4", "T": "0.7"}
    return [
        TourStop(
            "What p and q are",
            "One position, no model: the draft's p and the verifier's q over three tokens. At "
            "delta = 0 the rule is lossless and accepts the drafted token with q_n / p_n.",
            "playground",
            {"preset": WORKED_EXAMPLE, group: "0"},
            "pg_figures",
        ),
        TourStop(
            "A lossless round",
            "A real round on the model pair under lossless sampling: the draft proposes, the "
            "verifier scores all positions in one pass, and each draft meets its coin. Press "
            "Next step.",
            "step",
            {"rule": LOSSLESS_RULE, "round": "0", "step": "0", **same_coins},
            "step_card",
        ),
        TourStop(
            "A rejection",
            "The first draft lossless sampling rejects: a(n) = q_n / p_n lost to its coin, and "
            "the replacement drawn from the residual (q − p)+.",
            "step",
            {"rule": LOSSLESS_RULE, "jump": "rejection", **same_coins},
            "step_card",
        ),
        TourStop(
            "Cactus's bend",
            "Cactus verifies against h: q raised at the drafted token by at most delta nats "
            "and lowered elsewhere. The worked example: acceptance from 43.75% to 82.4%.",
            "playground",
            {"preset": WORKED_EXAMPLE, group: "0.21"},
            "pg_figures",
        ),
        TourStop(
            "The same coins under Cactus",
            "The same prompt, seed and coins, now under Cactus (δ = 1): the page opens at the "
            "run's first draft Cactus accepts where lossless sampling, on the very same coin, "
            "rejects it. That is usually a later round than the last stop's; the round number "
            "is above the step.",
            "step",
            {"rule": DEFAULT_RULE, delta: "1", "jump": "rescue", **same_coins},
            "step_card",
        ),
        TourStop(
            "What it costs",
            "Press Generate: the counters give the emitted KL per token, the price of the "
            "extra acceptance, and 'Why drafts get rejected' shows what more delta would buy.",
            "decode",
            {"rule": DEFAULT_RULE, delta: "1", **same_coins},
            "dec_go",
        ),
        TourStop(
            "The frontier, and picking delta",
            "Tokens per call against emitted KL for every rule, and the limit no rule can pass. "
            "Enter a KL budget to get the delta that meets it.",
            "frontier",
            {"budget": "0.05"},
            "fr_ref_budget",
        ),
    ]


def tour_target(raw: str | None) -> str | None:
    """The element a link asks to bring into view, if it is one a tour stop names. The name
    goes into a script, so anything else in a URL is refused rather than quoted."""
    return raw if raw in {stop.target for stop in tour()} else None


def focus_script(target: str) -> str:
    """A script that brings the element keyed `target` into view once the page has drawn it,
    and outlines it for a few seconds. It waits for the app to finish its run (elements above
    the target are still growing until then), scrolls only when the element's top is out of
    the upper part of the window, and stops once the element has stayed put."""
    selector = json.dumps(f".st-key-{tour_target(target) or ''}")
    return f"""<script>
(() => {{
  const sel = {selector};
  let tries = 0, still = 0, last = null;
  const timer = setInterval(() => {{
    tries += 1;
    const el = document.querySelector(sel);
    const app = document.querySelector('[data-testid="stApp"]');
    const idle = app && app.getAttribute("data-test-script-state") === "notRunning";
    if (tries > 600) {{ clearInterval(timer); return; }}
    if (!el || !idle) return;
    el.style.scrollMarginTop = "5rem";  // below the app's fixed header
    const top = el.getBoundingClientRect().top;
    if (top < 60 || top > 0.6 * window.innerHeight) {{
      el.scrollIntoView({{ block: "start" }});
    }}
    if (last === null) {{
      el.style.outline = "3px solid #e0a800";
      el.style.outlineOffset = "6px";
      el.style.borderRadius = "0.5rem";
      setTimeout(() => {{ el.style.outline = ""; }}, 5000);
    }}
    const now = el.getBoundingClientRect().top;
    still = last !== null && Math.abs(now - last) < 1 ? still + 1 : 0;
    last = now;
    if (still >= 4) clearInterval(timer);
  }}, 250);
}})();
</script>"""
