"""Cactus Lab core: acceptance rules, exact emitted distributions and a speculative decoder.

Notation follows the paper (Hao & Mou, ICLR 2026): p is the draft's distribution, q the
verifier's, h the distribution a rule verifies against, pi the emitted distribution.
Hugging Face and vLLM use the opposite letters for draft and target.

Names are resolved lazily so that `import cactus_core` stays cheap: the maths needs torch
only, while the model loaders pull in transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "make_rule": "cactus_core.maths.rules",
    "RULE_NAMES": "cactus_core.maths.rules",
    "verify": "cactus_core.maths.verify",
    "VerifyResult": "cactus_core.maths.verify",
    "emitted_distribution": "cactus_core.maths.emitted",
    "logits_to_probs": "cactus_core.maths.sampling",
    "load_pair": "cactus_core.engine.models",
    "ModelPair": "cactus_core.engine.models",
    "SpeculativeDecoder": "cactus_core.engine.decoder",
    "GenerationOutput": "cactus_core.engine.decoder",
    "Trace": "cactus_core.engine.trace",
    "reverify": "cactus_core.engine.trace",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cactus_core' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
