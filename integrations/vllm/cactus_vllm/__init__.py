"""Cactus Lab's acceptance rules inside vLLM's speculative decoding.

A vLLM plugin (entry point group `vllm.general_plugins`, `plugin.register`): choose a rule
with CACTUS_VLLM_RULE='{"rule": "cactus", "delta": 0.1}', per request with
SamplingParams(extra_args={"cactus_rule": {...}}), or in the speculative config; read what it
did with `metrics.snapshot()` or CACTUS_VLLM_METRICS_FILE. See README.md beside this package.
The rules themselves are the lab's `cactus_core.maths` (torch only).
"""

__version__ = "0.1.0"
