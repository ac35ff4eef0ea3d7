"""The shared sidebar, drawn by app.py before every page: the model pair, sampling, k, seed and
the draft's shape, stored in session state as one AppSettings (or the reason there is none)."""

from __future__ import annotations

import os

import streamlit as st

from cactus_core.app.shared.links import (
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
from cactus_core.app.shared.settings import (
    AppSettings,
    available_devices,
    public_draft_choices,
    public_pair,
)
from cactus_core.engine.loading.deployment import DeploymentPolicy
from cactus_core.engine.loading.embedded_drafts import EMBEDDED_DRAFTS
from cactus_core.maths.sampling import SamplingSettings
from pages.shared.drafting import tree_widgets
from pages.shared.pair import preload_pair, set_pair_error_slot, set_pair_status_slot, warm_label
from pages.shared.session import SETTINGS_ERROR_KEY, SETTINGS_KEY

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
