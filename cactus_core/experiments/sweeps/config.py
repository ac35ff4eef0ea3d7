"""What a sweep runs: prompt files, settings (a rule with its swept parameter), the config.

A setting's swept parameter and default grid come from the rule's metadata
(`Rule.swept()`, `Param.grid`); the sampling settings are the shared `SamplingSettings`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.experiments.quality.task_score import check_answer
from cactus_core.maths.rules import Rule, make_rule, rule_class
from cactus_core.maths.sampling import SamplingSettings

BASELINE = "verifier-only"


# ------------------------------------------------------------------------------ prompt files

MAX_PROMPT_FILE_BYTES = 5 * 1024 * 1024
MAX_PROMPTS = 1000
# A task tag: a short name such as "code" or "maths"; "" is an untagged prompt.
TASK_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.+-]{0,39}")
UNTAGGED = "untagged"  # how an untagged prompt's task is shown


def check_task(task: str, where: str) -> str:
    """A task tag as given ("" for none); ValueError saying what a tag may be."""
    if not isinstance(task, str) or (task and not TASK_RE.fullmatch(task)):
        raise ValueError(
            f"{where}: a task is a name of at most 40 letters, digits, spaces, '_', '.', '+' "
            f"or '-' starting with a letter or digit, got {task!r}"
        )
    if task == UNTAGGED:
        raise ValueError(f"{where}: {UNTAGGED!r} is kept for prompts without a task")
    return task


def parse_prompt_file(name: str, data: bytes) -> list[str]:
    """Prompts from an uploaded file's name and bytes; ValueError naming the bad line.

    .jsonl: one prompt a line, a JSON object with a string "prompt" field (the built-in file's
    format) or a bare JSON string. .txt: one prompt a line, with the two characters \\n read as
    a newline. Blank lines are skipped. Files over 5 MB or with over 1,000 prompts are refused.
    Any bad input ends in a ValueError (tests/test_hardening.py fuzzes it), never another error.
    """
    return parse_tagged_prompt_file(name, data)[0]


def parse_tagged_prompt_file(name: str, data: bytes) -> tuple[list[str], list[str]]:
    """(prompts, their task tags) from a prompt file (`parse_prompt_file`'s formats): a .jsonl
    object may carry a "task" string, e.g. {"prompt": "...", "task": "code"}; a prompt without
    one has the tag "" (untagged)."""
    prompts, tasks, _ = parse_answered_prompt_file(name, data)
    return prompts, tasks


def parse_answered_prompt_file(name: str, data: bytes) -> tuple[list[str], list[str], list[str]]:
    """(prompts, task tags, checkable answers) from a prompt file: a .jsonl object may also
    carry an "answer" (`task_score`'s kind=form, e.g. "number=63"); "" where none."""
    if len(data) > MAX_PROMPT_FILE_BYTES:
        raise ValueError(
            f"{name}: {len(data) / 2**20:.1f} MB is over the {MAX_PROMPT_FILE_BYTES // 2**20} MB "
            "limit for a prompt file"
        )
    suffix = PurePath(name).suffix.lower()
    if suffix not in (".jsonl", ".txt"):
        raise ValueError(f"{name}: a prompt file must end in .jsonl or .txt, not {suffix or '∅'}")
    prompts: list[str] = []
    tasks: list[str] = []
    answers: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as err:
            raise ValueError(f"{name}, line {number}: not valid UTF-8 ({err.reason})") from None
        if not line.strip():
            continue
        task = answer = ""
        if suffix == ".jsonl":
            prompt, task, answer = _jsonl_prompt(name, number, line)
        else:
            prompt = line.strip().replace("\\n", "\n")
        if "\x00" in prompt:
            raise ValueError(f"{name}, line {number}: the prompt contains a NUL character")
        prompts.append(prompt)
        tasks.append(task)
        answers.append(answer)
        if len(prompts) > MAX_PROMPTS:
            raise ValueError(f"{name}: more than {MAX_PROMPTS} prompts (line {number}); split it")
    if not prompts:
        raise ValueError(f"{name}: no prompts (the file is empty or only blank lines)")
    return prompts, tasks, answers


def _jsonl_prompt(name: str, number: int, line: str) -> tuple[str, str, str]:
    where = f"{name}, line {number}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
    except RecursionError:
        # json's scanner recurses once per bracket: 100k brackets overflow the stack.
        raise ValueError(f"{where}: the JSON is nested too deeply") from None
    except ValueError:
        # e.g. an integer longer than Python's int string limit
        raise ValueError(f"{where}: not valid JSON (a value is too large)") from None
    task = answer = ""
    if isinstance(obj, dict):
        if "prompt" not in obj:
            raise ValueError(f'{name}, line {number}: the JSON object has no "prompt" field')
        if "task" in obj:
            if not isinstance(obj["task"], str):
                raise ValueError(f'{where}: "task" must be a string')
            task = check_task(obj["task"].strip(), where)
        if "answer" in obj:
            check_answer(obj["answer"], f'{where}: "answer"')
            answer = obj["answer"]
        obj = obj["prompt"]
    if not isinstance(obj, str):
        raise ValueError(
            f'{name}, line {number}: expected a string or {{"prompt": "..."}}, '
            f"got {type(obj).__name__}"
        )
    if not obj.strip():
        raise ValueError(f"{name}, line {number}: the prompt is empty")
    try:
        # JSON's \\ud800 escapes can spell a lone surrogate, which no tokenizer can encode.
        obj.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"{name}, line {number}: the prompt is not valid Unicode (a lone surrogate at "
            f"character {err.start + 1})"
        ) from None
    return obj, task, answer


# ---------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Setting:
    """One point of a sweep: a rule with its parameters, or the verifier-only baseline."""

    rule: str
    params: tuple[tuple[str, float | int], ...] = ()

    @classmethod
    def of(cls, rule: str, **params: float | int) -> Setting:
        if rule == BASELINE:
            if params:
                raise ValueError(f"{BASELINE} takes no parameters")
            return cls(rule)
        checked = make_rule(rule, **params).params  # validates names and ranges
        given = {k: checked[k] for k in params}
        return cls(rule, tuple(sorted(given.items())))

    @property
    def is_baseline(self) -> bool:
        return self.rule == BASELINE

    def make_rule(self) -> Rule:
        if self.is_baseline:
            raise ValueError("the verifier-only baseline has no acceptance rule")
        return make_rule(self.rule, **dict(self.params))

    @property
    def label(self) -> str:
        return BASELINE if self.is_baseline else self.make_rule().label

    @property
    def param(self) -> str | None:
        """The swept parameter's name (None for sps and the baseline)."""
        if self.is_baseline or (param := rule_class(self.rule).swept()) is None:
            return None
        return param.name

    @property
    def value(self) -> float | None:
        """The swept parameter's value (None for sps and the baseline)."""
        name = self.param
        return None if name is None else float(self.make_rule().params[name])

    @property
    def id(self) -> str:
        """A short stable name, e.g. 'cactus:delta=0.3' (used to find a clicked point)."""
        return self.rule + "".join(f":{k}={v:g}" for k, v in self.params)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "params": dict(self.params)}

    @classmethod
    def from_id(cls, text: str) -> Setting:
        rule, *parts = text.split(":")
        params: dict[str, float | int] = {}
        for part in parts:
            key, _, val = part.partition("=")
            num = float(val)
            params[key] = num
        integer = {p.name for p in rule_class(rule).params_spec if p.integer}
        params = {k: int(v) if k in integer and v.is_integer() else v for k, v in params.items()}
        return cls.of(rule, **params)


def settings_from_grids(grids: dict[str, Sequence[float]]) -> list[Setting]:
    """Settings for each rule over its grid of the swept parameter (sps takes an empty grid)."""
    out: list[Setting] = []
    for rule, grid in grids.items():
        param = rule_class(rule).swept()
        if param is None:
            out.append(Setting.of(rule))
            continue
        if not grid:
            raise ValueError(f"rule {rule!r}: give at least one value of {param.name}")
        for value in grid:
            out.append(Setting.of(rule, **{param.name: _grid_value(rule, param, value)}))
    return list(dict.fromkeys(out))  # drop repeats, keep order


def _grid_value(rule: str, param: Any, value: float) -> float | int:
    """The value as the parameter takes it; an integer parameter refuses 2.7 rather than
    rounding it to 2 behind the user's back."""
    if not param.integer:
        return float(value)
    if isinstance(value, bool) or not float(value).is_integer():
        raise ValueError(f"rule {rule!r}: {param.name} must be a whole number, got {value!r}")
    return int(value)


def parse_grid(rule: str, text: str) -> list[float]:
    """A rule's grid from text such as "0, 0.1, 0.3" (commas or spaces); ValueError if bad."""
    param = rule_class(rule).swept()
    parts = [t for t in text.replace(",", " ").split() if t]
    if param is None:
        if parts:
            raise ValueError(f"{rule} has no parameter to sweep; leave its grid empty")
        return []
    if not parts:
        raise ValueError(f"{rule}: give at least one value of {param.name}")
    values = []
    for t in parts:
        try:
            values.append(float(t))
        except ValueError:
            raise ValueError(f"{rule}: {t!r} is not a number") from None
    settings_from_grids({rule: values})  # checks each value's range
    return values


@dataclass(frozen=True)
class SweepConfig:
    """Everything that decides a sweep's numbers except the models."""

    prompts: tuple[str, ...]
    settings: tuple[Setting, ...]
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    max_new_tokens: int = 64
    chat_template: bool = True
    chunk_size: int = 5
    limit: bool = True  # score every decided position for the limit and the efficiency
    # also estimate each setting's rule curve on the positions its own run decoded
    # (`estimate.from_own_runs`); what the shipped reference keeps
    own_estimate: bool = False
    # each prompt's task tag ("" untagged), or () for none; not part of a chunk's cache key,
    # since a tag changes no number, only how the records are grouped
    tasks: tuple[str, ...] = ()
    # draft a tree each round instead of a chain (a feature-draft pair; prompts one by one);
    # None: a chain of k. Part of the cache key only when set, so chain sweeps keep theirs.
    tree: TreeSettings | None = None
    # each prompt's checkable answer (`task_score`: "number=63", "" none), or () for none; not
    # part of a chunk's cache key: the score reads the decoded text after the fact
    answers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.prompts:
            raise ValueError("a sweep needs at least one prompt")
        if len(self.prompts) > MAX_PROMPTS:
            raise ValueError(
                f"a sweep takes at most {MAX_PROMPTS} prompts, got {len(self.prompts)}"
            )
        if not self.settings:
            raise ValueError("a sweep needs at least one setting")
        if any(s.is_baseline for s in self.settings):
            raise ValueError(f"{BASELINE} is always run; do not list it as a setting")
        if not isinstance(self.sampling, SamplingSettings):
            raise ValueError("sampling must be a SamplingSettings")
        if self.tree is not None and not isinstance(self.tree, TreeSettings):
            raise ValueError(f"tree must be a TreeSettings or None, got {self.tree!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")
        if self.tasks:
            if len(self.tasks) != len(self.prompts):
                raise ValueError(
                    f"{len(self.tasks)} task tags for {len(self.prompts)} prompts; give one each"
                )
            for i, task in enumerate(self.tasks):
                check_task(task, f"prompt {i + 1}")
        if self.answers:
            if len(self.answers) != len(self.prompts):
                raise ValueError(
                    f"{len(self.answers)} answers for {len(self.prompts)} prompts; give one "
                    'each ("" for a prompt without one)'
                )
            for i, answer in enumerate(self.answers):
                if answer:
                    check_answer(answer, f"prompt {i + 1}'s answer")

    def task(self, index: int) -> str:
        """Prompt index's task tag, UNTAGGED when it has none."""
        return (self.tasks[index] if self.tasks else "") or UNTAGGED

    @property
    def task_names(self) -> list[str]:
        """The distinct tags in prompt order; [] when no prompt is tagged."""
        if not any(self.tasks):
            return []
        return list(dict.fromkeys(self.task(i) for i in range(len(self.prompts))))

    def chunks(self) -> list[tuple[int, ...]]:
        n = len(self.prompts)
        return [tuple(range(i, min(i + self.chunk_size, n))) for i in range(0, n, self.chunk_size)]

    def decoding(self) -> dict[str, Any]:
        """The sampling settings with the generation length and template: what a chunk's
        numbers depend on besides the setting, the prompts and the models."""
        return {
            **self.sampling.to_dict(),
            "max_new_tokens": self.max_new_tokens,
            "chat_template": self.chat_template,
            **({"tree": self.tree.to_dict()} if self.tree is not None else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.decoding(),
            "chunk_size": self.chunk_size,
            "limit": self.limit,
            "own_estimate": self.own_estimate,
            "settings": [s.id for s in self.settings],
            "prompts": list(self.prompts),
            **({"tasks": list(self.tasks)} if any(self.tasks) else {}),
            **({"answers": list(self.answers)} if any(self.answers) else {}),
        }


def prompt_seed(seed: int, index: int) -> int:
    """The seed of prompt `index`: the same in every setting (common random numbers)."""
    return seed + index
