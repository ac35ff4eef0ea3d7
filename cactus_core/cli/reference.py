"""`python -m cactus_core sweep --reference`: rebuild the shipped reference sweep
(experiments.sweeps.reference), with the checks that keep it the reference: the flags it fixes
itself
are refused rather than ignored, and the shipped file is overwritten only when asked."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from cactus_core.cli.common import check_output_path, flag, text_progress, torch_threads
from cactus_core.maths.sampling import SamplingSettings


def cmd_reference(args: argparse.Namespace) -> int:
    """`sweep --reference`: rebuild the shipped reference sweep (experiments.sweeps.reference)."""
    from cactus_core.engine.loading.prompts import builtin_prompts
    from cactus_core.experiments.sweeps import reference as ref
    from cactus_core.experiments.sweeps.cache import SweepCache

    check_reference_args(args)
    check_output_path(args.output, "--output")
    if args.n_prompts is not None and args.n_prompts < 1:
        raise ValueError(f"--n-prompts must be >= 1, got {args.n_prompts}")
    prompts = tuple(builtin_prompts()[: args.n_prompts])
    pair = args.load_pair(args)
    cache = SweepCache(args.cache_dir) if args.cache_dir else SweepCache()
    # The command as run, model flags included, so the file says which pair it measured.
    flags = [a for a in args.argv[1:] if a not in ("--reference", "--force", "--missing-only")]
    if args.threads is None:
        flags += ["--threads", str(torch_threads())]
    command = shlex.join([*ref.REFERENCE_COMMAND.split(), *flags])
    embedded = args.verifier is None and args.draft is None and args.feature_draft is None
    start = time.perf_counter()
    if args.missing_only:
        data = ref.read_reference_data()
        data = ref.augment_reference(pair, data, command, cache, text_progress(sys.stderr))
        prompts = tuple(builtin_prompts()[: int(data["provenance"]["prompts"])])
    else:
        data = ref.build_reference(
            pair, prompts, command, cache, text_progress(sys.stderr), embedded=embedded
        )
    path = ref.write_reference(data, args.output)
    sys.stderr.write(
        f"reference: {len(prompts)} prompts in {time.perf_counter() - start:.1f} s, "
        f"{path.stat().st_size / 1e6:.2f} MB at {path}\n"
    )
    return 0


# What `sweep --reference` fixes itself (its rules, sampling, prompts, drafting, scoring, and
# where it runs: this process, one chain per round); a flag that would change them is refused
# rather than silently ignored (and recorded in the file's command as if it had applied).
_REFERENCE_FIXED = (
    "rules",
    "grid",
    "prompts",
    *(name for name, *_ in SamplingSettings.field_specs()),
    "max_new_tokens",
    "no_chat_template",
    "chunk_size",
    "no_limit",
    "format",
    "tune_kl",
    "tune_rule",
    "keep_quality",
    "max_drop",
    "confirm_on",
    "html",
    "export",
    "backend",
    "ray_address",
    "workers",
)


def check_reference_args(args: argparse.Namespace) -> None:
    """`sweep --reference` takes only the model, prompt-count, cache and output flags, and
    writes over the shipped file only when told to (--force), whatever path names it."""
    defaults = args.sweep_parser.parse_args([])  # the sweep command's own defaults
    fixed = [*_REFERENCE_FIXED, *(n for n in vars(defaults) if n.startswith("tree"))]
    given = [flag(n) for n in fixed if getattr(args, n) != getattr(defaults, n)]
    if given:
        raise ValueError(
            f"--reference fixes the rules, sampling, prompts, drafting and scoring and runs "
            f"in this process; leave out {', '.join(given)} (only --n-prompts, the model flags, "
            "--cache-dir and --output apply)"
        )
    if args.missing_only and args.n_prompts is not None:
        raise ValueError(
            "--missing-only keeps the prompts of the file it adds to; leave out --n-prompts"
        )
    if not args.force and (args.output is None or _is_shipped(args.output)):
        raise ValueError(
            "--reference would overwrite the shipped reference file; give --output PATH to "
            "write elsewhere, or --force to replace it"
        )


def _is_shipped(path: str) -> bool:
    from cactus_core.experiments.sweeps.reference import REFERENCE_FILE

    return os.path.realpath(os.path.expanduser(path)) == os.path.realpath(REFERENCE_FILE)
