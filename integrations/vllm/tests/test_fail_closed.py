"""A rule other than vLLM's own runs as asked or is refused where it enters, naming what is
missing: with a sampler patch forced off (a signature vLLM no longer has), on the runner the
engine uses, at start-up, and on deployments that do not verify token by token."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types

import pytest
from cactus_vllm import guard, patch_status, request_rules
from cactus_vllm.rules import ENV_VAR, RuleSpecError

CACTUS = {"rule": "cactus", "delta": 0.1}
SKIPPED = "skipped: signature changed to ('draft_token_ids', 'new_argument')"


@pytest.fixture
def patched(vllm_sampler, monkeypatch):
    """The plugin registered, no deployment rule, no engine configured in this process."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(guard, "_runner", None)


def force_off(monkeypatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(patch_status._STATUS, name, SKIPPED)


def test_a_rule_with_its_sampler_patch_forced_off_is_refused():
    """The real patch list, in a fresh process, with both rejection samplers' expected
    signatures changed: vLLM keeps its own functions, and SamplingParams refuses a Cactus
    request with the patch's name and why it is off, while vLLM's own rule still runs."""
    code = textwrap.dedent(
        """
        import json
        from cactus_vllm import plugin
        plugin.V1_SAMPLE += ("new_argument",)
        plugin.V2_SAMPLE += ("new_argument",)
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        from vllm import SamplingParams
        from vllm.exceptions import VLLMValidationError
        CACTUS = json.loads(CACTUS_JSON)
        SamplingParams(temperature=0.7, extra_args={"cactus_rule": {"rule": "sps"}})
        SamplingParams(temperature=0.7, extra_args={"cactus_rule": {"rule": "cactus", "delta": 0}})
        try:
            SamplingParams(temperature=0.7, extra_args={"cactus_rule": CACTUS})
            error = None
        except VLLMValidationError as e:
            error = str(e)
        print(json.dumps({"status": plugin.status(), "error": error}))
        """
    ).replace("CACTUS_JSON", repr(json.dumps(CACTUS)))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"]["rules (V1 sampler)"].startswith("skipped: signature changed")
    error = result["error"]
    assert error is not None, "a Cactus request was accepted without the sampler patch"
    for words in ("cactus δ=0.1", "'rules (V1 sampler)'", "'rules (Model Runner V2 sampler)'",
                  "signature changed", "lossless", '{"rule": "sps"}'):  # fmt: skip
        assert words in error, (words, error)


def test_the_engines_runner_decides_which_patches_a_request_needs(patched, monkeypatch):
    """Once the engine is configured its runner is known: a request is refused when that
    runner's patch is off, and runs when only the other runner's is."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    force_off(monkeypatch, "rules (Model Runner V2 sampler)")
    SamplingParams(temperature=0.7, extra_args={"cactus_rule": CACTUS})  # runner not known yet
    guard.set_runner(guard.V1)
    SamplingParams(temperature=0.7, extra_args={"cactus_rule": CACTUS})
    guard.set_runner(guard.MRV2)
    with pytest.raises(VLLMValidationError, match=r"0.32.0 \(Model Runner V2\)"):
        SamplingParams(temperature=0.7, extra_args={"cactus_rule": CACTUS})
    force_off(monkeypatch, "per-request rules (V1)")
    guard.set_runner(guard.V1)
    with pytest.raises(VLLMValidationError, match=r"'per-request rules \(V1\)'"):
        SamplingParams(temperature=0.7, extra_args={"cactus_rule": CACTUS})


def test_without_the_engines_check_an_unknown_runner_needs_every_patch(patched, monkeypatch):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    force_off(monkeypatch, "rules (Model Runner V2 sampler)", guard.ENGINE_CHECK)
    with pytest.raises(VLLMValidationError, match="Model Runner V2 sampler"):
        SamplingParams(temperature=0.7, extra_args={"cactus_rule": CACTUS})


def engine_config(v2: bool = False, spec: object = "standard", watermark: object = None):
    speculative = None if spec is None else types.SimpleNamespace(rejection_sample_method=spec)
    return types.SimpleNamespace(
        use_v2_model_runner=v2, speculative_config=speculative, watermark_config=watermark
    )


def test_the_engines_check_sees_every_request(patched, monkeypatch):
    """InputProcessor._validate_params, with the engine's config: a request's own rule, or
    the deployment's for a request that names none."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    check = request_rules.wrap_validate_params(lambda self, params, tasks: None)
    processor = types.SimpleNamespace(vllm_config=engine_config(v2=True))
    force_off(monkeypatch, "rules (Model Runner V2 sampler)")
    own = SamplingParams(temperature=0.7, extra_args={"cactus_rule": CACTUS})
    with pytest.raises(VLLMValidationError, match="Model Runner V2 sampler"):
        check(processor, own, ("generate",))
    check(types.SimpleNamespace(vllm_config=engine_config(v2=False)), own, ("generate",))
    monkeypatch.setenv(ENV_VAR, json.dumps(CACTUS))
    with pytest.raises(VLLMValidationError, match="the deployment's rule"):
        check(processor, SamplingParams(temperature=0.7), ("generate",))
    lossless = SamplingParams(temperature=0.7, extra_args={"cactus_rule": {"rule": "sps"}})
    check(processor, lossless, ("generate",))  # its own rule, vLLM's sampler, runs anywhere


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (engine_config(spec=None), "--speculative-config"),
        (engine_config(spec="block"), "rejection_sample_method='block'"),
        (engine_config(spec="synthetic"), "rejection_sample_method='synthetic'"),
        (engine_config(watermark=object()), "watermarks"),
    ],
    ids=["no speculation", "block", "synthetic", "watermarking"],
)
def test_a_deployment_that_replaces_every_rule_refuses_one(patched, config, words):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    check = request_rules.wrap_validate_params(lambda self, params, tasks: None)
    request = SamplingParams(temperature=0.7, extra_args={"cactus_rule": CACTUS})
    with pytest.raises(VLLMValidationError, match=words):
        check(types.SimpleNamespace(vllm_config=config), request, ("generate",))


def test_the_deployments_rule_is_checked_at_start_up(patched, monkeypatch):
    """EngineArgs.create_engine_config: the deployment's rule (CACTUS_VLLM_RULE, which the
    speculative config's rule becomes) fails the start-up when it cannot run, or is bad."""
    config = engine_config()
    start = request_rules.wrap_create_engine_config(lambda self, usage, headless: config)
    monkeypatch.setenv(ENV_VAR, json.dumps(CACTUS))
    assert start(None) is config and guard.known_runner() == guard.V1
    force_off(monkeypatch, "rules (V1 sampler)")
    with pytest.raises(guard.RuleUnavailable, match=r"CACTUS_VLLM_RULE.*'rules \(V1 sampler\)'"):
        start(None)
    monkeypatch.setenv(ENV_VAR, '{"rule": "cactos"}')
    with pytest.raises(RuleSpecError, match="unknown rule 'cactos'"):
        start(None)
    monkeypatch.setenv(ENV_VAR, '{"rule": "sps"}')
    assert start(None) is config  # vLLM's own sampler needs no patch
