"""Fail closed: a rule other than vLLM's own runs as asked, or is refused where it enters with
an error that names what is missing. It never quietly turns into vLLM's lossless sampler.

A rule runs only through this plugin's patches (`plugin.status()`), and which ones depends on
the model runner vLLM picked (`VllmConfig.use_v2_model_runner`):

- the runner's sampler patch ("rules (V1 sampler)" or "rules (Model Runner V2 sampler)"),
  without which vLLM's own `rejection_sample` decides every request;
- for a request's own rule, also the runner's per-request patch, without which the sampler
  never learns the request's rule;
- on V1, the CPU expand fix where this vLLM needs it, without which the sampler runs on
  garbage temperatures (vllm issue 55005).

A deployment also has to verify token by token: speculative decoding on, with vLLM's
"standard" rejection sampling and no watermarking (its synthetic and block modes and
watermarked steps replace every rule by design).

Where the checks run, all in the front end, before any token is sampled:

- `SamplingParams` (`request_rules.wrap_verify_extra_args`): a request's own rule, as soon as
  it is built. The runner is known there once an engine was configured in the process;
  before, the request is let through only if some runner can run it and the engine's own
  check (next) is in place, else only if every runner can;
- the engine's input processor (`request_rules.wrap_validate_params`): every request, with
  the engine's config at hand: its own rule, or the deployment's when it names none;
- start-up (`request_rules.wrap_create_engine_config`): the deployment's rule
  (CACTUS_VLLM_RULE, or the speculative config's "cactus_rule"), when the engine's config
  is made.
"""

from __future__ import annotations

from typing import Any

from cactus_vllm import patch_status
from cactus_vllm.rules import STOCK, PlannedRule, RuleSpecError

V1, MRV2 = "V1 model runner", "Model Runner V2"
RUNNERS = (V1, MRV2)
SAMPLER = {V1: "rules (V1 sampler)", MRV2: "rules (Model Runner V2 sampler)"}
PER_REQUEST = {V1: "per-request rules (V1)", MRV2: "per-request rules (Model Runner V2)"}
CPU_FIX = "CPU expand fix"
ENGINE_CHECK = "request check (engine)"
NOT_REGISTERED = "not applied: the plugin did not register in this process"

# The runner of the last engine configured in this process (None: none yet).
_runner: str | None = None


class RuleUnavailable(RuleSpecError):
    """A rule that cannot run as asked on this vLLM or this deployment."""


def runner_of(vllm_config: Any) -> str:
    return MRV2 if vllm_config.use_v2_model_runner else V1


def known_runner() -> str | None:
    return _runner


def set_runner(runner: str | None) -> None:
    global _runner
    _runner = runner


def missing(runner: str, per_request: bool) -> list[tuple[str, str]]:
    """The patches a rule needs on `runner` that are not in place: (name, outcome) pairs."""
    names = [SAMPLER[runner]]
    if per_request:
        names.append(PER_REQUEST[runner])
    if runner == V1:
        names.append(CPU_FIX)
    status = patch_status.status()
    return [(n, status.get(n, NOT_REGISTERED)) for n in names if not _ready(status.get(n))]


def _ready(outcome: str | None) -> bool:
    return outcome is not None and (outcome == "patched" or outcome.startswith("not needed"))


def refuse_unavailable(
    planned: PlannedRule | None, source: str, *, per_request: bool, runner: str | None = None
) -> None:
    """RuleUnavailable when `planned` (from `source`) needs a patch that is not in place on
    `runner` (default: the known one; unknown: see the module docstring)."""
    if planned is None or planned.path == STOCK:
        return
    runner = runner if runner is not None else known_runner()
    if runner is not None:
        gaps = missing(runner, per_request)
    else:
        by_runner = {r: missing(r, per_request) for r in RUNNERS}
        if _ready(patch_status.status().get(ENGINE_CHECK)) and any(
            not g for g in by_runner.values()
        ):
            return  # the engine's check, which knows the runner, sees the request again
        gaps = list(dict.fromkeys(g for r in RUNNERS for g in by_runner[r]))
    if gaps:
        raise RuleUnavailable(_patch_message(planned, source, runner, gaps))


def refuse_on_deployment(
    planned: PlannedRule | None, source: str, vllm_config: Any, *, per_request: bool
) -> None:
    """RuleUnavailable when `planned` cannot run on this engine: the deployment verifies
    otherwise than token by token, or a patch its runner needs is not in place."""
    if planned is None or planned.path == STOCK:
        return
    asked = f"{source} asks for {planned.label}"
    spec = vllm_config.speculative_config
    if spec is None:
        raise RuleUnavailable(
            f"{asked}, a rule of speculative decoding, but this engine runs without it: "
            "start it with --speculative-config (a draft model or ngram)"
        )
    method = getattr(spec, "rejection_sample_method", "standard")
    if method != "standard":
        raise RuleUnavailable(
            f"{asked}, but this engine verifies with rejection_sample_method={method!r}, "
            "which replaces every rule; the plugin's rules need vLLM's 'standard' one"
        )
    if getattr(vllm_config, "watermark_config", None) is not None:
        raise RuleUnavailable(
            f"{asked}, but this engine watermarks its output, and watermarked steps run "
            "vLLM's own sampler"
        )
    refuse_unavailable(planned, source, per_request=per_request, runner=runner_of(vllm_config))


def _patch_message(
    planned: PlannedRule, source: str, runner: str | None, gaps: list[tuple[str, str]]
) -> str:
    import vllm

    where = f"vLLM {vllm.__version__}" + (f" ({runner})" if runner else "")
    what = "; ".join(f"{name!r} ({outcome})" for name, outcome in gaps)
    return (
        f"{source} asks for {planned.label}, which needs cactus-vllm's patches, and on this "
        f"{where} these are not active: {what}. Without them vLLM would run its own lossless "
        'sampler instead. Ask for {"rule": "sps"} to run that, or use a vLLM this plugin was '
        f"checked against ({', '.join(patch_status.CHECKED_VERSIONS)}); "
        "cactus_vllm.plugin.status() lists every patch"
    )
