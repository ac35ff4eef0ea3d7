"""The guided tour on the Overview: short stops across the pages, each a page and the query
string (links.py's names) that opens it in the right state."""

from __future__ import annotations

from dataclasses import dataclass

from cactus_core.app.playground import headline_group
from cactus_core.app.positions import WORKED_EXAMPLE
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULES


@dataclass(frozen=True)
class TourStop:
    title: str
    text: str
    page: str  # url_path
    query: dict[str, str]


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
        ),
        TourStop(
            "A lossless round",
            "A real round on the model pair under lossless sampling: the draft proposes, the "
            "verifier scores all positions in one pass, and each draft meets its coin. Press "
            "Next step.",
            "step",
            {"rule": LOSSLESS_RULE, "round": "0", "step": "0", **same_coins},
        ),
        TourStop(
            "A rejection",
            "The first draft lossless sampling rejects: a(n) = q_n / p_n lost to its coin, and "
            "the replacement drawn from the residual (q − p)+.",
            "step",
            {"rule": LOSSLESS_RULE, "jump": "rejection", **same_coins},
        ),
        TourStop(
            "Cactus's bend",
            "Cactus verifies against h: q raised at the drafted token by at most delta nats "
            "and lowered elsewhere. The worked example: acceptance from 43.75% to 82.4%.",
            "playground",
            {"preset": WORKED_EXAMPLE, group: "0.21"},
        ),
        TourStop(
            "The same coins under Cactus",
            "The same round, same coins, under Cactus: the first draft it accepts where "
            "lossless sampling, on the very same coin, would have rejected.",
            "step",
            {"rule": DEFAULT_RULE, delta: "1", "jump": "rescue", **same_coins},
        ),
        TourStop(
            "What it costs",
            "Press Generate: the counters give the emitted KL per token, the price of the "
            "extra acceptance, and 'Why drafts get rejected' shows what more delta would buy.",
            "decode",
            {"rule": DEFAULT_RULE, delta: "1", **same_coins},
        ),
        TourStop(
            "The frontier, and picking delta",
            "Tokens per call against emitted KL for every rule, and the limit no rule can pass. "
            "Enter a KL budget to get the delta that meets it.",
            "frontier",
            {"budget": "0.05"},
        ),
    ]
