"""Cactus Lab core: acceptance rules, exact emitted distributions and a speculative decoder.

Notation follows the paper (Hao & Mou, ICLR 2026): p is the draft's distribution, q the
verifier's, h the distribution a rule verifies against, pi the emitted distribution.
Hugging Face and vLLM use the opposite letters for draft and target.

Layers, each importing only those before it: `maths` (rules, verify, emitted, limit, sampling)
<- `engine` (models, caches, decoder, trace) <- `experiments` (sweeps, benchmarks) <- `app`
(the app's logic and figures, no Streamlit); `cli` on top. See docs/architecture.md.

Names are resolved lazily so that `import cactus_core` stays cheap: the maths needs torch
only, while the model loaders pull in transformers. No submodule of this package shares a name
with an export, so an export is the documented object whatever was imported before it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "make_rule": "cactus_core.maths.rules",
    "RULE_NAMES": "cactus_core.maths.rules",
    "RULES": "cactus_core.maths.rules",
    "Rule": "cactus_core.maths.rules",
    "Param": "cactus_core.maths.rules",
    "SamplingSettings": "cactus_core.maths.sampling",
    "verify": "cactus_core.maths.verify",
    "VerifyResult": "cactus_core.maths.verify",
    "emitted_distribution": "cactus_core.maths.emitted",
    "logits_to_probs": "cactus_core.maths.sampling",
    "load_pair": "cactus_core.engine.loading.models",
    "ModelPair": "cactus_core.engine.loading.pair",
    "SpeculativeDecoder": "cactus_core.engine.decoding.decoder",
    "GenerationOutput": "cactus_core.engine.decoding.decoder",
    "Trace": "cactus_core.engine.decoding.trace",
    "reverify": "cactus_core.engine.decoding.replay",
    "estimate_frontier": "cactus_core.experiments.estimates.curves",
    "EstimatedFrontier": "cactus_core.experiments.estimates.curves",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cactus_core' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
