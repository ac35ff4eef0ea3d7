"""The Frontier page's sweep without Streamlit, as the Decode page has its request and run: the
sweep a form describes (`sweep_config`), its progress in words, and what the page reads of the
experiments layer (sweeps, their cache and files, the reference), so that the page imports
only the app. Running a sweep is `run_sweep`: the cache makes a rerun instant and an interrupted
one resume."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cactus_core.app.shared.limits import check_sweep_size
from cactus_core.app.shared.settings import AppSettings
from cactus_core.experiments.quality.task_set import HELDOUT_FILE, TUNE_FILE
from cactus_core.experiments.sweeps.cache import SweepCache as SweepCache
from cactus_core.experiments.sweeps.config import BASELINE as BASELINE
from cactus_core.experiments.sweeps.config import SweepConfig, settings_from_grids
from cactus_core.experiments.sweeps.config import (
    parse_answered_prompt_file as parse_answered_prompt_file,
)
from cactus_core.experiments.sweeps.config import parse_grid as parse_grid

# What the page reads of the experiments layer: through this view, never directly.
from cactus_core.experiments.sweeps.reference import Reference as Reference
from cactus_core.experiments.sweeps.reference import ReferenceSweep as ReferenceSweep
from cactus_core.experiments.sweeps.reference import load_reference as load_reference
from cactus_core.experiments.sweeps.run import METRIC_LABELS as METRIC_LABELS
from cactus_core.experiments.sweeps.run import Progress
from cactus_core.experiments.sweeps.run import SweepCancelled as SweepCancelled
from cactus_core.experiments.sweeps.run import SweepResult as SweepResult
from cactus_core.experiments.sweeps.run import cached_chunks as cached_chunks
from cactus_core.experiments.sweeps.run import run_sweep as run_sweep

# The x-axes the tokens-per-call chart offers: three divergences of the same exact pi (a rule
# whose pi is estimated from the decode carries its interval), and the task score.
DIVERGENCE_AXES = ("emitted_kl", "emitted_tv", "emitted_reverse_kl")


def task_set_prompts(split: str = "tune") -> tuple[list[str], list[str], list[str]]:
    """The built-in task set's tuning (or "heldout") split, prompts with checkable answers:
    (prompts, task tags, answers)."""
    path = TUNE_FILE if split == "tune" else HELDOUT_FILE
    return parse_answered_prompt_file(path.name, path.read_bytes())


def heldout_for(config: SweepConfig) -> tuple[list[str], list[str], list[str]] | None:
    """The held-out split that confirms a quality answer on this sweep: the task set's, when
    the sweep's prompts are the first of its tuning split; None otherwise."""
    tune = task_set_prompts("tune")[0]
    if list(config.prompts) != tune[: len(config.prompts)]:
        return None
    return task_set_prompts("heldout")


def sweep_config(
    s: AppSettings,
    prompts: Sequence[str],
    tasks: Sequence[str],
    grids: Mapping[str, list[float]],
    max_new_tokens: int,
    chunk_size: int,
    limit: bool,
    answers: Sequence[str] = (),
) -> SweepConfig:
    """The sweep the form describes, with the sidebar's sampling and drafting (a tree sweep
    decodes prompt by prompt) and the prompts' checkable answers ("" none); ValueError over
    the app's cap or for a setting SweepConfig refuses."""
    settings = tuple(settings_from_grids(dict(grids)))
    check_sweep_size(len(settings), len(prompts))
    return SweepConfig(
        prompts=tuple(prompts),
        settings=settings,
        sampling=s.sampling,
        max_new_tokens=max_new_tokens,
        chunk_size=chunk_size,
        limit=limit,
        tasks=tuple(tasks) if any(tasks) else (),
        tree=s.tree,
        answers=tuple(answers) if any(answers) else (),
    )


def progress_text(p: Progress) -> str:
    """A progress bar's words: chunks done, where from, the setting."""
    where = "from the cache" if p.cached else "computed"
    workers = f", {p.workers} Ray workers" if p.workers > 1 else ""
    return f"{p.done} / {p.total} chunks{workers} — {p.setting} ({where})"
