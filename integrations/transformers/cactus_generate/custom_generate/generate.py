"""Cactus Lab's speculative sampling as a transformers custom_generate folder.

    model.generate(input_ids, assistant_model=draft, trust_remote_code=True,
                   custom_generate="integrations/transformers/cactus_generate",
                   cactus_rule={"rule": "cactus", "delta": 0.1}, num_assistant_tokens=4,
                   do_sample=True, temperature=0.7, max_new_tokens=64)

The code lives in cactus_core (cactus_core/engine/hf), which must be importable: run from the
repository's root or put it on PYTHONPATH. See integrations/transformers/README.md.
"""

from cactus_core.engine.hf import generate

__all__ = ["generate"]
