"""`python -m cactus_core sweep`: rules x parameter grids on a prompt set, cached and
resumable, on this process or a Ray cluster (`--backend ray`), with the tuner per task and a
portable sweep file (`--export`)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from typing import Any

from cactus_core.cli.common import (
    add_sampling_args,
    add_tree_args,
    check_output_path,
    check_seed_range,
    read_prompt_file,
    sampling_from_args,
    text_progress,
    tree_from_args,
)
from cactus_core.cli.models import add_model_args, pair_kwargs_from_args
from cactus_core.cli.reference import cmd_reference
from cactus_core.maths.rules import DEFAULT_RULE, LOSSLESS_RULE, RULE_NAMES, RULES, rule_class


def add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="rules x parameter grids on a prompt set (cached, resumable)")
    rules = p.add_argument_group("rules")
    rules.add_argument(
        "--rules",
        default=f"{DEFAULT_RULE},{LOSSLESS_RULE}",
        help=f"comma-separated rules to sweep (of {', '.join(RULE_NAMES)}); default %(default)s",
    )
    grids = "; ".join(
        f"{name}={','.join(f'{v:g}' for v in param.grid)}"
        for name, cls in RULES.items()
        if (param := cls.swept()) is not None
    )
    rules.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="RULE=V1,V2,...",
        help=f"a rule's values of its swept parameter (repeatable); defaults: {grids}",
    )
    p.add_argument(
        "--prompts",
        default=None,
        metavar="FILE",
        help="a .jsonl or .txt prompt file (default: the built-in chat prompts)",
    )
    p.add_argument(
        "--task-set",
        action="store_true",
        help="the built-in task set's tuning split (cactus_core/data/task_set_tune.jsonl: "
        "checkable answers, so every setting gets a task score and its paired difference from "
        "sps)",
    )
    p.add_argument(
        "--n-prompts",
        type=int,
        default=None,
        help="use the first N (default 20; with --reference all the built-in prompts)",
    )
    add_sampling_args(p, max_new_tokens=64)
    add_tree_args(p, "draft a tree each round instead of a chain (prompts one by one)")
    p.add_argument(
        "--chunk-size",
        type=int,
        default=32,
        help="prompts per batched call, the unit of caching and resuming (default 32: on a "
        "2-core CPU a sweep at 32 runs 2.2 times as fast as at 5, docs/benchmarks.md)",
    )
    p.add_argument(
        "--no-limit",
        action="store_true",
        help="skip the limit (the per-position scoring behind the efficiency)",
    )
    add_reference_args(p)
    p.add_argument("--format", choices=("json", "csv"), default="json")
    p.add_argument("--output", "-o", default=None, help="write here instead of stdout")
    p.add_argument(
        "--cache-dir", default=None, help="sweep cache (default $CACTUS_CACHE_DIR/sweeps)"
    )
    add_quality_args(p)
    p.add_argument(
        "--html",
        default=None,
        metavar="PATH",
        help="also write the frontier charts as one self-contained HTML page",
    )
    p.add_argument(
        "--export",
        default=None,
        metavar="FILE",
        help="also write a portable sweep file (records, prompts with tasks, pair, sampling, "
        "code version, provenance; gzipped if FILE ends in .gz) that the Frontier page opens",
    )
    add_backend_args(p)
    add_model_args(p)
    p.set_defaults(handler=cmd_sweep, sweep_parser=p)


def add_quality_args(p: argparse.ArgumentParser) -> None:
    """--tune-kl and --tune-rule (the tuner), and --keep-quality, --max-drop and --confirm-on
    (the tuner that keeps quality)."""
    p.add_argument(
        "--tune-kl",
        type=float,
        default=None,
        metavar="NATS",
        help="also find the parameter of --tune-rule meeting this emitted KL per token",
    )
    p.add_argument("--tune-rule", default=DEFAULT_RULE, choices=_tunable())
    p.add_argument(
        "--keep-quality",
        action="store_true",
        help="with --tune-kl on prompts with answers: also the fastest setting of the sweep "
        "whose answers are not detectably worse than sps's and whose loops do not rise, "
        "confirmed on --confirm-on",
    )
    p.add_argument(
        "--max-drop",
        type=float,
        default=None,
        metavar="SHARE",
        help="with --keep-quality: the drop in task score worth catching (default 0.05); the "
        "answer says when the prompt set cannot detect one this small",
    )
    p.add_argument(
        "--confirm-on",
        default=None,
        metavar="FILE",
        help="with --keep-quality: the held-out prompts (with answers) that confirm the answer "
        "(default with --task-set: its held-out split, cactus_core/data/task_set_heldout.jsonl)",
    )


def add_reference_args(p: argparse.ArgumentParser) -> None:
    """--reference and its flags: rebuilding the shipped reference sweep (`reference`)."""
    p.add_argument(
        "--reference",
        action="store_true",
        help="regenerate the shipped reference sweep (every rule at its grid, T 0.7, k 4, "
        "top-p 1 and 0.95, 64 tokens; --n-prompts and --output apply, the rest is fixed)",
    )
    p.add_argument(
        "--missing-only",
        action="store_true",
        help="with --reference: run only the settings the shipped file lacks (a grid grown "
        "since it was made) and add them to it, keeping everything it holds",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --reference and no --output: overwrite the shipped reference file",
    )


def add_backend_args(p: argparse.ArgumentParser) -> None:
    """--backend, --ray-address and --workers: where a sweep's chunks run."""
    scale = p.add_argument_group("backend")
    scale.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where the chunks run: this process (default) or a Ray cluster's workers "
        "(needs `pip install ray==2.60.0`; docs/scale.md)",
    )
    scale.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="the cluster for --backend ray: auto (this node's `ray start` cluster) or "
        "ray://HOST:PORT; default: a local cluster with --workers CPUs, started and stopped here",
    )
    scale.add_argument(
        "--workers", type=int, default=2, help="Ray workers, each holding one pair (default 2)"
    )


def _tunable() -> list[str]:
    return [name for name, cls in RULES.items() if cls.caps.tunable]


def sweep_config_from_args(args: argparse.Namespace):  # -> SweepConfig
    """A SweepConfig from parsed `sweep` arguments; ValueError on anything bad."""
    from cactus_core.engine.loading.prompts import builtin_prompts, builtin_tasks
    from cactus_core.experiments.quality.task_set import TUNE_FILE
    from cactus_core.experiments.sweeps.config import (
        SweepConfig,
        parse_grid,
        settings_from_grids,
    )

    names = [r.strip() for r in args.rules.split(",") if r.strip()]
    grids: dict[str, list[float]] = {}
    for name in names:
        param = rule_class(name).swept()
        grids[name] = list(param.grid) if param is not None else []
    for item in args.grid:
        rule, sep, values = item.partition("=")
        if not sep:
            raise ValueError(f"--grid takes RULE=V1,V2,..., got {item!r}")
        grids[rule.strip()] = parse_grid(rule.strip(), values)
    answers: list[str] = []
    if args.task_set and args.prompts:
        raise ValueError("--task-set is a prompt file of its own: give it or --prompts, not both")
    if args.task_set:
        args.prompts = str(TUNE_FILE)
    if args.prompts:
        prompts, tasks, answers = read_prompt_file(args.prompts, "--prompts")
    else:
        prompts, tasks = builtin_prompts(), builtin_tasks()
    if args.n_prompts is None:
        args.n_prompts = 20
    if args.n_prompts < 1:
        raise ValueError(f"--n-prompts must be >= 1, got {args.n_prompts}")
    check_seed_range(args.seed, min(len(prompts), args.n_prompts))
    if args.keep_quality and args.tune_kl is None:
        raise ValueError("--keep-quality needs --tune-kl (the emitted KL budget)")
    if args.keep_quality and not any(answers[: args.n_prompts]):
        raise ValueError("--keep-quality needs prompts with answers (--task-set or a .jsonl file)")
    if (args.max_drop is not None or args.confirm_on) and not args.keep_quality:
        raise ValueError("--max-drop and --confirm-on go with --keep-quality")
    if args.confirm_on:
        read_prompt_file(args.confirm_on, "--confirm-on")  # refused now, not after the sweep
    return SweepConfig(
        prompts=tuple(prompts[: args.n_prompts]),
        settings=tuple(settings_from_grids(grids)),
        sampling=sampling_from_args(args),
        max_new_tokens=args.max_new_tokens,
        chat_template=not args.no_chat_template,
        chunk_size=args.chunk_size,
        limit=not args.no_limit,
        tasks=tuple(tasks[: args.n_prompts]) if any(tasks[: args.n_prompts]) else (),
        tree=tree_from_args(args),
        answers=tuple(answers[: args.n_prompts]) if any(answers[: args.n_prompts]) else (),
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run `python -m cactus_core sweep`; write JSON or CSV to stdout or --output."""
    from cactus_core.experiments.sweeps.cache import SweepCache
    from cactus_core.experiments.sweeps.run import run_sweep

    if args.reference:
        return cmd_reference(args)
    config = sweep_config_from_args(args)
    for path, flag in ((args.output, "--output"), (args.html, "--html"), (args.export, "--export")):
        check_output_path(path, flag)
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    if args.backend == "local" and args.ray_address is not None:
        raise ValueError("--ray-address needs --backend ray")
    cache = SweepCache(args.cache_dir) if args.cache_dir else SweepCache()
    start = time.perf_counter()
    pair = backend = None
    if args.backend == "ray":
        from cactus_core.experiments.sweeps.ray_backend import RayBackend

        backend = RayBackend(
            pair_kwargs_from_args(args), workers=args.workers, address=args.ray_address
        )
    else:
        pair = args.load_pair(args)
    try:
        result = run_sweep(
            pair, config, cache, on_progress=text_progress(sys.stderr), backend=backend
        )
        devices = (
            sorted({d["device"] for d in backend.described})
            if backend is not None
            else [str(pair.device)]
        )
    finally:
        if backend is not None:
            backend.close()
    sys.stderr.write(
        f"{len(config.settings)} settings + verifier-only x {len(config.prompts)} prompts in "
        f"{time.perf_counter() - start:.1f} s ({result.computed_chunks} chunks computed, the rest "
        "from the cache)\n"
    )
    extra = _tune_outputs(args, pair, config, result, cache)
    if args.html:
        from cactus_core.app.frontier.figures import figure_html, report_figures

        with open(args.html, "w", encoding="utf-8") as f:
            f.write(figure_html(report_figures(result)))
    if args.export:
        from cactus_core.experiments.sweeps.file import export_sweep, provenance

        prov = provenance(
            "python -m cactus_core " + shlex.join(args.argv),
            ", ".join(devices),
            args.backend,
            args.workers if backend is not None else 1,
        )
        data = export_sweep(result, prov, gzipped=args.export.endswith(".gz"))
        with open(args.export, "wb") as f:
            f.write(data)
        sys.stderr.write(f"sweep file: {len(data) / 1e6:.2f} MB at {args.export}\n")
    if args.format == "csv":
        text = result.to_csv()
    else:
        body = json.loads(result.to_json())
        body.update(extra)
        text = json.dumps(body, indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
    return 0


def _tune_outputs(args: argparse.Namespace, pair: Any, config: Any, result: Any, cache: Any):
    """--tune-kl: the confirmed tuner on all prompts (with a pair in this process), and the
    answer read off the sweep per task; the JSON fields they add."""
    from cactus_core.experiments.tuning.tasks import answers_by_task, answers_table
    from cactus_core.experiments.tuning.tune import tune

    if args.tune_kl is None:
        return {}
    extra: dict[str, Any] = {}
    if pair is not None:
        tuned = tune(pair, config, args.tune_kl, args.tune_rule, result, cache)
        flags = f"{tuned.cli_flags()}  " if tuned.value is not None else ""
        sys.stderr.write(f"tuned ({tuned.status}): {flags}{tuned.message}\n")
        cli_flags = tuned.cli_flags() if tuned.value is not None else None
        extra["tuned"] = {**tuned.to_dict(), "cli_flags": cli_flags}
    answers = answers_by_task(result, args.tune_rule, args.tune_kl)
    sys.stderr.write(
        f"read off the sweep, emitted KL <= {args.tune_kl:g} ({args.tune_rule}):\n"
        + answers_table(answers)
        + "\n"
    )
    extra["tuned_by_task"] = [a.to_dict() for a in answers]
    if args.keep_quality:
        extra["quality_tuned"] = _quality_tune(args, pair, config, result, cache)
    return extra


def _quality_tune(args: argparse.Namespace, pair: Any, config: Any, result: Any, cache: Any):
    """--keep-quality: the quality-constrained answer on the sweep, confirmed on the held-out
    prompts (in this process only: the confirmation decodes)."""
    from cactus_core.experiments.quality.task_set import HELDOUT_FILE
    from cactus_core.experiments.quality.tune import DEFAULT_MAX_DROP, confirm, quality_answer

    answer = quality_answer(
        result, args.tune_kl, DEFAULT_MAX_DROP if args.max_drop is None else args.max_drop
    )
    heldout = args.confirm_on or (str(HELDOUT_FILE) if args.task_set else None)
    if heldout is None:
        sys.stderr.write("not confirmed: give --confirm-on FILE (held-out prompts)\n")
    elif pair is None:
        sys.stderr.write("not confirmed: the held-out run needs --backend local\n")
    else:
        answer = confirm(pair, answer, config, read_prompt_file(heldout, "--confirm-on"), cache,
                         on_progress=text_progress(sys.stderr))  # fmt: skip
    sys.stderr.write(f"keeping quality: {answer.message()}\n")
    return answer.to_dict()
