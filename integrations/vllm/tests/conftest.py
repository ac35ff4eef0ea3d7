"""Shared set-up for the plugin's tests: vLLM's plugins loaded through their entry point (as
vLLM loads them) and vLLM's CPU kernels registered."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def vllm_sampler():
    """vllm.v1.sample.rejection_sampler after the plugin patched it, with vLLM's own CPU
    kernels (the C++ fallbacks vLLM registers in a CPU worker) in place."""
    from vllm.platforms import current_platform
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    current_platform.register_triton_kernel_overrides()
    from vllm.v1.sample import rejection_sampler

    return rejection_sampler
