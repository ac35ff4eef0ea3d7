"""Quality beyond divergence: a task score for each setting of a sweep, with its interval.

A prompt can carry a checkable answer (`answer` in a .jsonl prompt file, e.g. the built-in
task set, `experiments.quality.task_set`): a kind and the accepted forms, written
`kind=form|form`:

- `number=63`: the last number the output writes is 63 ("100 − 37 = 63." passes, "100 minus
  37 is 2." does not; the question's own numbers, said first, do not count);
- `word=Paris|paris`: one of the forms appears as a whole word, case ignored ("The capital of
  France is Paris." passes);
- `yesno=no`: the output's first "yes" or "no" is that one.

A setting's task score is the share of its prompts whose output passes, with a 95% Wilson
interval over prompts (each prompt is decoded once per setting, with the same seed in every
setting, so two settings' scores are paired). The score reads the decoded text only: it needs
no model and is computed from a sweep's records after the fact.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cactus_core.experiments.estimates.override import wilson_interval

ANSWER_KINDS = ("number", "word", "yesno")
# An answer is a few accepted spellings, not a list to search: caps that keep a sweep file's
# answers from costing seconds per rerun (20,000 forms took 17-24 s a rerun in public mode).
MAX_FORMS = 32
MAX_FORM_CHARS = 100
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?")
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def check_answer(spec: str, where: str = "answer") -> tuple[str, tuple[str, ...]]:
    """(kind, forms) of an answer spec; ValueError naming the allowed kinds otherwise."""
    if not isinstance(spec, str) or "=" not in spec:
        raise ValueError(f"{where} must be written kind=form (kinds: {', '.join(ANSWER_KINDS)})")
    kind, _, text = spec.partition("=")
    forms = tuple(f.strip() for f in text.split("|") if f.strip())
    if kind not in ANSWER_KINDS:
        raise ValueError(
            f"{where}: unknown answer kind {kind!r}; allowed: {', '.join(ANSWER_KINDS)}"
        )
    if not forms:
        raise ValueError(f"{where}: no accepted form after {kind}=")
    if len(forms) > MAX_FORMS:
        raise ValueError(f"{where}: at most {MAX_FORMS} accepted forms, got {len(forms)}")
    if max(len(f) for f in forms) > MAX_FORM_CHARS:
        raise ValueError(f"{where}: an accepted form is at most {MAX_FORM_CHARS} characters")
    if kind == "number" and any(_NUMBER.fullmatch(f) is None for f in forms):
        raise ValueError(f"{where}: a number answer must be a number, got {text!r}")
    if kind == "yesno" and any(f.lower() not in ("yes", "no") for f in forms):
        raise ValueError(f"{where}: a yes/no answer is yes or no, got {text!r}")
    return kind, forms


def passes(spec: str, text: str) -> bool:
    """Whether an output passes its prompt's answer spec (module docstring)."""
    return _checker(spec)(text)


@functools.lru_cache(maxsize=4096)
def _checker(spec: str) -> Callable[[str], bool]:
    """The spec's test, parsed and compiled once (every setting of a sweep checks the same
    prompts' answers, and a page checks them again on every rerun)."""
    kind, forms = check_answer(spec)
    if kind == "number":
        wanted = {_number(f) for f in forms}

        def number(text: str) -> bool:
            found = _NUMBER.findall(text)
            return bool(found) and _number(found[-1]) in wanted

        return number
    if kind == "yesno":
        answer = forms[0].lower()

        def yesno(text: str) -> bool:
            first = _YES_NO.search(text)
            return first is not None and first.group(1).lower() == answer

        return yesno
    words = "|".join(re.escape(f) for f in forms)
    pattern = re.compile(rf"(?<!\w)(?:{words})(?!\w)", re.IGNORECASE)
    return lambda text: pattern.search(text) is not None


def _number(text: str) -> float:
    return float(text.replace(",", "."))


@dataclass(frozen=True)
class TaskScore:
    """The share of prompts a setting answers right, with its 95% Wilson interval."""

    correct: int
    prompts: int

    @property
    def mean(self) -> float:
        return self.correct / self.prompts if self.prompts else math.nan

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% Wilson interval of the share (NaN, NaN with no prompts)."""
        if not self.prompts:
            return math.nan, math.nan
        iv = wilson_interval(self.correct, self.prompts)
        return iv.lo, iv.hi


def task_score(answers: Sequence[str], texts: Sequence[str]) -> TaskScore:
    """A setting's score over the prompts that carry an answer ("" carries none)."""
    if len(answers) != len(texts):
        raise ValueError(f"{len(answers)} answers for {len(texts)} outputs")
    judged = [passes(a, t) for a, t in zip(answers, texts, strict=True) if a]
    return TaskScore(sum(judged), len(judged))
