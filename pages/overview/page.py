"""The Overview: what speculative sampling and Cactus are, one round as a picture, a card per
page, the guided tour, the notation and the rules."""

from __future__ import annotations

import streamlit as st

from cactus_core.app.overview.round_diagram import round_diagram_svg
from cactus_core.app.shared.settings import rules_markdown
from cactus_core.app.shared.tour import stop_link, tour
from cactus_core.maths.rules import RULES, CactusBudget, CactusExact
from pages.shared.navigation import PAGES, page_entry


def overview() -> None:
    st.title("Cactus Lab")
    st.markdown(
        "A large language model writes one token per forward pass. **Speculative sampling** "
        "lets a small **draft** model guess the next few tokens and the large **verifier** "
        "check all the guesses in one pass, so several tokens can come out of one expensive "
        "step. Lossless speculative sampling keeps a guess only as often as the verifier "
        "would have written it, so the text is exactly the verifier's. **Cactus** (Hao & Mou, "
        "ICLR 2026) keeps more guesses by letting the text drift from the verifier's by a "
        "small, chosen amount (δ). This lab shows what that buys in speed and what it costs "
        "in drift, measured exactly."
    )
    st.image(round_diagram_svg(), width=1000)
    st.caption(
        "One round. Every page shows these steps: Decode colours each token by how its round "
        "ended, Step through walks one round box by box, and the Playground zooms into box 3 "
        "at a single position."
    )
    others = [p for p in PAGES if not p.default]
    for col, pg in zip(st.columns(len(others)), others, strict=True):
        with col.container(border=True):
            st.page_link(pg.path, label=f"**{pg.title}**", icon=pg.icon)
            st.caption(pg.blurb)

    guided_tour()
    left, right = st.columns(2)
    with left.expander("Notation"):
        st.markdown(
            """
| symbol | meaning |
|---|---|
| p | the draft's next-token distribution (after T, top-k, top-p) |
| q | the verifier's next-token distribution (same processing) |
| n | the drafted token at a position |
| h | the distribution a rule verifies against (h = q is lossless) |
| pi | the emitted distribution: what the written token is drawn from |
| delta | Cactus's divergence budget (0 = lossless) |
| k | draft length, tokens proposed per round |

This is the paper's convention. Hugging Face and vLLM use the opposite letters (p for the
target, q for the draft).
"""
        )
    with right.expander(f"The {len(RULES)} acceptance rules"):
        st.markdown(rules_markdown())
        st.caption(
            "A round ends at the first rejection: a recovered token is drawn from the rule's "
            "residual. If all k drafts pass, a bonus token is drawn from q. Each rule in depth: "
            "docs/rules.md."
        )
    with st.expander("Worth knowing"):
        st.markdown(
            "- The paper's closed form for h_n is a second-order Taylor approximation: KL(h ‖ q) "
            "can exceed delta by 30% or more once h_n > 0.5. "
            f"`{CactusExact.name}` solves the binary-KL root and never does.\n"
            "- Even so, the emitted pi can sit further from q than delta (five times is easy to "
            "find): the residual mixes over every possible draft. The lab computes pi exactly; "
            f"`{CactusBudget.name}` bounds KL(pi ‖ q) itself.\n"
            "- Truncation decides what Cactus can rescue: with top-p or top-k, a draft outside "
            "q's nucleus has q_n = 0 and is rejected whatever delta is.\n"
            "- At T = 0 every rule is exact-match verification, and the output equals the "
            "verifier's own greedy output."
        )


def guided_tour() -> None:
    """The tour's stops, each a link that opens its page in the state the stop describes."""
    st.subheader("Guided tour")
    stops = tour()
    st.caption(
        f"{len(stops)} short stops, from what p and q are to picking delta. Each opens its "
        "page set up as the stop describes."
    )
    cols = st.columns(2)
    for i, stop in enumerate(stops):
        pg = page_entry(stop.page)
        with cols[i % 2].container(border=True):
            st.page_link(
                pg.path,
                label=f"**{i + 1}. {stop.title}**",
                icon=pg.icon,
                query_params=stop_link(i + 1),
            )
            st.caption(stop.text)
