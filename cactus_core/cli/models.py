"""The CLI's model flags, and the `load_pair` keywords they name: without --verifier, --draft
or --feature-draft, the embedded pair with the draft of --embedded-draft (EMBEDDED_DRAFTS; the
first by default, the pair the app opens on; with `sweep --reference`, the reference's pair)."""

from __future__ import annotations

import argparse
from typing import Any

from cactus_core.engine.loading.embedded_drafts import (
    EMBEDDED_DRAFTS,
    FASTEST_FEATURE,
    REFERENCE_EMBEDDED_DRAFT,
    embedded_draft,
    embedded_draft_named,
    embedded_draft_names,
)


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--verifier", help="local folder, .gguf file or hub id (default: embedded)")
    g.add_argument(
        "--draft",
        help="local folder, .gguf file or hub id (default: embedded; with --verifier, the "
        "embedded 3-layer draft)",
    )
    g.add_argument(
        "--feature-draft",
        metavar="FOLDER",
        default=None,
        help="draft with a feature-conditioned draft for the verifier instead, e.g. "
        "cactus_core/assets/feature_draft (the independent draft still serves transformers' "
        "assisted row)",
    )
    g.add_argument(
        "--embedded-draft",
        choices=embedded_draft_names(),
        default=None,
        help="without --verifier, --draft or --feature-draft: the embedded pair's draft (default "
        f"{EMBEDDED_DRAFTS[0].name} on this CPU; {FASTEST_FEATURE}: the feature draft in this "
        "CPU's faster dtype; " + "; ".join(f"{d.name}: {d.label}" for d in EMBEDDED_DRAFTS) + ")",
    )
    g.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    g.add_argument(
        "--dtype", default=None, help="float32, bfloat16, float16 (default per device and draft)"
    )
    g.add_argument(
        "--threads", type=int, default=None, help="CPU threads for torch (default: torch's)"
    )


def pair_kwargs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """`load_pair` keywords: without model flags, the default embedded pair (EMBEDDED_DRAFTS)."""
    kwargs = {
        "verifier": args.verifier,
        "draft": args.draft,
        "device": args.device,
        "dtype": args.dtype,
        "feature_draft": args.feature_draft,
    }
    if args.verifier is not None or args.draft is not None or args.feature_draft is not None:
        if args.embedded_draft is not None:
            raise ValueError(
                "--embedded-draft picks the embedded pair's draft; leave out --verifier, "
                "--draft and --feature-draft with it"
            )
        return kwargs
    if args.embedded_draft is not None:
        choice = embedded_draft_named(args.embedded_draft)
    elif getattr(args, "reference", False):
        # `sweep --reference` measures the pair the shipped reference names, on any CPU.
        choice = embedded_draft(REFERENCE_EMBEDDED_DRAFT)
    else:
        choice = EMBEDDED_DRAFTS[0]
    picked = choice.load_kwargs(args.device)
    return {**kwargs, **picked, "dtype": args.dtype or picked["dtype"]}
