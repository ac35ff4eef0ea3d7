"""Command line: `python -m cactus_core <command>`.

    generate   decode one prompt (speculatively, or verifier-only) and print text and stats
    bench      the decoder benchmark of docs/benchmarks.md
    sweep      rules x parameter grids on a prompt set, cached; the frontier and the tuner
               (`sweep --reference` rebuilds the shipped reference sweep: `reference`)
    rules      the acceptance rules, their parameters and citations (docs/rules.md's table)

One module per command, each with an `add_<command>` function that builds its parser and sets
its handler; what they share (the sampling, rule, tree and model flags, loading the pair, the
checks and the progress lines) is at the bottom, in `common` and `models`. A new command is one
more module and one line in `build_parser`.
"""

from __future__ import annotations

import argparse
import sys

from cactus_core.cli.bench import add_bench
from cactus_core.cli.common import add_tree_args, load_pair_from_args, tree_from_args
from cactus_core.cli.generate import add_generate
from cactus_core.cli.rules import add_rules
from cactus_core.cli.sweep import add_sweep

__all__ = ["add_tree_args", "build_parser", "load_pair_from_args", "main", "tree_from_args"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cactus_core",
        description="Speculative sampling with constrained acceptance (Cactus Lab).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_generate(sub)
    add_bench(sub)
    add_sweep(sub)
    add_rules(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv
    # The commands load their pair through this, read here at call time, so that a caller (a
    # test) can stand in another loader for `cactus_core.cli.load_pair_from_args`.
    args.load_pair = load_pair_from_args
    try:
        return int(args.handler(args))
    except (ValueError, OSError) as exc:
        # One line, no traceback: every check of the arguments and of the inputs raises
        # ValueError (ModelLoadError is one), and a write that fails despite the early path
        # checks is an OSError.
        message = " ".join(str(exc).split())
        parser.exit(2, f"error: {message}\n")
    return 0
