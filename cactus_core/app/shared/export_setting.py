"""Which setting "Use this setting" exports, and what is known about it: the models as an
engine loads them, the SGLang fit and the k tuner's best k (engine_export writes the texts).

- Decode: the rule picked now, with the sidebar's sampling; the SGLang fit on the decided
  positions of the page's last run (that rule judged on them, exact).
- Frontier: the tuner's answer (a refined one, else the reference's first guess); the SGLang
  fit on the reference sweep's estimated curves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cactus_core.app.shared.engine_export import REPO, ExportSetting
from cactus_core.app.shared.settings import AppSettings
from cactus_core.engine.loading.embedded_drafts import embedded_draft
from cactus_core.experiments.estimates.curves import rows_from_trace
from cactus_core.experiments.estimates.engine_fit import (
    SGLANG_RULE,
    SGLangFit,
    fit_on_curves,
    fit_on_rows,
)
from cactus_core.maths.rules import Rule, make_rule

if TYPE_CHECKING:
    from cactus_core.app.shared.request import DecodeRun
    from cactus_core.engine.loading.pair import ModelPair
    from cactus_core.experiments.sweeps.reference import Reference, ReferenceSweep
    from cactus_core.experiments.tuning.k_tuner import KPrediction
    from cactus_core.experiments.tuning.refine import TuneResult
    from cactus_core.experiments.tuning.tune import FirstGuess

# What engines load for the embedded pair: the verifier's Hub original (the lab ships it as a
# Q4_1 GGUF) and the independent 3-layer draft's folder, by absolute path (vLLM gets both as
# folders the plugin's export makes: engine_export.EMBEDDED_FOLDERS).
EMBEDDED_VERIFIER_HUB = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_DRAFT_PATH = str(REPO / "cactus_core" / "assets" / "draft")
# A hub id as engines take it: owner/name, nothing a shell or a path could read otherwise.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(frozen=True)
class EngineModels:
    verifier: str
    draft: str
    embedded: bool
    notes: tuple[str, ...] = ()


def engine_models(settings: AppSettings) -> EngineModels:
    """The pair as engines load it: hub ids as they are, folders by absolute path. A public
    server names its models by the operator's labels and never shows a folder: there a hub
    id is written as it is and a folder as a placeholder to replace."""
    if settings.verifier is not None:
        verifier = _engine_name(settings.verifier, settings.verifier_label, "verifier")
        draft_source = settings.draft or EMBEDDED_DRAFT_PATH
        draft = _engine_name(draft_source, settings.draft_label, "draft")
        notes = ()
        if verifier.startswith("/path/to/") or draft.startswith("/path/to/"):
            notes = (
                "This server does not show its folders: replace /path/to/… with your copy of "
                "the model.",
            )
        return EngineModels(verifier, draft, False, notes)
    notes = [
        f"The embedded verifier ships as a Q4_1 GGUF of {EMBEDDED_VERIFIER_HUB}; engines load "
        "the Hub original (bfloat16), so their numbers differ a little from the lab's "
        "(vLLM's block loads the lab's own conversion instead).",
        "The embedded draft (cactus_core/assets/draft) is a 3-layer Llama whose head scores a "
        "subset of the vocabulary; the vLLM plugin registers its architecture.",
    ]
    if embedded_draft(settings.embedded_draft).feature_draft is not None:
        notes.append(
            "The feature draft drafts from the verifier's own features and runs only in the "
            "lab: the engines get the independent 3-layer draft, which accepts less."
        )
    return EngineModels(EMBEDDED_VERIFIER_HUB, EMBEDDED_DRAFT_PATH, True, tuple(notes))


def _engine_name(source: str, label: str | None, role: str) -> str:
    """`source` as an engine loads it: a hub id as it is, a folder by absolute path; behind a
    public label, a folder becomes a placeholder named after the label."""
    if _HUB_ID.fullmatch(source) and not Path(source).exists():
        return source
    if label is not None:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or role
        return f"/path/to/{slug}"
    return str(Path(source).expanduser().resolve())


def best_k_note(pred: KPrediction | None, what: str) -> tuple[int | None, str]:
    """(best k, where it comes from) from a k-tuner prediction, or (None, why not)."""
    if pred is None:
        return None, (
            "the k tuner needs the pair's measured costs (“Measure the pair's costs” in "
            "“Acceptance by draft position”)"
        )
    tpc, speed = pred.at(pred.best_k)
    return pred.best_k, (
        f"the k tuner's best k for {what} (predicted {speed:.2f}× verifier-only, "
        f"{tpc:.2f} tokens per call)"
    )


def decode_export(
    settings: AppSettings,
    rule: Rule,
    run: DecodeRun | None,
    pred: KPrediction | None = None,
) -> ExportSetting:
    """Decode's export: the rule picked now, fitted on the last run's positions."""
    fit, note = None, "generate a run first (the fit uses its decided positions)."
    if run is not None:
        fit, note = _run_fit(rule, run)
    k, k_note = best_k_note(pred, f"run {run.run_id}'s acceptance by position" if run else "")
    models = engine_models(settings)
    return ExportSetting(
        rule=rule,
        sampling=settings.sampling,
        verifier=models.verifier,
        draft=models.draft,
        origin="the setting picked on this page",
        embedded=models.embedded,
        best_k=k,
        best_k_note=k_note,
        sglang=fit,
        sglang_note=note,
        notes=models.notes,
    )


def _run_fit(rule: Rule, run: DecodeRun) -> tuple[SGLangFit | None, str]:
    try:
        p, q = rows_from_trace(run.trace)
    except ValueError as err:  # verifier-only steps only: nothing was decided
        return None, f"run {run.run_id} has no decided positions ({err})."
    meta = run.trace.meta
    source = (
        f"run {run.run_id}'s positions (decoded with {meta.get('rule_label', meta['rule'])}, "
        "each rule judged on them exactly)"
    )
    return fit_on_rows(rule, p, q, source), ""


def frontier_rule(
    tuned: TuneResult | None, guess: FirstGuess | None, budget: float | None = None
) -> tuple[Rule, str] | None:
    """The Frontier's setting: a tuner's refined answer, else the reference's first guess for
    `budget`; the parameter as the tuner shows it (four significant digits)."""
    if tuned is not None and tuned.value is not None:
        return tuned.answer(), (
            f"the tuner's measured answer for emitted KL ≤ {tuned.kl_budget:g} nats per token"
        )
    if guess is not None:
        rule = _rule_at(guess.rule, guess.param, guess.value)
        within = "" if budget is None else f" ≤ {budget:g} nats per token"
        return rule, (
            f"the reference tuner's first guess for emitted KL{within}, an estimate that "
            "“Find it” refines by runs"
        )
    return None


def _rule_at(name: str, param: str, value: float) -> Rule:
    spec = make_rule(name).params_spec[0]
    return make_rule(name, **{param: round(value) if spec.integer else float(f"{value:.4g}")})


def frontier_export(
    settings: AppSettings,
    rule: Rule,
    origin: str,
    part: ReferenceSweep | None,
    pred: KPrediction | None = None,
) -> ExportSetting:
    """Frontier's export: the tuned setting, fitted on the reference's estimated curves."""
    fit, note = None, "no reference sweep to fit on."
    curves = None if part is None or part.estimate is None else part.estimate.curves
    if curves is not None:
        if rule.name in curves and SGLANG_RULE in curves:
            source = f"the reference sweep's estimated curves (top-p {part.top_p:g})"
            fit = fit_on_curves(rule, curves[rule.name], curves[SGLANG_RULE], source)
        else:
            note = f"the reference sweep has no curve of {rule.name} or of {SGLANG_RULE}."
    k, k_note = best_k_note(pred, f"the reference's nearest {rule.name} setting")
    models = engine_models(settings)
    return ExportSetting(
        rule=rule,
        sampling=settings.sampling,
        verifier=models.verifier,
        draft=models.draft,
        origin=origin,
        embedded=models.embedded,
        best_k=k,
        best_k_note=k_note,
        sglang=fit,
        sglang_note=note,
        notes=models.notes,
    )


def decode_prediction(run: DecodeRun | None, pair: ModelPair | None) -> KPrediction | None:
    """The k tuner's prediction for the last run's acceptance by position, where the pair's
    costs on this machine are cached (None otherwise: nothing is measured here)."""
    from cactus_core.experiments.tuning.k_tuner import cached_costs, predict_k

    counts = run.output.stats.positions if run is not None else None
    costs = cached_costs(pair) if pair is not None and counts and counts.rounds else None
    if costs is None or counts is None:
        return None
    return predict_k(counts.conditional(), costs, reached=counts.reached)


def frontier_prediction(
    rule: Rule, ref: Reference | None, part: ReferenceSweep | None
) -> KPrediction | None:
    """The k tuner's prediction for the reference's row nearest this rule's value, where the
    reference pair's costs on this machine are cached."""
    from cactus_core.experiments.tuning.k_tuner import cached_costs_for, predict_row

    costs = cached_costs_for(ref.model, "cpu") if ref is not None else None
    rows = [] if part is None else part.rule_rows(rule.name)
    if costs is None or not rows:
        return None
    value = next(iter(rule.params.values()), 0.0)
    row = min(rows, key=lambda r: abs(float(r.get("value") or 0.0) - float(value)))
    return predict_row(row, costs)
