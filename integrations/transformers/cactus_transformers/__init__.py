"""Cactus Lab's decoder in transformers' `model.generate(..., custom_generate=...)`: the callable
`cactus_generate` and the Hub-style folder's `generate` (see `custom_generate`)."""

from cactus_transformers.custom_generate import cactus_generate, generate

__all__ = ["cactus_generate", "generate"]
