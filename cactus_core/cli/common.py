"""What the commands share, at the bottom of the CLI: flag names, progress on stderr, output
path and seed checks, the sampling, rule and tree flags and the objects they make, and loading
the pair from the model flags (`models`)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cactus_core.cli.models import pair_kwargs_from_args
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.maths.rules import (
    LOSSLESS_RULE,
    RULE_NAMES,
    RULES,
    Rule,
    make_rule,
    rule_class,
)
from cactus_core.maths.sampling import SEED_MAX, SamplingSettings

if TYPE_CHECKING:
    from cactus_core.engine.loading.pair import ModelPair


def flag(name: str) -> str:
    """A parameter's command-line flag: delta_r -> --delta-r."""
    return "--" + name.replace("_", "-")


def progress(message: str) -> None:
    """One line of progress on stderr (stdout stays clean for the results)."""
    print(message, file=sys.stderr, flush=True)


def text_progress(stream: Any, width: int = 30) -> Callable[[Any], None]:
    """A one-line progress bar for a terminal (carriage returns; a newline at the end)."""
    start = time.perf_counter()

    def show(p: Any) -> None:
        filled = int(width * p.fraction)
        bar = "#" * filled + "." * (width - filled)
        where = "cached" if p.cached else "ran"
        elapsed = time.perf_counter() - start
        workers = f" {p.workers} workers" if p.workers > 1 else ""
        stream.write(
            f"\r[{bar}] {p.done}/{p.total} chunks{workers} {elapsed:5.0f}s  {p.setting} ({where})"
        )
        stream.write(" " * 8 + ("\n" if p.done == p.total else ""))
        stream.flush()

    return show


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def check_output_path(path: str | None, flag: str) -> None:
    """ValueError unless `path` looks writable: a file (not a folder) in an existing folder.

    Checked before the models load, so a typo in an output path fails in a second instead of
    after a long run whose results it would lose.
    """
    if path is None or path == "-":
        return
    target = os.path.expanduser(path)
    if os.path.isdir(target):
        raise ValueError(f"{flag} {path!r} is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {path!r}: the folder {folder!r} does not exist")
    if os.path.exists(target):
        writable = os.access(target, os.W_OK)
    else:
        writable = os.access(folder, os.W_OK | os.X_OK)
    if not writable:
        raise ValueError(f"{flag} {path!r}: no permission to write there")


def check_seed_range(seed: int, rows: int, flag: str = "--seed") -> None:
    """Row i uses seed + i; all of them must fit torch's seed range."""
    if seed < 0 or seed + max(rows - 1, 0) > SEED_MAX:
        raise ValueError(
            f"{flag} must be an integer in [0, {SEED_MAX - max(rows - 1, 0)}] for {rows} "
            f"prompt(s), got {seed}"
        )


def add_sampling_args(
    p: argparse.ArgumentParser, max_new_tokens: int = 128, top_p_tables: bool = False
) -> None:
    """The SamplingSettings fields as flags, plus the generation length and chat template.
    top_p_tables: --top-p takes several values, one table each (the benchmark)."""
    g = p.add_argument_group("sampling")
    for name, kind, default, text in SamplingSettings.field_specs():
        if name == "top_p" and top_p_tables:
            g.add_argument(
                "--top-p", type=float, nargs="+", default=[1.0, 0.95], help="one table each"
            )
            continue
        g.add_argument(flag(name), type=kind, default=default, help=f"{text} (default {default})")
    g.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    g.add_argument("--no-chat-template", action="store_true", help="encode the prompt as raw text")


def sampling_from_args(args: argparse.Namespace, **override: Any) -> SamplingSettings:
    """SamplingSettings from the parsed flags (ValueError, naming the field, if out of range)."""
    values = {name: getattr(args, name) for name, *_ in SamplingSettings.field_specs()}
    return SamplingSettings(**{**values, **override})


def rule_params() -> dict[str, tuple[bool, list[str]]]:
    """Every rule parameter name: (integer, the rules that take it), from the rules' metadata."""
    out: dict[str, tuple[bool, list[str]]] = {}
    for name, cls in RULES.items():
        for param in cls.params_spec:
            out.setdefault(param.name, (param.integer, []))[1].append(name)
    return out


def add_rule_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("acceptance rule")
    g.add_argument(
        "--rule", default=LOSSLESS_RULE, choices=RULE_NAMES, help=f"default {LOSSLESS_RULE}"
    )
    for name, (integer, rules) in rule_params().items():
        g.add_argument(
            flag(name),
            dest=name,
            type=int if integer else float,
            default=None,
            help=f"the rule's {name} (rules that take it: {', '.join(rules)})",
        )


def rule_from_args(args: argparse.Namespace) -> Rule:
    """The rule named by --rule with the parameter flags given; a flag the rule does not take
    is an error naming the ones it does."""
    allowed = [param.name for param in rule_class(args.rule).params_spec]
    params: dict[str, Any] = {}
    for name in rule_params():
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in allowed:
            takes = ", ".join(flag(n) for n in allowed) or "no parameters"
            raise ValueError(f"rule {args.rule!r} does not take {flag(name)}; it takes {takes}")
        params[name] = value
    return make_rule(args.rule, **params)


def add_tree_args(p: argparse.ArgumentParser, what: str) -> None:
    g = p.add_argument_group("draft tree (needs a feature draft)")
    g.add_argument("--tree", action="store_true", help=what)
    d = TreeSettings()
    for name, value in d.to_dict().items():
        low, high = d.range_of(name)
        g.add_argument(
            f"--tree-{name.replace('_', '-')}",
            type=int,
            default=value,
            help=f"the tree's {TreeSettings.HELP[name]}, {low}..{high} (default {value})",
        )


def tree_from_args(args: argparse.Namespace) -> TreeSettings | None:
    """The --tree settings, or None without --tree (ValueError for a value out of range)."""
    if not args.tree:
        return None
    names = TreeSettings().to_dict()
    return TreeSettings(**{name: getattr(args, f"tree_{name}") for name in names})


def load_pair_from_args(args: argparse.Namespace) -> ModelPair:
    """The pair the model flags name, on --threads torch threads (checked against the CPUs)."""
    import torch

    from cactus_core.engine.loading.models import load_pair

    if args.threads is not None:
        # More OpenMP threads than cores only spin, and a huge count crashes torch's pool.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        cores = cores or os.cpu_count() or 1
        if not 1 <= args.threads <= cores:
            raise ValueError(
                f"--threads must be in [1, {cores}] (this machine's CPUs), got {args.threads}"
            )
        torch.set_num_threads(args.threads)

    return load_pair(**pair_kwargs_from_args(args))


def read_prompt_file(path: str, flag: str) -> tuple[list[str], list[str], list[str]]:
    """(prompts, task tags, checkable answers) from a .jsonl or .txt prompt file named by
    `flag` ("" where a prompt has no tag or no answer)."""
    from cactus_core.experiments.sweeps.config import (
        MAX_PROMPT_FILE_BYTES,
        parse_answered_prompt_file,
    )

    if os.path.isdir(path):
        raise ValueError(f"{flag} {path!r} is a folder; give a .jsonl or .txt file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PROMPT_FILE_BYTES + 1)  # parse_prompt_file refuses the excess
    except OSError as exc:
        raise ValueError(f"{flag} {path!r}: cannot read it ({exc.strerror or exc})") from None
    return parse_answered_prompt_file(path, data)
