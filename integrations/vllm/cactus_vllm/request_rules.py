"""Getting each request's rule to where vLLM samples, and checking it where vLLM takes it in.

- V1 model runner: vLLM tracks per-request state by batch row for its logits processors
  (`BatchUpdate`: requests added, removed, moved). With speculative decoding on, vLLM builds
  none but its min-tokens one; `build_logitsprocs` is wrapped to add a `RuleTracker`, an
  identity logits processor that only keeps {batch row: rule}. The rejection sampler receives
  the processors in `sampling_metadata.logitsprocs`, so the rule of every row is at hand there.
- Model Runner V2: its `Sampler.add_request(slot, sampling_params)` is wrapped to keep
  {request slot: rule}; the V2 rejection sampler indexes requests by slot.
- The front end: `SamplingParams` checks its `extra_args` when it is built; that check is
  wrapped to refuse a bad `cactus_rule` there (HTTP 400 from `vllm serve`), naming the
  allowed values, instead of in the engine. The engine's input processor checks each request
  again with the engine's config at hand. Both refuse a rule that could not run as asked
  (`guard`: a patch it needs is not in place, or the deployment does not verify token by
  token) rather than let it run as vLLM's lossless sampler.
- The deployment: `speculative_config={..., "cactus_rule": {...}}` is taken out before vLLM
  checks the speculative config (which forbids unknown keys) and put into CACTUS_VLLM_RULE,
  which the engine's processes inherit; when the engine's config is made, the deployment's
  rule is parsed and checked (`guard`), so a bad or unavailable one fails at start-up.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from cactus_vllm import guard
from cactus_vllm.rules import (
    ENV_VAR,
    EXTRA_ARGS_KEY,
    PlannedRule,
    RuleSpecError,
    canonical_spec,
    deployment_rule,
    parse_spec,
    request_rule,
)

logger = logging.getLogger("cactus_vllm")

# Model Runner V2: request slot -> the request's own rule (None: the deployment's).
SLOT_RULES: dict[int, PlannedRule | None] = {}


def own_rule(sampling_params: Any) -> PlannedRule | None:
    """A request's own rule; a bad one (which the front end refuses) is logged and dropped."""
    try:
        return request_rule(getattr(sampling_params, "extra_args", None))
    except RuleSpecError as e:
        logger.error("cactus_vllm: %s; the request runs vLLM's own sampler", e)
        return None


def rule_tracker_class() -> type:
    """The V1 logits processor that tracks rules by batch row (built on first use so that this
    module imports without vLLM)."""
    from vllm.v1.sample.logits_processor.builtin import process_dict_updates
    from vllm.v1.sample.logits_processor.interface import LogitsProcessor

    class RuleTracker(LogitsProcessor):
        """Keeps {batch row: rule}; leaves the logits as they are."""

        def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
            self.rules: dict[int, PlannedRule] = {}

        def is_argmax_invariant(self) -> bool:
            return True

        def apply(self, logits: Any) -> Any:
            return logits

        def update_state(self, batch_update: Any) -> None:
            process_dict_updates(self.rules, batch_update, lambda params, _, __: own_rule(params))

    return RuleTracker


_TRACKER: type | None = None


def tracker_class() -> type:
    global _TRACKER
    if _TRACKER is None:
        _TRACKER = rule_tracker_class()
    return _TRACKER


def rules_for_batch(sampling_metadata: Any, batch_size: int) -> list[PlannedRule | None]:
    """The rule of each request row of a V1 batch: its own, else the deployment's (None:
    vLLM's own sampler)."""
    default = deployment_rule()
    tracker = next(
        (p for p in sampling_metadata.logitsprocs.all if isinstance(p, tracker_class())), None
    )
    own = tracker.rules if tracker is not None else {}
    return [own.get(i, default) for i in range(batch_size)]


def rules_for_slots(slots: list[int]) -> list[PlannedRule | None]:
    """Model Runner V2: the rule of each request slot."""
    default = deployment_rule()
    return [r if (r := SLOT_RULES.get(s)) is not None else default for s in slots]


# -- wrappers (plugin.py applies them after checking the wrapped signatures) ------------------


def wrap_build_logitsprocs(stock: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(stock)
    def build_logitsprocs(
        vllm_config, device, is_pin_memory, is_pooling_model, custom_logitsprocs=()
    ):
        procs = stock(vllm_config, device, is_pin_memory, is_pooling_model, custom_logitsprocs)
        if vllm_config.speculative_config is not None and not is_pooling_model:
            procs.argmax_invariant.append(tracker_class()(vllm_config, device, is_pin_memory))
        return procs

    return build_logitsprocs


def wrap_add_request(stock: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(stock)
    def add_request(self, req_idx: int, sampling_params: Any) -> None:
        SLOT_RULES[req_idx] = own_rule(sampling_params)
        return stock(self, req_idx, sampling_params)

    return add_request


REQUEST_SOURCE = f'SamplingParams.extra_args["{EXTRA_ARGS_KEY}"]'
DEPLOYMENT_SOURCE = f'the deployment\'s rule ({ENV_VAR} or speculative_config["{EXTRA_ARGS_KEY}"])'


def wrap_verify_extra_args(stock: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(stock)
    def _verify_extra_args(self) -> None:
        stock(self)
        if self.extra_args:  # request_rule also refuses keys that only look like the plugin's
            from vllm.exceptions import VLLMValidationError

            try:
                planned = request_rule(self.extra_args)
                guard.refuse_unavailable(planned, REQUEST_SOURCE, per_request=True)
            except RuleSpecError as e:
                raise VLLMValidationError(str(e), parameter="extra_args") from None

    return _verify_extra_args


def wrap_validate_params(stock: Callable[..., Any]) -> Callable[..., Any]:
    """InputProcessor._validate_params: each request against the engine's own config."""

    @functools.wraps(stock)
    def _validate_params(self, params, supported_tasks):
        result = stock(self, params, supported_tasks)
        from vllm.exceptions import VLLMValidationError
        from vllm.sampling_params import SamplingParams

        if isinstance(params, SamplingParams):
            try:
                own = request_rule(params.extra_args)
                if own is not None:
                    planned, source = own, REQUEST_SOURCE
                else:
                    planned, source = deployment_rule(), DEPLOYMENT_SOURCE
                guard.refuse_on_deployment(
                    planned, source, self.vllm_config, per_request=own is not None
                )
            except RuleSpecError as e:
                raise VLLMValidationError(str(e), parameter="extra_args") from None
        return result

    return _validate_params


def wrap_create_engine_config(stock: Callable[..., Any]) -> Callable[..., Any]:
    """EngineArgs.create_engine_config: the deployment's rule, checked at start-up."""

    @functools.wraps(stock)
    def create_engine_config(self, usage_context=None, headless=False):
        config = stock(self, usage_context, headless)
        guard.set_runner(guard.runner_of(config))
        planned = deployment_rule()  # a bad CACTUS_VLLM_RULE fails here
        guard.refuse_on_deployment(planned, DEPLOYMENT_SOURCE, config, per_request=False)
        return config

    return create_engine_config


def wrap_create_speculative_config(stock: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(stock)
    def create_speculative_config(self, target_model_config, target_parallel_config):
        spec = self.speculative_config
        if isinstance(spec, dict):
            key = next((k for k in (EXTRA_ARGS_KEY, "cactus-rule") if k in spec), None)
            if key is not None:
                self.speculative_config = {k: v for k, v in spec.items() if k != key}
                where = f'speculative_config["{key}"]'
                text = canonical_spec(spec[key], where)
                parse_spec(text, where)  # refuse a bad one here
                previous = os.environ.get(ENV_VAR)
                if previous and previous != text:
                    logger.info("cactus_vllm: speculative_config's rule replaces %s", ENV_VAR)
                os.environ[ENV_VAR] = text  # the engine's processes inherit it
        return stock(self, target_model_config, target_parallel_config)

    return create_speculative_config
