"""Cactus Lab's speculative sampling as a transformers custom_generate folder.

    model.generate(input_ids, assistant_model=draft, trust_remote_code=True,
                   custom_generate="integrations/transformers/cactus_generate",
                   cactus_rule={"rule": "cactus", "delta": 0.1}, num_assistant_tokens=4,
                   do_sample=True, temperature=0.7, max_new_tokens=64)

The code is the package `cactus_transformers` (integrations/transformers/cactus_transformers),
which imports the lab's `cactus_core`: both must be importable (from the repository's root,
PYTHONPATH=integrations/transformers). See integrations/transformers/README.md.
"""

from cactus_transformers import generate

__all__ = ["generate"]
