"""The shipped quality reference: does δ hurt the embedded pair's answers, measured once and
shipped so the Frontier shows it without a model.

Three sweep files (`sweep --export`, read with `sweep_file.load_sweep_file`), each decoding the
same settings (sps, and a few values of every tunable rule it covers) at T 0.7, top-p 1.0,
k 4 on the default embedded pair:

- `tune`: the task set's tuning split, 48 new tokens: paired task-score differences;
- `heldout`: its held-out split, the same settings: confirms an answer without a run;
- `long`: open prompts (`training/heldout_prompts.jsonl`), 256 new tokens: loops, end tokens,
  distinct 4-grams and length against lossless.

`QUALITY_REFERENCE_COMMANDS` are the commands that made them (docs/benchmarks.md has their
times); regenerate them with the reference sweep when the shipped draft changes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cactus_core.experiments.quality.tune import (
    DEFAULT_MAX_DROP,
    QualityAnswer,
    confirmed_by,
    quality_answer,
)
from cactus_core.experiments.sweeps.file import load_sweep_file
from cactus_core.experiments.sweeps.run import SweepResult

DATA = Path(__file__).resolve().parents[2] / "data"
PARTS = ("tune", "heldout", "long")
FILES = {part: DATA / f"quality_reference_{part}.json.gz" for part in PARTS}
_RULES = (
    "--rules sps,cactus,interp,relaxed-topk,optimal-price --grid cactus=0,0.1,0.3,1,3 "
    "--grid interp=0.25,0.5,1 --grid relaxed-topk=0.1,0.5 --grid optimal-price=1,4 "
    "--top-p 1.0 --temperature 0.7 --k 4 --chunk-size 32 --no-limit --threads 1"
)
QUALITY_REFERENCE_COMMANDS = {
    "tune": f"python -m cactus_core sweep --task-set --n-prompts 324 {_RULES} "
    f"--max-new-tokens 48 --export {FILES['tune'].relative_to(DATA.parents[1])}",
    "heldout": "python -m cactus_core sweep --prompts cactus_core/data/task_set_heldout.jsonl "
    f"--n-prompts 106 {_RULES} --max-new-tokens 48 "
    f"--export {FILES['heldout'].relative_to(DATA.parents[1])}",
    "long": "python -m cactus_core sweep --prompts training/heldout_prompts.jsonl --n-prompts 64 "
    f"{_RULES} --max-new-tokens 256 --export {FILES['long'].relative_to(DATA.parents[1])}",
}


@dataclass(frozen=True)
class QualityReference:
    tune: SweepResult
    heldout: SweepResult
    long: SweepResult
    provenance: dict[str, Any]  # the tuning sweep's (command, commit, date, machine)
    # rows and answers, made once per process: the Frontier reads them on every rerun
    _memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def rows(self, part: str) -> list[dict[str, Any]]:
        """A part's rows (`SweepResult.rows`), computed once."""
        if part not in PARTS:
            raise ValueError(f"no part {part!r}; parts: {', '.join(PARTS)}")
        if part not in self._memo:
            self._memo[part] = getattr(self, part).rows()
        return self._memo[part]  # type: ignore[no-any-return]

    def answer(self, kl_budget: float, max_drop: float = DEFAULT_MAX_DROP) -> QualityAnswer:
        """The quality-constrained answer on the tuning split, confirmed on the held-out one."""
        key = ("answer", kl_budget, max_drop)
        if key not in self._memo:
            answer = quality_answer(self.tune, kl_budget, max_drop, self.rows("tune"))
            self._memo[key] = confirmed_by(answer, self.heldout, self.rows("heldout"))
        return self._memo[key]  # type: ignore[no-any-return]

    def caption(self) -> str:
        t, h, long = self.tune.config, self.heldout.config, self.long.config
        sp = t.sampling
        return (
            f"Shipped quality reference: the task set's {len(t.prompts)} tuning and "
            f"{len(h.prompts)} held-out prompts ({t.max_new_tokens} new tokens), and "
            f"{len(long.prompts)} open prompts at {long.max_new_tokens} new tokens; "
            f"T {sp.temperature:g}, top-p {sp.top_p:g}, k {sp.k}, seed {sp.seed}; made "
            f"{str(self.provenance.get('date', ''))[:10]} at commit "
            f"{str(self.provenance.get('commit', ''))[:10]}."
        )


def load_quality_reference() -> QualityReference:
    """The shipped files, read once per process; ValueError naming what is missing."""
    stamps = tuple(f.stat().st_mtime_ns if f.exists() else 0 for f in FILES.values())
    return _load(stamps)


@functools.lru_cache(maxsize=1)
def _load(stamps: tuple[int, ...]) -> QualityReference:
    parts = {}
    for part, path in FILES.items():
        if not path.exists():
            raise ValueError(
                f"no quality reference at {path}; make it with `{QUALITY_REFERENCE_COMMANDS[part]}`"
            )
        parts[part] = load_sweep_file(path.read_bytes(), path.name)
    return QualityReference(
        parts["tune"].result,
        parts["heldout"].result,
        parts["long"].result,
        parts["tune"].provenance,
    )
