"""Command line: `python -m cactus_core <command>`.

    generate   decode one prompt (speculatively, or verifier-only) and print text and stats
    bench      the decoder benchmark of docs/benchmarks.md
    sweep      rules x parameter grids on a prompt set, cached; the frontier and the tuner
    rules      the acceptance rules, their parameters and citations (docs/rules.md's table)

One `_add_<command>` function per subcommand builds its parser and sets its handler, so a new
subcommand is one more function and one line in `build_parser`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
from typing import Any

from cactus_core.cli_models import add_model_args, pair_kwargs_from_args
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


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- shared arguments ---------------------------------------------------------------------------


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
        g.add_argument(_flag(name), type=kind, default=default, help=f"{text} (default {default})")
    g.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    g.add_argument("--no-chat-template", action="store_true", help="encode the prompt as raw text")


def sampling_from_args(args: argparse.Namespace, **override: Any) -> SamplingSettings:
    """SamplingSettings from the parsed flags (ValueError, naming the field, if out of range)."""
    values = {name: getattr(args, name) for name, *_ in SamplingSettings.field_specs()}
    return SamplingSettings(**{**values, **override})


def _rule_params() -> dict[str, tuple[bool, list[str]]]:
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
    for name, (integer, rules) in _rule_params().items():
        g.add_argument(
            _flag(name),
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
    for name in _rule_params():
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in allowed:
            takes = ", ".join(_flag(n) for n in allowed) or "no parameters"
            raise ValueError(f"rule {args.rule!r} does not take {_flag(name)}; it takes {takes}")
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


def load_pair_from_args(args: argparse.Namespace):  # -> ModelPair
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


# -- generate -----------------------------------------------------------------------------------


def _add_generate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="decode one prompt and print text and stats")
    p.add_argument("prompt", help="the user message")
    add_rule_args(p)
    add_sampling_args(p)
    add_model_args(p)
    p.add_argument("--autoregressive", action="store_true", help="verifier-only sampling")
    add_tree_args(p, "draft a tree each round instead of a chain (one pass verifies it)")
    p.add_argument("--trace", metavar="PATH", help="write the trace as JSON ('-' for stdout)")
    p.add_argument("--json", action="store_true", help="print one JSON object (text, ids, stats)")
    p.add_argument("--quiet", action="store_true", help="no streaming of tokens to stderr")
    p.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder

    rule = rule_from_args(args)
    sampling = sampling_from_args(args)
    tree = tree_from_args(args)
    check_output_path(args.trace, "--trace")
    pair = load_pair_from_args(args)
    trace = args.trace is not None
    dec = SpeculativeDecoder(pair, rule, sampling=sampling, record_trace=trace, tree=tree)

    def stream(rnd, _row) -> None:
        # Progress: the text as it is decided, on stderr so stdout stays clean for --json.
        sys.stderr.write("".join(rnd.emitted_text))
        sys.stderr.flush()

    run = dec.generate_autoregressive if args.autoregressive else dec.generate
    out = run(
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        seed=sampling.seed,
        chat_template=not args.no_chat_template,
        on_round=None if args.quiet else stream,
    )
    if not args.quiet:
        sys.stderr.write("\n")
    stats = out.stats.to_dict()
    if args.json:
        print(json.dumps({"text": out.text, "token_ids": out.token_ids, "stats": stats}))
    else:
        print(out.text)
        print()
        shape = f"tree of {tree.nodes} nodes, depth {tree.depth}" if tree else f"k={args.k}"
        mode = "verifier-only" if args.autoregressive else f"{rule.label}, {shape}"
        acc = stats["acceptance_rate"]
        print(
            f"{mode} | {stats['new_tokens']} tokens in {stats['wall_s']:.2f} s "
            f"({stats['tokens_per_s']:.2f} tokens/s) | tokens per call "
            f"{stats['tokens_per_call']:.2f} | acceptance {'–' if acc is None else f'{acc:.3f}'} "
            f"| mean emitted KL {stats['mean_emitted_kl']:.4f} nats | "
            f"stop: {stats['stop_reason']}"
        )
    if args.trace is not None:
        text = out.trace.to_json(None if args.trace == "-" else args.trace)
        if args.trace == "-":
            print(text)
    return 0


# -- bench --------------------------------------------------------------------------------------


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="tokens/s, tokens per call, acceptance and KL per rule")
    add_model_args(p)
    p.add_argument("--prompts", type=int, default=None, help="use the first N built-in prompts")
    add_sampling_args(p, top_p_tables=True)
    p.add_argument(
        "--c",
        type=float,
        default=0.05,
        help="draft/verifier step cost for the modelled speedup (default 0.05)",
    )
    p.add_argument("--rows", nargs="+", default=None, help="only the rows with these labels")
    p.add_argument("--no-hf", action="store_true", help="leave out transformers' assisted row")
    p.add_argument(
        "--trace-row",
        action="store_true",
        help="add cactus δ=1 with full trace recording (measures its cost)",
    )
    p.add_argument("--out", metavar="PATH", help="also write the results as JSON")
    add_tree_args(p, "add tree rows: each speculative row again with a draft tree")
    p.set_defaults(handler=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from cactus_core.engine.loading.prompts import builtin_prompts
    from cactus_core.experiments.bench import default_rows, report_text, run_bench

    prompts = builtin_prompts()
    if args.prompts is not None:
        if not 1 <= args.prompts <= len(prompts):
            raise ValueError(f"--prompts must be in [1, {len(prompts)}], got {args.prompts}")
        prompts = prompts[: args.prompts]
    tree = tree_from_args(args)
    rows = default_rows(with_hf=not args.no_hf, with_trace_row=args.trace_row, tree=tree)
    if args.rows:
        unknown = sorted(set(args.rows) - {r.label for r in rows})
        if unknown:
            raise ValueError(
                f"unknown rows {unknown}; rows are: {', '.join(r.label for r in rows)}"
            )
        rows = [r for r in rows if r.label in args.rows]
    _check_bench_args(args, len(prompts))
    pair = load_pair_from_args(args)
    command = "python -m cactus_core " + shlex.join(args.argv)
    report: dict[str, Any] = {
        "command": command,
        "pair": pair.identity,
        "device": str(pair.device),
        "threads": _threads(),
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "sampling": sampling_from_args(args, top_p=1.0).to_dict() | {"top_p": args.top_p},
        "c": args.c,
        "tree": tree.to_dict() if tree else None,
        "tables": {},
    }
    for top_p in args.top_p:
        summaries = run_bench(
            pair,
            prompts,
            sampling_from_args(args, top_p=top_p),
            max_new_tokens=args.max_new_tokens,
            chat_template=not args.no_chat_template,
            rows=rows,
            c=args.c,
            progress=_progress,
        )
        report["tables"][str(top_p)] = summaries
        print(f"\n### top-p {top_p:g}\n")
        print(report_text(summaries, args.c), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


def _check_bench_args(args: argparse.Namespace, prompts: int) -> None:
    """Everything the bench needs, checked before the models load and the work starts."""
    if not math.isfinite(args.c) or args.c < 0:
        raise ValueError(f"--c (a draft step's cost in verifier steps) must be >= 0, got {args.c}")
    for top_p in args.top_p:
        SamplingSettings(temperature=args.temperature, top_p=top_p, k=args.k, seed=args.seed)
    check_seed_range(args.seed, prompts)
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    check_output_path(args.out, "--out")


def _threads() -> int:
    import torch

    return torch.get_num_threads()


# -- rules --------------------------------------------------------------------------------------


def _add_rules(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rules", help="the acceptance rules with their parameters (Markdown)")
    p.set_defaults(handler=cmd_rules)


def cmd_rules(args: argparse.Namespace) -> int:
    from cactus_core.maths.rules.table import rules_in_words, rules_markdown

    sys.stdout.write(rules_markdown(RULES) + "\n" + rules_in_words(RULES))
    return 0


# -- entry point --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cactus_core",
        description="Speculative sampling with constrained acceptance (Cactus Lab).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_generate(sub)
    _add_bench(sub)
    from cactus_core.cli_sweep import add_sweep

    add_sweep(sub)
    _add_rules(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        return args.handler(args)
    except (ValueError, OSError) as exc:
        # One line, no traceback: every check of the arguments and of the inputs raises
        # ValueError (ModelLoadError is one), and a write that fails despite the early path
        # checks is an OSError.
        message = " ".join(str(exc).split())
        parser.exit(2, f"error: {message}\n")
    return 0
