"""Decode: generate with any rule and watch every round. Widgets and layout only."""

from __future__ import annotations

import time

import streamlit as st

from cactus_core.app import figures
from cactus_core.app.app_state import (
    METRIC_HELP,
    DecodeRun,
    SpeedComparison,
    build_rule,
    chip_label,
    draft_cost_ratio,
    flipped_slots,
    inspect_token,
    legend_html,
    live_stats,
    modelled_speedup,
    round_table,
    round_tokens,
    transcript_html,
    transcript_tokens,
)
from pages._common import LAST_RUN_KEY, get_pair, rule_picker, settings

INSPECT_KEY = "dec_inspect"  # (run_id, round index, slot) of the token in the inspector
DEFAULT_PROMPT = "Why do cacti have spines instead of leaves? Answer in three sentences."

s = settings()
st.title("Decode")
st.caption(
    "Speculative decoding, round by round: the draft proposes k tokens, the verifier checks "
    "them in one forward pass, and the rule decides which to keep. Model pair, sampling, k "
    "and seed are in the sidebar."
)

left, right = st.columns([3, 2])
with left:
    prompt = st.text_area("Prompt", DEFAULT_PROMPT, height=110, key="dec_prompt")
    chat_template = st.checkbox(
        "Apply the chat template", value=True, key="dec_chat", help="On for instruct models."
    )
with right:
    rule_name, rule_params = rule_picker("dec")
    max_new = st.slider("Max new tokens", 8, 256, 64, 8, key="dec_max_new")

b1, b2, _ = st.columns([1, 1, 2])
generate = b1.button("Generate", type="primary", icon=":material/play_arrow:", key="dec_go")
compare = b2.button(
    "Compare with verifier-only",
    icon=":material/speed:",
    key="dec_compare",
    help=METRIC_HELP["speedup"],
)

pair = get_pair(s)
if pair is None:
    st.stop()

counters = st.empty()
st.html(legend_html())
transcript = st.empty()
# Everything below the transcript, from the last finished run. A placeholder sent before any
# decoding starts: on Generate it replaces the previous run's rounds, charts and inspector at
# once, so the browser does not keep redrawing them (stale) while the new run streams.
body = st.empty()


def show_counters(tokens_per_call, acceptance, tokens_per_s, emitted_kl, calls) -> None:
    with counters.container():
        c = st.columns(5)
        c[0].metric(
            "tokens per call", f"{tokens_per_call:.2f}", help=METRIC_HELP["tokens per call"]
        )
        c[1].metric(
            "acceptance rate",
            "–" if acceptance is None else f"{acceptance:.1%}",
            help=METRIC_HELP["acceptance rate"],
        )
        c[2].metric("tokens/s", f"{tokens_per_s:.1f}", help=METRIC_HELP["tokens/s"])
        c[3].metric("emitted KL (nats/token)", f"{emitted_kl:.4f}", help=METRIC_HELP["emitted KL"])
        c[4].metric("verifier calls", f"{calls}")


def run_generation() -> None:
    from cactus_core.engine.decoder import SpeculativeDecoder

    rule = build_rule(rule_name, rule_params)
    dec = SpeculativeDecoder(
        pair, rule, k=s.k, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p
    )
    stream = dec.rounds(prompt, max_new_tokens=max_new, seed=s.seed, chat_template=chat_template)
    rounds = []
    start = time.perf_counter()
    for rnd in stream:
        rounds.append(rnd)
        live = live_stats(rounds, time.perf_counter() - start)
        show_counters(
            live.tokens_per_call,
            live.acceptance_rate,
            live.tokens_per_s,
            live.emitted_kl,
            len(rounds),
        )
        transcript.html(transcript_html("", transcript_tokens(rounds)))
    run_id = st.session_state.get("dec_run_counter", 0) + 1
    st.session_state["dec_run_counter"] = run_id
    st.session_state[LAST_RUN_KEY] = DecodeRun(
        run_id=run_id,
        prompt=prompt,
        settings=s,
        rule_name=rule_name,
        rule_params=dict(rule_params),
        max_new_tokens=max_new,
        chat_template=chat_template,
        output=stream.output,
    )
    st.session_state.pop(INSPECT_KEY, None)


def run_comparison() -> SpeedComparison:
    from cactus_core.engine.decoder import SpeculativeDecoder

    rule = build_rule(rule_name, rule_params)
    # No trace recording on either side, so both clocks time decoding only.
    dec = SpeculativeDecoder(
        pair,
        rule,
        k=s.k,
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        record_trace=False,
    )
    kw = {"max_new_tokens": max_new, "seed": s.seed, "chat_template": chat_template}
    spec = dec.generate(prompt, **kw)
    base = dec.generate_autoregressive(prompt, **kw)
    return SpeedComparison(
        speculative_tokens_per_s=spec.stats.tokens_per_s,
        verifier_only_tokens_per_s=base.stats.tokens_per_s,
        tokens_per_call=spec.stats.tokens_per_call,
        k=s.k,
        c_measured=draft_cost_ratio(spec.stats),
    )


if (generate or compare) and not prompt.strip():
    st.error("Enter a prompt first.")
    st.stop()
try:
    if generate:
        run_generation()
except ValueError as err:
    st.error(f"Could not decode: {err}")
    st.stop()

run: DecodeRun | None = st.session_state.get(LAST_RUN_KEY)
if run is not None:
    stats = run.output.stats
    show_counters(
        stats.tokens_per_call,
        stats.acceptance_rate,
        stats.tokens_per_s,
        stats.mean_emitted_kl,
        stats.verifier_calls,
    )
    transcript.html(transcript_html("", transcript_tokens(run.trace.rounds, run.replay)))
if compare:
    # The transcript above stays in view; the rest of the page waits for the comparison.
    try:
        with body.container(), st.spinner("Decoding twice: speculative, then verifier-only…"):
            st.session_state["dec_comparison"] = run_comparison()
    except ValueError as err:
        st.error(f"Could not decode: {err}")
        st.stop()
if run is None:
    transcript.info("Press Generate to decode the prompt.")
    st.stop()


def show_run(run: DecodeRun) -> None:
    """The finished run below the transcript: summary, speed, rounds, inspector, replay and
    export."""
    stats = run.output.stats
    meta = run.trace.meta
    st.caption(
        f"Run {run.run_id}: {meta['rule_label']} · k = {meta['k']} · "
        f"T = {meta['temperature']:g} · top-k {meta['top_k']} · top-p {meta['top_p']:g} · "
        f"seed {meta['seed']} · "
        f"{stats.new_tokens} tokens in {stats.rounds} rounds, stopped by {stats.stop_reason} · "
        f"{meta['verifier']} verifying {meta['draft']}"
    )
    if stats.rejected_tokens:
        st.caption(
            f"{stats.rejected_q_zero} of {stats.rejected_tokens} rejected drafts sat outside q's "
            "support (q_n = 0, cut by top-k / top-p): no delta can rescue those."
        )

    with st.expander("Speed: measured and modelled", expanded=bool(compare)):
        cmp: SpeedComparison | None = st.session_state.get("dec_comparison")
        c_value = st.number_input(
            "c: the cost of one draft step relative to one verifier step",
            min_value=0.0,
            max_value=2.0,
            value=0.05,
            step=0.01,
            format="%.3f",
            key="dec_c",
            help="0.02–0.1 is typical for a draft 10–50× smaller than the verifier on a GPU.",
        )
        modelled = modelled_speedup(stats.tokens_per_call, run.settings.k, c_value)
        m1, m2 = st.columns(2)
        m1.metric(
            "modelled speedup (not measured)",
            f"{modelled:.2f}×",
            help=METRIC_HELP["modelled speedup"],
        )
        if cmp is None:
            m2.metric("measured speedup", "–", help=METRIC_HELP["speedup"])
            st.caption("Press “Compare with verifier-only” to measure on this machine.")
        else:
            m2.metric("measured speedup", f"{cmp.speedup:.2f}×", help=METRIC_HELP["speedup"])
            (st.warning if cmp.speedup < 1 else st.success)(cmp.verdict())
            with_measured_c = modelled_speedup(cmp.tokens_per_call, cmp.k, cmp.c_measured)
            st.caption(
                f"Measured c on this machine: {cmp.c_measured:.3f} (draft forward ÷ verifier "
                f"forward). The model with it: {with_measured_c:.2f}×."
            )
        with st.popover("Metric definitions"):
            for name, text in METRIC_HELP.items():
                st.markdown(f"**{name}**: {text}")

    rounds = list(run.trace.rounds)
    st.plotly_chart(
        figures.round_timeline(
            [r.num_accepted for r in rounds],
            [r.k for r in rounds],
            [r.k > 0 and r.num_accepted == r.k for r in rounds],
        ),
        key="dec_timeline",
    )

    flips = flipped_slots(run.replay)

    def _pick(round_index: int) -> None:
        key = f"dec_chips_{run.run_id}_{round_index}"
        choice = st.session_state.get(key)
        if choice is None:
            return
        view = round_tokens(rounds[round_index], flips.get(round_index))[choice]
        # A recovered token sits at its rejected draft's slot; inspect_token shows that slot.
        st.session_state[INSPECT_KEY] = (run.run_id, round_index, view.slot)
        # One selection at a time across the rounds' chip rows.
        for other in range(len(rounds)):
            if other != round_index:
                st.session_state[f"dec_chips_{run.run_id}_{other}"] = None

    col_rounds, col_inspect = st.columns([6, 5], gap="large")
    with col_rounds:
        st.subheader("Rounds")
        st.caption("Expand a round and click a token to inspect it.")
        with st.container(height=620):
            for rnd in rounds:
                views = round_tokens(rnd, flips.get(rnd.index))
                accepted = f"{rnd.num_accepted}/{rnd.k} accepted" if rnd.k else "verifier only"
                ending = "bonus" if rnd.k and rnd.num_accepted == rnd.k else "recovered"
                label = f"Round {rnd.index + 1} · {accepted} · +{len(rnd.emitted_ids)} ({ending})"
                if rnd.index in flips:
                    label += " · flips under replay"
                # Lazy: a round's chips and table are built only while it is open, so a
                # finished run costs the browser dozens of labels, not dozens of tables.
                exp = st.expander(
                    label, key=f"dec_round_{run.run_id}_{rnd.index}", on_change="rerun"
                )
                if not exp.open:
                    continue
                with exp:
                    st.pills(
                        "Tokens",
                        range(len(views)),
                        format_func=lambda i, views=views: chip_label(views[i]),
                        key=f"dec_chips_{run.run_id}_{rnd.index}",
                        on_change=_pick,
                        args=(rnd.index,),
                        label_visibility="collapsed",
                    )
                    if rnd.k:
                        st.dataframe(
                            round_table(rnd),
                            hide_index=True,
                            column_config={
                                c: st.column_config.NumberColumn(format="%.3f", width="small")
                                for c in ("p_n", "q_n", "a(n)", "u")
                            },
                        )

    with col_inspect:
        st.subheader("Inspector")
        pick = st.session_state.get(INSPECT_KEY)
        if pick is None or pick[0] != run.run_id:
            st.info("Click a token in a round to see p, q, h and the residual there.")
        else:
            _, r_idx, slot = pick
            view = inspect_token(run.trace, r_idx, slot)
            st.markdown(f"**{view.title}**")
            for note in view.notes:
                st.caption(note)
            if view.accept_prob is not None and view.coin is not None:
                st.plotly_chart(figures.coin_figure(view.accept_prob, view.coin), key="dec_coin")
                k1, k2 = st.columns(2)
                k1.metric("p_n (draft) / q_n (verifier)", f"{view.p_n:.3f} / {view.q_n:.3f}")
                k2.metric(
                    "h_n (rule's target)",
                    f"{view.h_n:.3f}",
                    help="what a(n) = min(1, h_n/p_n) uses",
                )
                k3, k4 = st.columns(2)
                k3.metric("KL(h ‖ q), nats", f"{view.kl_h_q:.4f}", help="this position's h")
                k4.metric(
                    "KL(pi ‖ q), nats",
                    f"{view.kl_pi_q:.4f}",
                    help="the emitted distribution at this position, exact",
                )
            if view.series:
                st.plotly_chart(
                    figures.distribution_bars(
                        view.labels, view.series, highlight=view.highlight, title="Top tokens"
                    ),
                    key="dec_bars",
                )

    st.subheader("Replay")
    st.caption(
        "Judge the same drafts with the same coins under another rule or delta. Tokens whose fate "
        "flips are outlined in the transcript. Each round is judged on its own: later rounds keep "
        "the drafts that were actually made."
    )
    rp_left, rp_right = st.columns([2, 3])
    with rp_left:
        replay_name, replay_params = rule_picker(
            "replay", label="Replay under", default=run.rule_name
        )
        if st.button("Replay", icon=":material/replay:", key="dec_replay"):
            from cactus_core.engine.trace import reverify

            run.replay = reverify(run.trace, build_rule(replay_name, replay_params))
            st.rerun()
    with rp_right:
        rep = run.replay
        if rep is not None:
            r1, r2, r3 = st.columns(3)
            r1.metric("flipped drafts", rep.flips)
            r2.metric(
                "tokens per call",
                f"{rep.tokens_per_call_after:.2f}",
                f"{rep.tokens_per_call_after - rep.tokens_per_call_before:+.2f} vs the run",
            )
            r3.metric("replayed under", build_rule(rep.rule, rep.rule_params).label)
            if not rep.decisions_exact:
                st.caption(
                    "Some decisions are approximate: this rule needs whole rows and the trace "
                    "keeps the top rows only."
                )
            if st.button("Clear replay", key="dec_replay_clear"):
                run.replay = None
                st.rerun()

    st.subheader("Export")
    st.download_button(
        "Download the trace (JSON)",
        data=run.trace.to_json,
        file_name=f"cactus-trace-{run.run_id}.json",
        mime="application/json",
        on_click="ignore",
        icon=":material/download:",
        key="dec_export",
    )


with body.container():
    show_run(run)
