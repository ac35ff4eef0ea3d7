"""Playground: one position, analytic and instant. Widgets and layout only."""

from __future__ import annotations

import streamlit as st

from cactus_core.app.playground.comparison import (
    ParamGroup,
    RuleRow,
    compare_rules,
    headline_group,
    headlines,
    playground_figures,
    playground_params,
    playground_rules,
    position_note,
    rule_table,
    rule_words,
    taylor_gap,
)
from cactus_core.app.shared import figures
from cactus_core.app.shared.positions import (
    PRESETS,
    WORKED_EXAMPLE,
    Position,
    parse_table,
    with_drafted,
)
from cactus_core.app.shared.round_view import decided_rows
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, CactusBudget, CactusExact
from pages.shared.page_links import linked_fragment
from pages.shared.rule_picker import param_widget
from pages.shared.session import LAST_RUN_KEY, require_entry_point

PRESET_KEY = "pg_preset"


def _param_key(group: ParamGroup) -> str:
    return f"pg_{group.key}"


def _apply_preset() -> None:
    """A preset chosen: its own parameter values (the worked example's delta) go to the
    widgets; the others keep what the user set."""
    preset = PRESETS[st.session_state[PRESET_KEY]]
    for group in playground_params():
        if group.key in preset.params:
            st.session_state[_param_key(group)] = group.start(preset)


def _preset() -> tuple[Position | None, str]:
    name = st.selectbox("Preset", list(PRESETS), key=PRESET_KEY, on_change=_apply_preset)
    return PRESETS[name], name


def _from_run() -> tuple[Position | None, str]:
    run = st.session_state.get(LAST_RUN_KEY)
    if run is None:
        st.info("No decode run in this session yet. Generate on the Decode page, then come back.")
        return None, ""
    choices = decided_rows(run.trace)
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
    base = PRESETS[WORKED_EXAMPLE]
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


SOURCES = {"Preset": _preset, "From a decode run": _from_run, "Edit a table": _table}


def pick_position() -> Position | None:
    """Where p and q come from, and which token was drafted; None while there is no valid pair."""
    left, right = st.columns([2, 3])
    with left:
        source = st.radio("p and q from", list(SOURCES), horizontal=True, key="pg_source")
        base, base_key = SOURCES[source]()
    if base is None:
        return None
    with right:
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
    return position


def _group_widget(group: ParamGroup, position: Position) -> float | int:
    return param_widget(group.param, _param_key(group), group.start(position), group.label)


def parameters(position: Position) -> dict[str, float | int]:
    """The default rule's parameter up front, every other rule's in a popover."""
    main = headline_group()
    c1, c2 = st.columns([3, 2])
    with c1:
        values = {main.key: _group_widget(main, position)}
    with c2.popover("Other rules' parameters", width="stretch"):
        for group in playground_params():
            if group != main:
                values[group.key] = _group_widget(group, position)
    return values


def rules_table(rows: list[RuleRow]) -> None:
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


def rule_figures(position: Position, rows: list[RuleRow]) -> None:
    by_name = {r.name: r for r in rows}
    focus_name = st.segmented_control(
        "Rule in focus", list(by_name), default=DEFAULT_RULE, key="pg_focus"
    )
    focus = by_name[focus_name or DEFAULT_RULE]
    for line in rule_words(position, focus):
        st.caption(line)
    data = playground_figures(position, rows, focus)
    t1, t2, t3, t4 = st.tabs(
        ["h, residual and pi", "a(n) for every n", "pi for every rule", "Every rule"]
    )
    with t1:
        fig = figures.distribution_bars(
            data.labels, data.focus, title=focus.label, highlight=data.drafted
        )
        st.plotly_chart(fig, width="stretch", key="pg_fig_dist")
    with t2:
        fig = figures.acceptance_by_token(data.labels, data.accept, drafted=data.drafted)
        st.plotly_chart(fig, width="stretch", key="pg_fig_accept")
    with t3:
        fig = figures.distribution_bars(
            data.labels, data.pis, title="Emitted pi per rule, against q"
        )
        st.plotly_chart(fig, width="stretch", key="pg_fig_pi")
    with t4:
        fig = figures.rule_summary(
            [r.label for r in rows],
            [r.expected_acceptance for r in rows],
            [r.kl_pi_q for r in rows],
        )
        st.plotly_chart(fig, width="stretch", key="pg_fig_summary")
    if data.hidden:
        shown = len(data.labels)
        st.caption(f"Figures show {shown} of {shown + data.hidden} tokens (most mass).")


def taylor_section(position: Position, delta: float) -> None:
    st.subheader("Taylor closed form against the exact root")
    gap = taylor_gap(position, delta)
    g = st.columns(3)
    g[0].metric(f"h_n, {gap.names[0]}", f"{gap.h_taylor:.4f}")
    g[1].metric(f"h_n, {gap.names[1]}", f"{gap.h_exact:.4f}")
    over = gap.overshoot
    g[2].metric(
        "KL(h ‖ q): Taylor / exact",
        f"{gap.kl_taylor_now:.4f} / {gap.kl_exact_now:.4f}",
        None if over is None else f"{over:+.4f} over delta",
        delta_color="inverse",
    )
    fig = figures.taylor_gap(
        gap.deltas, gap.kl_taylor, gap.kl_exact, current_delta=delta, names=gap.names
    )
    st.plotly_chart(fig, width="stretch", key="pg_fig_taylor")


@linked_fragment
def analysis(position: Position) -> None:
    """Everything a parameter moves; a slider redraws this part alone."""
    values = parameters(position)
    rows = compare_rules(position, playground_rules(values))
    note = position_note(position, rows, values[headline_group().key])
    if note is not None:  # worded from the numbers below, so it follows the slider
        (st.warning if note.warning else st.info)(note.text)
    for col, card in zip(st.columns(4), headlines(position, rows), strict=True):
        col.metric(card.label, card.value, card.delta, help=card.help)
    rules_table(rows)
    with st.container(key="pg_figures"):  # the tour's stops on the Playground point here
        rule_figures(position, rows)
    taylor_section(position, values[headline_group().key])


def formulas() -> None:
    with st.expander("Formulas", expanded=False):
        st.markdown(f"Lossless speculative sampling (`{LOSSLESS_RULE}`) accepts the drafted n with")
        st.latex(r"a(n) = \min\!\left(1, \frac{q_n}{p_n}\right)")
        st.markdown(
            "Cactus raises q at n within a divergence budget delta (the paper's closed form):"
        )
        st.latex(r"h_n = \min\!\left(1,\; q_n + \sqrt{2\,\delta\, q_n (1 - q_n)}\right)")
        st.markdown(f"`{CactusExact.name}` uses the exact root instead:")
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
            "If top-k or top-p left q_n = 0, then h_n = 0 for every delta: such a draft is "
            "always rejected. The emitted pi can sit further from q than delta, because the "
            f"residual mixes over every possible draft; `{CactusBudget.name}` picks a "
            "per-position delta that bounds KL(pi ‖ q) itself."
        )


def main() -> None:
    require_entry_point()
    st.title("Playground")
    st.caption(
        "One position of a speculative round, computed exactly: pick p (draft) and q "
        "(verifier), the drafted token n, then move delta. Nothing here samples; every number "
        "is analytic."
    )
    position = pick_position()
    if position is not None:
        analysis(position)
    formulas()


main()
