"""Cactus Lab: `streamlit run app.py`.

The entry point runs on every rerun of every page: it sets up navigation, draws the shared
sidebar (model pair, sampling, k, seed) into st.session_state, then runs the chosen page.
The Overview page is defined here; the others live in pages/.
"""

from __future__ import annotations

import logging
import os

import streamlit as st

from cactus_core.app.links import (
    EMBEDDED_DRAFT_KEY,
    EMBEDDED_DRAFT_LABELS,
    SEED,
    SOURCES,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    K,
    Slider,
)
from cactus_core.app.round_diagram import round_diagram_svg
from cactus_core.app.settings import (
    AppSettings,
    available_devices,
    public_draft_choices,
    public_pair,
    rules_markdown,
)
from cactus_core.app.tour import tour
from cactus_core.engine.loading.deployment import DeploymentPolicy, deployment_policy
from cactus_core.engine.loading.embedded_drafts import EMBEDDED_DRAFTS
from cactus_core.maths.rules import RULES, CactusBudget, CactusExact
from cactus_core.maths.sampling import SamplingSettings
from pages._common import (
    GOTO_PARAM,
    SETTINGS_ERROR_KEY,
    SETTINGS_KEY,
    copy_link,
    keep_widget_state,
    preload_pair,
    restore_link,
    set_pair_error_slot,
    set_pair_status_slot,
    warm_label,
    write_link,
)
from pages._drafting import tree_widgets
from pages._tour import bring_into_view, take_focus

st.set_page_config(page_title="Cactus Lab", page_icon="🌵", layout="wide")
# Streamlit's default 6rem above every page pushed the controls toward the fold at 1440×900.
st.html("<style>[data-testid='stMainBlockContainer']{padding-top:2.5rem;}</style>")

EMBEDDED, CUSTOM = SOURCES  # the pair's source: the radio's two options


def _pair_widgets(policy: DeploymentPolicy) -> tuple[dict[str, str | None], str | None]:
    """The pair as AppSettings' keywords (verifier/draft None: embedded; labels where a public
    server names them) and what is missing, if anything."""
    st.markdown("### Model pair")
    if policy.public:
        return _offered_pair(policy.choices())
    source = st.radio("Source", [EMBEDDED, CUSTOM], key="sb_source")
    verifier = draft = ""
    if source == CUSTOM:
        verifier = st.text_input(
            "Verifier",
            key="sb_verifier",
            placeholder="HuggingFaceTB/SmolLM2-1.7B-Instruct or /path/to/folder",
        ).strip()
        draft = st.text_input(
            "Draft (empty: the embedded draft)",
            key="sb_draft",
            placeholder="HuggingFaceTB/SmolLM2-135M-Instruct or /path/to/folder",
        ).strip()
    missing = None
    if source == CUSTOM and not verifier:
        missing = "enter a verifier (a hub id or a local folder)"
    pair: dict[str, str | None] = {"verifier": verifier or None, "draft": draft or None}
    if source == EMBEDDED:
        pair["embedded_draft"] = _embedded_draft_widget()
    return pair, missing


def _embedded_draft_widget() -> str:
    """Which shipped draft the embedded verifier drafts with (EMBEDDED_DRAFTS)."""
    return st.selectbox(
        "Draft",
        EMBEDDED_DRAFT_LABELS,
        key=EMBEDDED_DRAFT_KEY,
        help="\n\n".join(f"**{d.label}**: {d.description}" for d in EMBEDDED_DRAFTS),
    )


def _offered_pair(choices: dict[str, str | None]) -> tuple[dict[str, str | None], str | None]:
    """A public server: only the models its operator offers, picked by label. There is no
    free-text field, so a visitor cannot name (or probe) anything on the server's disk."""
    v_label = st.selectbox(
        "Model", list(choices), key="sb_offer_verifier", help="The models this server offers."
    )
    d_label = None
    embedded = None
    if choices.get(v_label) is not None:
        d_label = st.selectbox(
            "Draft", public_draft_choices(choices), key="sb_offer_draft",
            help="It must share the verifier's tokenizer.",
        )  # fmt: skip
    else:
        embedded = _embedded_draft_widget()
    try:
        pick = public_pair(choices, v_label, d_label)
    except ValueError as err:
        return {}, str(err)
    pair = {
        "verifier": pick.verifier,
        "draft": pick.draft,
        "verifier_label": pick.verifier_label,
        "draft_label": pick.draft_label,
    }
    if embedded is not None:
        pair["embedded_draft"] = embedded
    return pair, None


def _slider(spec: Slider, help: str | None = None) -> float:
    """A sidebar slider from its spec in links.py (where links read its range too). The
    default goes into session state, not `value`, so a link may set the key first."""
    st.session_state.setdefault(spec.key, spec.default)
    return st.slider(spec.label, spec.low, spec.high, step=spec.step, key=spec.key, help=help)


def _number(spec: Slider, help: str | None = None) -> int:
    st.session_state.setdefault(spec.key, int(spec.default))
    return st.number_input(
        spec.label, int(spec.low), int(spec.high), step=int(spec.step), key=spec.key, help=help
    )


def _sampling_widgets() -> dict[str, float | int]:
    """SamplingSettings' fields, as the widgets hold them."""
    st.markdown("### Sampling")
    temperature = _slider(
        TEMPERATURE, "T = 0 is greedy: p and q become one-hot and every rule is exact match."
    )
    top_k = _number(TOP_K, "Applied to p and q alike.")
    top_p = _slider(TOP_P, "A draft outside q's nucleus has q_n = 0; no delta rescues it.")
    st.markdown("### Speculation")
    k = _slider(K)
    seed = _number(SEED)
    return {
        "temperature": float(temperature),
        "top_k": int(top_k),
        "top_p": float(top_p),
        "k": int(k),
        "seed": int(seed),
    }


def _pair_status(s: AppSettings) -> None:
    loading = preload_pair(s)
    warm = warm_label(s)
    # A page that loads the pair later in this run rewrites this line (`get_pair`).
    slot = st.empty()
    set_pair_status_slot(slot)
    if warm:
        slot.caption(f"Loaded: {warm}")
    elif loading:
        slot.caption("Loading the embedded pair in the background for the Decode page.")
    else:
        slot.caption("Models load on the Decode page.")


def _policy() -> DeploymentPolicy | None:
    """This server's deployment policy; None (and no page at all) when a setting is malformed:
    the app must not fall back to allowing everything. The reason goes to the server log only
    (the value may be the operator's path)."""
    try:
        return deployment_policy()
    except ValueError:
        logging.getLogger(__name__).exception("invalid deployment settings")
        st.error("This server's model settings are invalid; its operator's log says why.")
        return None


def sidebar(policy: DeploymentPolicy) -> None:
    """Draw the shared settings and store an AppSettings (or the reason there is none)."""
    # Tests and demos can point the app at another pair without clicking through the sidebar
    # (the operator's environment, so never on a public server, which offers a fixed list).
    env_v, env_d = os.environ.get("CACTUS_LAB_VERIFIER"), os.environ.get("CACTUS_LAB_DRAFT")
    if not policy.public and env_v and env_d and "sb_source" not in st.session_state:
        st.session_state.update(sb_source=CUSTOM, sb_verifier=env_v, sb_draft=env_d)

    with st.sidebar:
        pair, error = _pair_widgets(policy)
        set_pair_error_slot(st.empty())  # a page's load error shows here, by the picker
        device = st.selectbox("Device", available_devices(), key="sb_device")
        sampling = _sampling_widgets()
        tree = tree_widgets()
        try:
            s = AppSettings(device=device, sampling=SamplingSettings(**sampling), tree=tree, **pair)
        except ValueError as err:
            s, error = AppSettings(device=device), error or str(err)
        st.session_state[SETTINGS_KEY] = s
        st.session_state[SETTINGS_ERROR_KEY] = error
        if error:
            st.warning(error)
        else:
            _pair_status(s)


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
    cols = st.columns(len(PAGES) - 1)
    for col, (pg, blurb) in zip(cols, PAGES[1:], strict=True):
        with col.container(border=True):
            st.page_link(pg, label=f"**{pg.title}**", icon=pg.icon)
            st.caption(blurb)

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
    by_path = {p.url_path: p for p, _ in PAGES}
    cols = st.columns(2)
    for i, stop in enumerate(stops):
        with cols[i % 2].container(border=True):
            st.page_link(
                by_path[stop.page],
                label=f"**{i + 1}. {stop.title}**",
                icon=by_path[stop.page].icon,
                query_params=stop.link_query,
            )
            st.caption(stop.text)


# One row per page: the page and the line the Overview shows for it.
PAGES: list[tuple[st.Page, str]] = [
    (st.Page(overview, title="Overview", icon=":material/home:", default=True), ""),
    (
        st.Page("pages/decode.py", title="Decode", icon=":material/auto_awesome:"),
        "Generate with any rule and watch each round: which drafts passed, which were "
        "struck, and why. Inspect any token; replay the same coins under another delta.",
    ),
    (
        st.Page(
            "pages/step.py", title="Step through", icon=":material/skip_next:", url_path="step"
        ),
        "One real round slowed down: each step narrated from its own numbers, with what "
        "lossless sampling would have decided on the same coin. Links reopen the same step.",
    ),
    (
        st.Page("pages/playground.py", title="Playground", icon=":material/tune:"),
        "One position, analytic and instant: move delta and see h, a(n), pi and both KLs "
        "for every rule side by side.",
    ),
    (
        st.Page("pages/frontier.py", title="Frontier", icon=":material/show_chart:"),
        "Sweep rules and their parameters on a prompt set: tokens per call and predicted speedup "
        "against emitted KL, the Pareto frontier, the limit, and the delta for a KL budget.",
    ),
]

page = st.navigation([p for p, _ in PAGES])
goto = st.query_params.get(GOTO_PARAM)
if goto is not None:
    # A page sent us here first (see pages/_common.py); open it now that navigation is set,
    # with the rest of the link's query string.
    del st.query_params[GOTO_PARAM]
    target = next((p for p, _ in PAGES if p.url_path == goto), None)
    if target is not None and target is not page:
        st.switch_page(target, query_params=st.query_params.to_dict())
policy = _policy()
if policy is not None:
    offered = list(policy.choices()) if policy.public else []
    keep_widget_state(policy.public, offered)
    restore_link(page.url_path, policy.public, offered)
    take_focus()
    # "Copy link" at the top of the sidebar, where its popover has room to open (at the
    # bottom it was cut off); it is filled once the page has run and the address is final.
    link_slot = st.sidebar.container()
    sidebar(policy)
    try:
        page.run()
        bring_into_view()
    finally:
        # Also when the page stops early or reruns: the URL always names what is on screen.
        url = write_link(page.url_path, policy.public, offered)
    copy_link(url, link_slot)
