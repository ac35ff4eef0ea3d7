"""Frontier: sweep rules and their parameters, plot throughput against divergence, pick delta.

Widgets and layout only: the sweep, its cache, the statistics and the limit come through the
page's view (cactus_core.app.frontier.sweep_view), the figures from
cactus_core.app.frontier.figures; the rules, their parameters and default grids from the rules'
metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
import streamlit as st

from cactus_core.app.frontier import figures as ff
from cactus_core.app.frontier.sweep_file import page_sweep_file
from cactus_core.app.frontier.sweep_view import (
    BASELINE,
    DIVERGENCE_AXES,
    METRIC_LABELS,
    Reference,
    ReferenceSweep,
    SweepCache,
    SweepCancelled,
    SweepConfig,
    SweepResult,
    cached_chunks,
    heldout_for,
    load_reference,
    parse_answered_prompt_file,
    parse_grid,
    progress_text,
    run_sweep,
    sweep_config,
    task_set_prompts,
)
from cactus_core.app.frontier.tuner import reference_source, sweep_source
from cactus_core.app.shared.limits import MAX_SWEEP_RUNS, check_prompts_fit
from cactus_core.app.shared.metrics import METRIC_HELP, PREDICTED_HELP
from cactus_core.app.shared.reference import missing_rules, pair_in_words, reference_part
from cactus_core.app.shared.settings import AppSettings, grid_text, swept_rules
from cactus_core.app.shared.tables import display_rows
from cactus_core.engine.loading.prompts import builtin_prompts, builtin_tasks
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULES, rule_class
from pages.frontier import export_panel, quality_panel, tuner_panel
from pages.frontier.sweep_file_panel import ray_backend, sweep_file_section
from pages.shared import k_panel
from pages.shared.pair import get_pair
from pages.shared.session import settings

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair


@dataclass
class FrontierState:
    """Everything the page keeps between reruns besides its widgets' values (and its panels'
    memos of what they computed), as one object in the session."""

    selected: str | None = None  # setting id of the point clicked in your sweep's charts
    # The last run had your own sweep's results, so the tuner under the reference tunes on
    # them: it is drawn once they are read, not before the sweep waits for the model, so it
    # does not swap between the two on every rerun.
    tunes_own_sweep: bool = False
    prompt_check: tuple[Any, str | None] | None = None  # (prompts and pair, the problem)
    ran_on: tuple[SweepConfig, str, int] | None = None  # (config, backend, workers) of Run sweep

    @staticmethod
    def get() -> FrontierState:
        return st.session_state.setdefault(STATE_KEY, FrontierState())


STATE_KEY = "fr_state"
CHARTS = (
    "fr_chart_tpc",
    "fr_chart_speedup",
    "fr_chart_tps",
    "fr_chart_limit",
    "fr_chart_task",
    "fr_chart_long",
)
ESTIMATED_NOTE = (
    "Open markers on a dotted line: a rule whose emitted pi depends on the whole round (FLy's "
    "later drafts, the learned judge's hidden states), estimated from this sweep's decode: "
    "the chance it overrides an sps rejection, with its 95% interval, gives pi and the "
    'horizontal bars (docs/rules.md, "The 2026 rules"). Such a rule can sit above the limit, '
    "which bounds the rules that judge each position on its own p and q."
)
# What the form starts with: the same pair of rules as `python -m cactus_core sweep`.
DEFAULT_SWEEP = [DEFAULT_RULE, LOSSLESS_RULE]


# ---------------------------------------------------------------------------- the sweep form
def prompt_widgets() -> tuple[list[str], list[str], list[str]]:
    """(prompts, task tags, checkable answers: "" where a prompt has none)."""
    st.markdown("##### Prompts")
    source = st.radio(
        "Prompt set",
        ["Built-in chat prompts", "Built-in task set", "Upload a file"],
        horizontal=True,
        key="fr_source",
        help="The task set's tuning split: 324 prompts with checkable answers in 7 families "
        "(products, comparisons, capitals, opposites, yes/no facts and "
        "numbers, letters): each setting then gets a task score and its paired difference "
        "from sps.",
    )
    prompts: list[str] = []
    tasks: list[str] = []
    answers: list[str] = []
    if source == "Upload a file":
        upload = st.file_uploader(
            'One prompt a line: .jsonl ({"prompt": ..., "task": ..., "answer": "number=63"} or '
            "a JSON string) or .txt; at most 5 MB and 1,000 prompts",
            type=["jsonl", "txt"],
            key="fr_upload",
        )
        if upload is not None:
            try:
                prompts, tasks, answers = parse_answered_prompt_file(upload.name, upload.getvalue())
            except ValueError as err:
                st.error(str(err))
    elif source == "Built-in task set":
        prompts, tasks, answers = task_set_prompts()
    else:
        prompts, tasks = builtin_prompts(), builtin_tasks()
        answers = [""] * len(prompts)
    n_prompts = len(prompts)
    if n_prompts == 1:  # a slider needs two ends; one prompt has nothing to choose
        st.caption(f"1 prompt: “{prompts[0][:80]}”")
    elif n_prompts:
        n_use = st.slider(
            "Prompts to use", 1, n_prompts, min(20, n_prompts), key=f"fr_n_{n_prompts}"
        )
        prompts, tasks, answers = prompts[:n_use], tasks[:n_use], answers[:n_use]
        st.caption(f"{n_use} of {n_prompts} prompts; the first: “{prompts[0][:80]}”")
    return prompts, tasks, answers


def grid_widgets() -> tuple[dict[str, list[float]], str | None]:
    """The rules to sweep and each one's values, from the rules' metadata; (grids, error)."""
    st.markdown("##### Rules and grids")
    rules = st.multiselect(
        "Rules",
        swept_rules(),
        default=DEFAULT_SWEEP,
        format_func=lambda n: f"{n} — {RULES[n].card.description}",
        key="fr_rules",
    )
    grids: dict[str, list[float]] = {}
    error = None
    for rule in rules:
        param = rule_class(rule).swept()
        if param is None:
            grids[rule] = []
            st.caption(f"{rule}: no parameter (one setting)")
            continue
        text = st.text_input(
            f"{rule}: values of {param.name}", grid_text(rule), key=f"fr_grid_{rule}"
        )
        try:
            grids[rule] = parse_grid(rule, text)
        except ValueError as err:
            error = str(err)
            st.error(error)
    return grids, error


def sweep_form(s: AppSettings) -> tuple[SweepConfig | None, str | None]:
    """The sweep the form describes, or the reason there is none (None when it is shown
    already, as an error)."""
    left, right = st.columns(2)
    with left:
        prompts, tasks, answers = prompt_widgets()
        max_new = st.slider("Max new tokens", 8, 256, 64, 8, key="fr_max_new")
        chunk = st.slider(
            "Prompts per chunk (one batched call; the unit of caching and resuming)",
            1, 64, 16, key="fr_chunk",
            help="More prompts per call decode faster (a 64-prompt sweep on 2 CPU cores ran "
            "2.2 times as fast at 32 as at 5); fewer give a finer progress bar and Cancel.",
        )  # fmt: skip
        with_limit = st.checkbox(
            "Compute the limit (scores every decided position; the efficiency needs it)",
            value=True,
            key="fr_limit",
        )
    with right:
        grids, problem = grid_widgets()
    if problem:
        return None, problem
    if not prompts:
        return None, "Choose a prompt set (or upload a file) first."
    if not grids:
        return None, "Pick at least one rule."
    try:
        config = sweep_config(s, prompts, tasks, grids, max_new, chunk, with_limit, answers)
    except ValueError as err:  # over the app's cap, or a setting SweepConfig refuses
        st.error(str(err))
        return None, None
    return config, None


def prompts_problem(pair: ModelPair, config: SweepConfig) -> str | None:
    """Why these prompts cannot be swept on this pair (too long for the app's cap or the
    pair's context), checked before Run sweep rather than after the first chunks; remembered
    per prompt set and pair, so a rerun does not tokenise a 1,000-prompt upload again."""
    key = (id(pair), pair.context_length, config.chat_template, hash(config.prompts))
    state = FrontierState.get()
    if state.prompt_check is not None and state.prompt_check[0] == key:
        return state.prompt_check[1]
    try:
        check_prompts_fit(
            config.prompts,
            lambda p: pair.encode_prompt(p, config.chat_template),
            pair.context_length,
        )
        problem = None
    except ValueError as err:
        problem = f"These prompts cannot be swept: {err}."
    state.prompt_check = (key, problem)
    return problem


def sweep(
    pair: ModelPair,
    config: SweepConfig,
    cache: SweepCache,
    run: bool,
    cancelled: bool,
    backend: Callable[[], Any] | None = None,
) -> SweepResult | None:
    """Run (or resume) the sweep when asked, or read it whole from the cache; None until then.
    backend gives the operator's Ray backend (or None: this process), asked for only on Run
    sweep, so an operator's Ray setting that does not work stops that and nothing else."""
    done, total = cached_chunks(pair.identity, config, cache)
    # One slot for the progress bar in every run, drawn or not: a bar only in the run that
    # clicked Run sweep would shift every element below it on the next run, and Streamlit
    # would redraw the results' tabs and reopen the first.
    slot = st.empty()
    if run:
        try:
            chosen = backend() if backend is not None else None
        except ValueError as err:  # RayBackendError: Ray not installed, a malformed setting
            st.error(f"The sweep cannot start on this server's Ray cluster: {err}.")
            return None
        ran_on = ("ray", chosen.n_workers) if chosen is not None else ("local", 1)
        FrontierState.get().ran_on = (config, *ran_on)
        bar = slot.progress(done / total, text=f"{done} / {total} chunks already cached")
        try:
            return run_sweep(
                pair,
                config,
                cache,
                on_progress=lambda p: bar.progress(p.fraction, progress_text(p)),
                backend=chosen,
            )
        except SweepCancelled as err:
            st.warning(str(err))
            return None
        except ValueError as err:
            # Chunks that finished before the error stay cached: nothing done is lost.
            done, _ = cached_chunks(pair.identity, config, cache)
            st.error(
                f"The sweep stopped: {err}. {done} of {total} chunks are cached; fix the "
                "prompts or settings and Run sweep resumes from there."
            )
            return None
        finally:
            bar.empty()
    if done == total:
        try:
            return run_sweep(pair, config, cache)  # everything is cached: no model call
        except ValueError as err:
            st.error(f"Could not read the sweep back from the cache: {err}")
            return None
    if cancelled:
        st.warning(f"Cancelled. {done} of {total} chunks are cached; Run sweep resumes from there.")
    elif done:
        st.info(f"{done} of {total} chunks of this sweep are cached; Run sweep resumes from there.")
    else:
        st.info("Set up the sweep and press Run sweep. Results are cached on disk.")
    return None


# ---------------------------------------------------------------------------- results
def _remember_click(key: str) -> None:
    # Runs before the rerun, so every chart and the Outputs picker see the new selection.
    state = st.session_state.get(key)
    points = state.selection.points if state is not None and state.selection else []
    for point in points:
        data = point.get("customdata")
        if data:
            FrontierState.get().selected = data[0]


def chart(fig: go.Figure, key: str) -> None:
    st.plotly_chart(fig, on_select=lambda: _remember_click(key), selection_mode="points", key=key)


def trade_off(
    result: SweepResult,
    config: SweepConfig,
    selected: str | None,
    pair: ModelPair,
    reference: ReferenceSweep | None = None,
) -> None:
    rows, curve = result.rows(), result.pooled_limit()
    ref_rows = reference.rows if reference is not None else None
    st.subheader("Trade-off")
    st.caption(
        "Error bars: 95% intervals over prompts (over chunks for tokens/s). The dashed line is "
        "the Pareto frontier over all settings. Click a point to read its outputs."
    )
    scored = any(r.get("task_prompts") for r in rows)
    names = ["tokens per call", "speedup (predicted)", "tokens/s", "acceptance vs the limit"]
    tabs = st.tabs([*names, "long answers", *(["task score"] if scored else [])])
    with tabs[0]:
        x = st.radio(
            "Divergence",
            DIVERGENCE_AXES,
            format_func=METRIC_LABELS.get,
            horizontal=True,
            key="fr_divergence",
            help="Three measures of how far the emitted pi sits from the verifier's q, per "
            "token, from the same exact pi: KL(pi ‖ q), total variation, and KL(q ‖ pi).",
        )
        fig = ff.frontier_chart(rows, "tokens_per_call", x, selected=selected, reference=ref_rows)
        chart(fig, CHARTS[0])
        st.caption(METRIC_HELP["tokens per call"])
        missing = ff.not_drawn(rows, "tokens_per_call", x)
        if missing:
            st.caption(missing)
        if any(r.get("estimated") for r in rows):
            st.caption(ESTIMATED_NOTE)
    with tabs[1]:
        costs = k_panel.cost_panel(pair, "fr_speedup_costs")
        if costs is not None:
            fig = ff.predicted_speedup_chart(rows, costs, config.sampling.k, selected=selected)
            chart(fig, CHARTS[1])
            st.caption(
                PREDICTED_HELP + " Error bars: the interval of tokens per call carried over; "
                "the costs' own noise is not in them."
            )
    with tabs[2]:
        chart(ff.frontier_chart(rows, "tokens_per_s", selected=selected), CHARTS[2])
        st.caption(
            "Each chunk's prompts decode as one batch, so these are batch throughputs: their "
            "ratio to verifier-only's is not the speedup (that is one sequence at a time)."
        )
    with tabs[3]:
        if curve is None:
            st.info("Tick 'Compute the limit' and rerun the sweep to see the limit.")
        else:
            chart(ff.acceptance_limit_chart(rows, curve, selected=selected), CHARTS[3])
            st.caption(
                "The limit: the best mean acceptance any rule could reach at a given mean "
                "KL(pi ‖ q), on the positions the runs visited (one price per nat for all of "
                "them). Each rule's point is its exact expected acceptance sum_n p(n)·a(n) on "
                "its own decided positions; efficiency = that ÷ the limit on the same positions."
            )
    with tabs[4]:
        quality_panel.long_answers(rows, selected, chart, CHARTS[5])
    if scored:
        with tabs[5]:
            quality_panel.task_scores(rows, selected, chart, CHARTS[4])
            st.markdown("**Keep quality**")
            answer = quality_panel.own_answer(pair, result, SweepCache(), heldout_for(config))
            quality_panel.keep_quality("fr_own", answer)


TABLE_FORMATS = {
    "tokens_per_call": ".3f",
    "acceptance_rate": ".3f",
    "tokens_per_s": ".1f",
    "emitted_kl": ".4f",
    "emitted_tv": ".4f",
    "nll": ".3f",
    "task_score": ".0%",
    "limit_acceptance": ".3f",
    "efficiency": ".1%",
}
TABLE_COLUMNS = {
    "label": "setting",
    "tokens_per_call": "tokens/call",
    "acceptance_rate": "acceptance",
    "tokens_per_s": "tokens/s",
    "emitted_kl": "emitted KL",
    "emitted_tv": "emitted TV",
    "nll": "NLL",
    "task_score": "task score",
    "limit_acceptance": "limit",
    "efficiency": "efficiency",
}


def table(result: SweepResult, pair: ModelPair) -> None:
    rows = display_rows(result.rows(), TABLE_COLUMNS, TABLE_FORMATS)
    st.dataframe(rows, hide_index=True, key="fr_table")
    ran = FrontierState.get().ran_on
    backend, workers = ran[1:] if ran is not None and ran[0] == result.config else ("local", 1)
    d1, d2, _ = st.columns([1, 1, 3])
    d1.download_button(
        "Sweep file (.json)",
        lambda: page_sweep_file(result, str(pair.device), backend, workers),
        "sweep.json",
        "application/json",
        key="fr_dl_json",
        on_click="ignore",
        help='The whole sweep (prompts, settings, every record): "Open a sweep file" below '
        "opens it, here or on another server, as `sweep --export` files are.",
    )
    d2.download_button("Sweep as CSV", result.to_csv(), "frontier.csv", "text/csv", key="fr_dl_csv")


def outputs(result: SweepResult, config: SweepConfig, selected: str | None) -> None:
    """One setting's text next to verifier-only's, for the clicked (or picked) setting."""
    st.subheader("Outputs")
    rows = result.rows()
    ids = [r["setting"] for r in rows if r["setting"] != BASELINE]
    labels = {r["setting"]: r["label"] for r in rows}
    pick = st.selectbox(
        "Setting (or click a point)",
        ids,
        index=ids.index(selected) if selected in ids else 0,
        format_func=labels.get,
        key=f"fr_pick_{selected}",
    )
    prompt_i = st.selectbox(
        "Prompt",
        range(len(config.prompts)),
        format_func=lambda i: f"{i + 1}. {config.prompts[i][:90]}",
        key="fr_prompt",
    )
    text, base_text = result.outputs(pick, prompt_i)
    o1, o2 = st.columns(2)
    with o1, st.container(border=True):
        st.markdown(f"**{labels[pick]}**")
        st.text(text)
    with o2, st.container(border=True):
        st.markdown("**verifier-only** (same prompt, same seed)")
        st.text(base_text)


# ---------------------------------------------------------------------------- reference
REF_COLUMNS = {
    "label": "setting",
    "tokens_per_call": "tokens/call",
    "acceptance_rate": "acceptance",
    "emitted_kl": "emitted KL",
    "limit_acceptance": "limit",
    "efficiency": "efficiency",
}


def reference_section(s: AppSettings) -> tuple[Reference, ReferenceSweep] | None:
    """The shipped reference sweep: no model and no sweep needed, so it is there at once."""
    try:
        ref = load_reference()
    except ValueError as err:
        st.info(f"No reference sweep is shipped here: {err}")
        return None
    part, note = reference_part(ref, s.sampling, s.on_reference_pair)
    st.subheader(f"Reference frontier (top-p {part.top_p:g})")
    st.caption(f"{ref.caption()} Pair: {pair_in_words(ref.model)}.")
    if note:
        st.caption(note)
    missing = missing_rules(part)
    if missing:
        st.caption(missing)
    tabs = st.tabs(["tokens per call", "acceptance vs the limit", "efficiency table"])
    with tabs[0]:
        fig = ff.frontier_chart(
            part.rows, "tokens_per_call", title="reference sweep: tokens per call vs emitted KL"
        )
        st.plotly_chart(fig, key="fr_ref_tpc")
        missing = ff.not_drawn(part.rows, "tokens_per_call")
        if missing:
            st.caption(missing)
        if any(r.get("estimated") for r in part.rows):
            st.caption(ESTIMATED_NOTE)
        st.caption(
            "Measured on the reference prompts; the dashed line is the Pareto frontier over "
            "every rule. A few rules are drawn at first: click a name in the legend to show "
            "or hide it (double-click: only it). " + METRIC_HELP["tokens per call"]
        )
    with tabs[1]:
        if part.limit is not None:
            fig = ff.acceptance_limit_chart(part.rows, part.limit)
            st.plotly_chart(fig, key="fr_ref_limit")
    with tabs[2]:
        rows = [r for r in part.rows if r["rule"] != BASELINE]
        st.dataframe(
            display_rows(rows, REF_COLUMNS, TABLE_FORMATS), hide_index=True, key="fr_ref_table"
        )
    return ref, part


# ---------------------------------------------------------------------------- page
def user_sweep(
    s: AppSettings, reference: ReferenceSweep | None
) -> tuple[ModelPair, SweepConfig, SweepResult, SweepCache] | None:
    """The sweep form and, once run, its results; None until there are results."""
    config, problem = sweep_form(s)
    if config is None:
        if problem:
            st.info(problem)
        return None
    # A click on Cancel (drawn only while a sweep runs) reruns the script, which stops the
    # sweep; this run reads that click. Finished chunks stay cached.
    cancelled = bool(st.session_state.get("fr_cancel"))
    b1, b2, info = st.columns([1, 1, 3])
    run_clicked = b1.button("Run sweep", type="primary", icon=":material/play_arrow:", key="fr_run")
    if run_clicked:
        b2.button("Cancel", icon=":material/stop:", key="fr_cancel")
    sp = config.sampling
    info.caption(
        f"{len(config.settings)} settings + verifier-only × {len(config.prompts)} prompts, "
        f"T = {sp.temperature:g}, top-k {sp.top_k}, top-p {sp.top_p:g}, k = {sp.k}, "
        f"seed {sp.seed}. The app runs at most {MAX_SWEEP_RUNS:,} settings × prompts per "
        "sweep; the CLI has no cap."
    )
    # The reference above is on screen already; only now does the page wait for the model.
    pair = get_pair(s)
    if pair is None:
        return None
    cache = SweepCache()
    problem = prompts_problem(pair, config)
    if problem:
        st.error(problem)
        return None
    result = sweep(pair, config, cache, run_clicked, cancelled, lambda: ray_backend(s))
    if result is None:
        return None
    selected = FrontierState.get().selected
    if selected not in {r["setting"] for r in result.rows()}:
        selected = None
    trade_off(result, config, selected, pair, reference)
    table(result, pair)
    outputs(result, config, selected)
    return pair, config, result, cache


def main() -> None:
    st.title("Frontier")
    st.caption(
        "Every rule setting on the same prompts, seeds and coins (common random numbers), so "
        "the curves are smooth and every comparison is paired. The reference sweep below ships "
        "with the lab; your own sweep (further down) is cached on disk chunk by chunk: "
        "re-running is instant and an interrupted sweep resumes. Model pair, sampling, k and "
        "seed are in the sidebar."
    )
    s = settings()
    shown = reference_section(s)
    tuner_slot = st.empty()

    def reference_tuner() -> None:
        assert shown is not None
        export = partial(export_panel.frontier_panel, s, shown, key="fr")
        tuner_panel.tuner(reference_source(s, *shown, get_pair), export)

    # The reference's tuner goes on screen before the user's sweep waits for the model, unless
    # the tuner is on the user's own sweep (then swapping it in and out would flicker).
    state = FrontierState.get()
    early = shown is not None and not state.tunes_own_sweep
    if early:
        with tuner_slot.container():
            reference_tuner()
    quality_panel.reference()
    st.divider()
    st.subheader("Your sweep")
    mine = user_sweep(s, shown[1] if shown else None)
    state.tunes_own_sweep = mine is not None
    if mine is not None:
        # The user's own sweep replaces the reference in the tuner.
        with tuner_slot.container():
            export = partial(export_panel.frontier_panel, s, None, key="fr_own")
            tuner_panel.tuner(sweep_source(*mine), export)
    elif shown is not None and not early:
        with tuner_slot.container():
            reference_tuner()
    elif shown is None:
        export_panel.frontier_panel(s, None, None)
    if mine is not None:
        k_panel.frontier_k(mine[2].rows(), mine[0])
    elif shown is not None:
        k_panel.frontier_k(shown[1].rows, get_pair(s))
    st.divider()
    sweep_file_section()
    st.caption(f"{METRIC_LABELS['emitted_kl']}: " + METRIC_HELP["emitted KL"])


main()
