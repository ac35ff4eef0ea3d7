"""`python -m cactus_core bench`: the decoder benchmark of docs/benchmarks.md (tokens/s, tokens
per call, acceptance and emitted KL per rule, one table per top-p)."""

from __future__ import annotations

import argparse
import json
import math
import shlex
from typing import Any

from cactus_core.cli.common import (
    add_sampling_args,
    add_tree_args,
    check_output_path,
    check_seed_range,
    progress,
    read_prompt_file,
    sampling_from_args,
    torch_threads,
    tree_from_args,
)
from cactus_core.cli.models import add_model_args
from cactus_core.maths.sampling import SamplingSettings


def add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="tokens/s, tokens per call, acceptance and KL per rule")
    add_model_args(p)
    p.add_argument(
        "--prompt-file",
        default=None,
        metavar="FILE",
        help="a .jsonl or .txt prompt file instead of the built-in prompts",
    )
    p.add_argument("--prompts", type=int, default=None, help="use the first N prompts")
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
    if args.prompt_file is not None:
        prompts, _, _ = read_prompt_file(args.prompt_file, "--prompt-file")
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
    check_bench_args(args, len(prompts))
    pair = args.load_pair(args)
    command = "python -m cactus_core " + shlex.join(args.argv)
    report: dict[str, Any] = {
        "command": command,
        "pair": pair.identity,
        "device": str(pair.device),
        "threads": torch_threads(),
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
            progress=progress,
        )
        report["tables"][str(top_p)] = summaries
        print(f"\n### top-p {top_p:g}\n")
        print(report_text(summaries, args.c), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


def check_bench_args(args: argparse.Namespace, prompts: int) -> None:
    """Everything the bench needs, checked before the models load and the work starts."""
    if not math.isfinite(args.c) or args.c < 0:
        raise ValueError(f"--c (a draft step's cost in verifier steps) must be >= 0, got {args.c}")
    for top_p in args.top_p:
        SamplingSettings(temperature=args.temperature, top_p=top_p, k=args.k, seed=args.seed)
    check_seed_range(args.seed, prompts)
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    check_output_path(args.out, "--out")
