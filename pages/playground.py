"""Playground: one position, analytic and instant. Widgets and layout only."""

from __future__ import annotations

import streamlit as st

from cactus_core.app import figures
from cactus_core.app.app_state import (
    PRESETS,
    Position,
    compare_rules,
    decode_positions,
    display_indices,
    parse_table,
    playground_rules,
    rule_table,
    taylor_gap,
    truncation_warning,
    with_drafted,
)
from pages._common import LAST_RUN_KEY, require_entry_point

require_entry_point()
st.title("Playground")
st.caption(
    "One position of a speculative round, computed exactly: pick p (draft) and q (verifier), "
    "the drafted token n, then move delta. Nothing here samples; every number is analytic."
)

SOURCES = ["Preset", "From a decode run", "Edit a table"]


def _preset() -> tuple[Position | None, str]:
    name = st.selectbox("Preset", list(PRESETS), key="pg_preset")
    return PRESETS[name], name


def _from_run() -> tuple[Position | None, str]:
    run = st.session_state.get(LAST_RUN_KEY)
    if run is None:
        st.info("No decode run in this session yet. Generate on the Decode page, then come back.")
        return None, ""
    choices = decode_positions(run.trace)
    if not choices:
        st.info("The last decode run has no drafted positions (was k = 0 or the output empty?).")
        return None, ""
    labels = [c.title for c in choices]
    i = st.selectbox(
        "Drafted position", range(len(choices)), format_func=labels.__getitem__, key="pg_run_pos"
    )
    st.caption(
        "From the trace: the top tokens of p and q at that position, plus one '(rest)' bucket "
        "holding the remaining mass of each, so the numbers are those of this reduced "
        "vocabulary, not the full one."
    )
    return choices[i].position(run.trace), f"run{run.run_id}_{i}"


def _table() -> tuple[Position | None, str]:
    base = PRESETS["Worked example (reference README)"]
    start = {
        "token": list(base.labels),
        "p (draft)": [round(float(x), 4) for x in base.p],
        "q (verifier)": [round(float(x), 4) for x in base.q],
    }
    edited = st.data_editor(
        start,
        num_rows="dynamic",
        key="pg_table",
        column_config={
            "p (draft)": st.column_config.NumberColumn(format="%.4f"),
            "q (verifier)": st.column_config.NumberColumn(format="%.4f"),
        },
    )
    try:
        position = parse_table(edited["token"], edited["p (draft)"], edited["q (verifier)"])
    except ValueError as err:
        st.error(f"This table is not a pair of distributions: {err}")
        return None, ""
    for notice in position.notices:
        st.info(notice)
    return position, f"table{len(position.labels)}"


left, right = st.columns([2, 3])
with left:
    source = st.radio("p and q from", SOURCES, horizontal=True, key="pg_source")
    base, base_key = {"Preset": _preset, "From a decode run": _from_run, "Edit a table": _table}[
        source
    ]()
with right:
    if base is not None:
        if base.note:
            st.info(base.note)
        drafted = st.selectbox(
            "Drafted token n",
            range(len(base.labels)),
            index=base.drafted,
            format_func=lambda i: (
                f"{figures.display_token(base.labels[i])}  (p = "
                f"{float(base.p[i]):.3f}, q = {float(base.q[i]):.3f})"
            ),
            # one key per source, so another preset starts at its own drafted token
            key=f"pg_drafted_{base_key}",
        )
        position = with_drafted(base, drafted)
        warning = truncation_warning(position)
        if warning:
            st.warning(warning)

if base is None:
    st.stop()


@st.fragment
def analysis(position: Position) -> None:
    c1, c2 = st.columns([3, 2])
    delta = c1.slider(
        "delta (nats): the Cactus divergence budget",
        0.0,
        2.0,
        0.21,
        0.01,
        key="pg_delta",
        help="0 is lossless speculative sampling. Used by cactus and cactus-exact.",
    )
    with c2.popover("Other rules' parameters", width="stretch"):
        budget = st.slider(
            "budget (cactus-budget, optimal)", 0.0, 1.0, 0.05, 0.005, key="pg_budget"
        )
        interp_alpha = st.slider("alpha (interp)", 0.0, 1.0, 0.5, 0.01, key="pg_interp_alpha")
        tas_eps = st.slider("epsilon (tas)", 0.0, 1.0, 0.09, 0.01, key="pg_tas_eps")
        tas_alpha = st.slider("alpha (tas)", 0.0, 1.0, 0.3, 0.01, key="pg_tas_alpha")
        k_top = st.number_input("k_top (topk)", 1, 100, 5, 1, key="pg_k_top")

    rules = playground_rules(
        delta,
        budget=budget,
        interp_alpha=interp_alpha,
        tas_epsilon=tas_eps,
        tas_alpha=tas_alpha,
        k_top=int(k_top),
    )
    rows = compare_rules(position, rules)
    by_name = {r.name: r for r in rows}
    sps, cactus = by_name["sps"], by_name["cactus"]

    m = st.columns(4)
    m[0].metric("sps: expected acceptance", f"{sps.expected_acceptance:.1%}")
    m[1].metric(
        f"cactus δ={delta:.2f}: expected acceptance",
        f"{cactus.expected_acceptance:.1%}",
        f"{cactus.expected_acceptance - sps.expected_acceptance:+.1%} vs sps",
    )
    m[2].metric(
        f"a(n) for n = {figures.display_token(position.labels[position.drafted])}",
        f"{cactus.accept_drafted:.1%}",
        f"{cactus.accept_drafted - sps.accept_drafted:+.1%} vs sps",
    )
    m[3].metric(
        "cactus: KL(h ‖ q) / KL(pi ‖ q)",
        f"{cactus.kl_h_q:.3f} / {cactus.kl_pi_q:.3f}",
        help="nats. h is what this draft is verified against; pi is what is actually emitted.",
    )

    st.dataframe(
        rule_table(rows),
        hide_index=True,
        width="stretch",
        column_config={
            "a(n), drafted": st.column_config.NumberColumn(format="%.4f"),
            "expected acceptance": st.column_config.NumberColumn(
                format="%.4f", help="Σ_n p(n)·a(n)"
            ),
            "KL(h ‖ q)": st.column_config.NumberColumn(format="%.4f", help="nats, drafted n"),
            "KL(pi ‖ q)": st.column_config.NumberColumn(format="%.4f", help="nats, exact pi"),
        },
    )

    shown = display_indices(position)
    labels = [position.labels[i] for i in shown]
    hi = shown.index(position.drafted)
    focus_name = (
        st.segmented_control(
            "Rule in focus",
            [r.name for r in rows],
            default="cactus",
            key="pg_focus",
        )
        or "cactus"
    )
    focus = by_name[focus_name]
    t1, t2, t3, t4 = st.tabs(
        ["h, residual and pi", "a(n) for every n", "pi for every rule", "Every rule"]
    )
    with t1:
        series = {
            "p": position.p[shown],
            "q": position.q[shown],
            "h": focus.h[shown],
            "residual": focus.residual[shown],
            "pi": focus.pi[shown],
        }
        st.plotly_chart(
            figures.distribution_bars(labels, series, title=focus.label, highlight=hi),
            width="stretch",
            key="pg_fig_dist",
        )
    with t2:
        st.plotly_chart(
            figures.acceptance_by_token(
                labels, {r.label: r.accept_all[shown] for r in rows}, drafted=hi
            ),
            width="stretch",
            key="pg_fig_accept",
        )
    with t3:
        pis = {"q": position.q[shown]} | {r.label: r.pi[shown] for r in rows}
        st.plotly_chart(
            figures.distribution_bars(labels, pis, title="Emitted pi per rule, against q"),
            width="stretch",
            key="pg_fig_pi",
        )
    with t4:
        st.plotly_chart(
            figures.rule_summary(
                [r.label for r in rows],
                [r.expected_acceptance for r in rows],
                [r.kl_pi_q for r in rows],
            ),
            width="stretch",
            key="pg_fig_summary",
        )
    if len(shown) < len(position.labels):
        st.caption(f"Figures show {len(shown)} of {len(position.labels)} tokens (most mass).")

    st.subheader("Taylor closed form against the exact root")
    gap = taylor_gap(position, delta)
    g = st.columns(3)
    g[0].metric("h_n, cactus (Taylor)", f"{gap.h_taylor:.4f}")
    g[1].metric("h_n, cactus-exact", f"{gap.h_exact:.4f}")
    g[2].metric(
        "KL(h ‖ q): Taylor / exact",
        f"{gap.kl_taylor_now:.4f} / {gap.kl_exact_now:.4f}",
        f"{gap.kl_taylor_now - delta:+.4f} over delta" if gap.kl_taylor_now > delta else None,
        delta_color="inverse",
    )
    st.plotly_chart(
        figures.taylor_gap(gap.deltas, gap.kl_taylor, gap.kl_exact, current_delta=delta),
        width="stretch",
        key="pg_fig_taylor",
    )


analysis(position)

with st.expander("Formulas", expanded=False):
    st.markdown("Lossless speculative sampling (`sps`) accepts the drafted n with")
    st.latex(r"a(n) = \min\!\left(1, \frac{q_n}{p_n}\right)")
    st.markdown("Cactus raises q at n within a divergence budget delta (the paper's closed form):")
    st.latex(r"h_n = \min\!\left(1,\; q_n + \sqrt{2\,\delta\, q_n (1 - q_n)}\right)")
    st.markdown("`cactus-exact` uses the exact root instead:")
    st.latex(
        r"h_n = \gamma \in [q_n, 1]:\quad \gamma \log\frac{\gamma}{q_n} + (1-\gamma)"
        r"\log\frac{1-\gamma}{1-q_n} = \delta"
    )
    st.markdown("The rest of h is q rescaled, and a rejection samples the residual:")
    st.latex(
        r"h_j = q_j \frac{1 - h_n}{1 - q_n}\ (j \ne n), \qquad a(n) = \min\!\left(1, "
        r"\frac{h_n}{p_n}\right), \qquad r_n \propto \max(0,\, h - p)"
    )
    st.markdown("What is emitted, marginalised over the draft and the coin, and what it costs:")
    st.latex(
        r"\pi(x) = p(x)\,a(x) + \sum_n p(n)\,(1 - a(n))\, r_n(x), \qquad "
        r"\mathbb{E}[\text{accept}] = \sum_n p(n)\, a(n), \qquad "
        r"\mathrm{KL}(\pi \,\|\, q) = \sum_x \pi(x) \log\frac{\pi(x)}{q(x)}"
    )
    st.markdown(
        "If top-k or top-p left q_n = 0, then h_n = 0 for every delta: such a draft is always "
        "rejected. The emitted pi can sit further from q than delta, because the residual mixes "
        "over every possible draft; `cactus-budget` picks a per-position delta that bounds "
        "KL(pi ‖ q) itself."
    )
