"""“Use this setting”: the texts each engine gets for a lab setting, built without a browser —
every rule's spec and every snippet parse, the transformers snippet runs, SGLang's fit comes
from a run's positions or the reference's curves, TensorRT-LLM maps only relaxed-topk."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import json
import re
import shlex

import pytest
from distributions import dirichlet

from cactus_core.app.shared.engine_export import ExportSetting, export_blocks, summary
from cactus_core.app.shared.export_setting import (
    EMBEDDED_DRAFT_PATH,
    EMBEDDED_VERIFIER_HUB,
    decode_export,
    engine_models,
    frontier_export,
    frontier_rule,
)
from cactus_core.app.shared.request import DecodeRequest, DecodeRun
from cactus_core.app.shared.settings import AppSettings
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.experiments.estimates.curves import estimate_frontier
from cactus_core.experiments.estimates.engine_fit import SGLANG_RULE
from cactus_core.experiments.sweeps.reference import ReferenceSweep
from cactus_core.experiments.tuning.tune import FirstGuess
from cactus_core.maths.rules import RULES, make_rule
from cactus_core.maths.rules.spec import rule_from_spec, rule_spec
from cactus_core.maths.rules.thresholds import RelaxedTopK
from cactus_core.maths.sampling import SamplingSettings

SAMPLING = SamplingSettings(temperature=0.7, top_p=0.95, top_k=0, k=5)


def blocks_of(setting: ExportSetting) -> dict[str, dict[str, str]]:
    return {e.engine: {b.title: b.code for b in e.blocks} for e in export_blocks(setting)}


def captions_of(setting: ExportSetting) -> dict[str, str]:
    return {e.engine: e.caption for e in export_blocks(setting)}


@pytest.mark.parametrize("name", list(RULES))
def test_every_rule_exports_parseable_commands(name):
    rule = make_rule(name)
    setting = decode_export(AppSettings(sampling=SAMPLING), rule, None)
    blocks = blocks_of(setting)
    serve = blocks["vLLM"]["Serve"]
    env = re.search(r"CACTUS_VLLM_RULE='([^']*)'", serve).group(1)
    assert rule_from_spec(env) == rule  # the plugin's spec reads back as this rule
    words = shlex.split(serve.replace("\\\n", " "), comments=True)
    config = json.loads(words[words.index("--speculative-config") + 1])
    # the embedded pair's folders come from the install block's eval, as $VERIFIER and $DRAFT
    assert config == {"method": "draft_model", "model": "$DRAFT", "num_speculative_tokens": 5,
                      "draft_sample_method": "probabilistic"}  # fmt: skip
    assert words[words.index("serve") + 1] == "$VERIFIER"
    assert "cactus_vllm.export --shell" in blocks["vLLM"]["Install"]
    gen = json.loads(words[words.index("--override-generation-config") + 1])
    assert gen == {"temperature": 0.7, "top_p": 0.95}
    for engine in ("vLLM", "transformers"):
        for code in blocks[engine].values():
            if "import" in code:
                ast.parse(code)
    assert f"cactus_rule={rule_spec(rule)!r}," in blocks["transformers"]["Python"]
    assert "num_assistant_tokens=5" in blocks["transformers"]["Python"]
    assert "top_k=0" in blocks["transformers"]["Python"]  # generate's own default is 50
    assert setting.verifier == EMBEDDED_VERIFIER_HUB and "**" + rule.label in summary(setting)
    assert setting.draft == EMBEDDED_DRAFT_PATH


def test_tensorrt_llm_maps_relaxed_topk_only():
    rule = make_rule(RelaxedTopK.name, delta_r=0.2, K=8)
    setting = decode_export(AppSettings(sampling=SAMPLING), rule, None)
    config = blocks_of(setting)["TensorRT-LLM"]["Config"]
    assert "relaxed_topk: 8" in config and "relaxed_delta: 0.2" in config
    assert "use_relaxed_acceptance_for_thinking: true" in config
    assert "num_nextn_predict_layers: 5" in config
    other = decode_export(AppSettings(sampling=SAMPLING), make_rule("cactus"), None)
    assert blocks_of(other)["TensorRT-LLM"] == {}
    assert "No mapping" in captions_of(other)["TensorRT-LLM"]


def test_greedy_and_top_k():
    greedy = decode_export(AppSettings(sampling=SamplingSettings(temperature=0.0, k=3)),
                           make_rule("cactus"), None)  # fmt: skip
    blocks = blocks_of(greedy)
    assert "do_sample=False" in blocks["transformers"]["Python"]
    assert '{"temperature": 0.0}' in blocks["vLLM"]["Serve"]
    assert "--temp 0" in blocks["llama.cpp"]["Serve"]
    top_k = decode_export(AppSettings(sampling=SamplingSettings(top_k=40)), make_rule("sps"), None)
    assert '"top_k": 40' in blocks_of(top_k)["vLLM"]["Serve"]


def test_llama_cpp_takes_the_k_tuners_best_k():
    base = decode_export(AppSettings(sampling=SAMPLING), make_rule("cactus"), None)
    assert "--spec-draft-n-max 5" in blocks_of(base)["llama.cpp"]["Serve"]
    assert "k = 5 as set" in captions_of(base)["llama.cpp"]
    tuned = dataclasses.replace(base, best_k=3, best_k_note="the k tuner's best k")
    assert "--spec-draft-n-max 3" in blocks_of(tuned)["llama.cpp"]["Serve"]
    assert "no relaxed acceptance" in captions_of(tuned)["llama.cpp"]


def test_a_custom_pair_keeps_its_names_or_labels(tiny_pair_dirs):
    v, d = (str(x) for x in tiny_pair_dirs)
    models = engine_models(AppSettings(verifier=v, draft=d))
    assert (models.verifier, models.draft, models.embedded) == (v, d, False)
    labelled = AppSettings(verifier=v, draft=d, verifier_label="big", draft_label="small")
    # a public server's folders stay hidden behind its labels: placeholders to replace
    assert (engine_models(labelled).verifier, engine_models(labelled).draft) == (
        "/path/to/big",
        "/path/to/small",
    )


def test_the_transformers_snippet_runs(tiny_pair_dirs):
    """The snippet as the panel writes it, run on the tiny pair's folders."""
    v, d = (str(x) for x in tiny_pair_dirs)
    settings = AppSettings(verifier=v, draft=d, sampling=SamplingSettings(k=3))
    code = blocks_of(decode_export(settings, make_rule("cactus", delta=0.2), None))
    code = code["transformers"]["Python"].replace("max_new_tokens=128", "max_new_tokens=12")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "snippet", "exec"), {})
    assert out.getvalue().strip()


def decode_run(pair, rule_name: str = "cactus") -> DecodeRun:
    settings = AppSettings(sampling=SamplingSettings(temperature=0.9, k=3))
    request = DecodeRequest("Tell me about cacti.", settings, make_rule(rule_name), 40, True)
    dec = SpeculativeDecoder(pair, request.rule, k=3, temperature=0.9)
    return DecodeRun(run_id=7, request=request, output=dec.generate(request.prompt, 40, seed=1))


def test_sglang_fit_from_a_decode_run(tiny_pair):
    run = decode_run(tiny_pair)
    rule = make_rule("cactus", delta=0.05)
    setting = decode_export(run.settings, rule, run)
    fit = setting.sglang
    assert fit is not None and fit.positions > 10 and fit.setting == rule.label
    assert 0 < fit.threshold_acc <= 1 and (abs(fit.error) < 5e-3 or fit.edge)
    launch = blocks_of(setting)["SGLang"]["Launch"]
    assert f"--speculative-accept-threshold-acc {fit.threshold_acc:g}" in launch
    caption = captions_of(setting)["SGLang"]
    note = next(e.note for e in export_blocks(setting) if e.engine == "SGLang")
    assert "run 7's positions" in caption and "another rule" in note
    assert f"{fit.kl:.4f}" in caption and f"{fit.target_kl:.4f}" in caption
    none = decode_export(run.settings, rule, None)
    assert none.sglang is None and "No fit yet" in captions_of(none)["SGLang"]
    assert "--speculative-accept-threshold-acc 1" in blocks_of(none)["SGLang"]["Launch"]


def reference_part() -> ReferenceSweep:
    q = dirichlet(40, (200,), seed=1, conc=0.3)
    p = 0.6 * q + 0.4 * dirichlet(40, (200,), seed=2, conc=0.3)
    est = estimate_frontier(p, q, 4, rules=["cactus", SGLANG_RULE])
    return ReferenceSweep(1.0, {}, [], None, {}, est, 0.0)


def test_frontier_exports_the_tuned_setting_fitted_on_the_curves():
    guess = FirstGuess("cactus", "delta", 0.0123456, 0.02, 2.0, "estimated curve", False)
    rule, origin = frontier_rule(None, guess, 0.05)
    assert rule == make_rule("cactus", delta=0.01235) and "first guess" in origin
    assert "≤ 0.05 nats per token" in origin
    setting = frontier_export(AppSettings(), rule, origin, reference_part())
    assert setting.sglang is not None and "estimated curves" in setting.sglang.source
    assert frontier_rule(None, None) is None
    missing = frontier_export(AppSettings(), make_rule("tas"), origin, reference_part())
    assert missing.sglang is None and "no curve of tas" in missing.sglang_note
