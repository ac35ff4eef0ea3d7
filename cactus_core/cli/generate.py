"""`python -m cactus_core generate`: decode one prompt (speculatively, or verifier-only) and
print the text and the stats (or one JSON object), optionally the trace."""

from __future__ import annotations

import argparse
import json
import sys

from cactus_core.cli.common import (
    add_rule_args,
    add_sampling_args,
    add_tree_args,
    check_output_path,
    rule_from_args,
    sampling_from_args,
    tree_from_args,
)
from cactus_core.cli.models import add_model_args


def add_generate(sub: argparse._SubParsersAction) -> None:
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
    pair = args.load_pair(args)
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
