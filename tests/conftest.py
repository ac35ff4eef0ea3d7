"""Shared fixtures: a tiny random model pair that loads in well under a second.

`tiny_pair` is a ModelPair of two random Llama models over a 259-token byte-level vocabulary
(3 special tokens + 256 bytes) with a ChatML chat template, so every code path that runs on the
embedded pair (chat template, EOS, KV caches, batching) runs here in milliseconds. The draft
is the verifier cut after its first layer (an early exit, as in self-speculative decoding), so
the two models agree about as well as a small trained draft does (sum min(p, q) ≈ 0.5) and
rounds accept a fair share of drafts. Weights are drawn with a larger init scale than usual so
the distributions are peaked rather than uniform.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

from cactus_core.engine.loading.pair import ModelPair

# The app would start loading the embedded pair in the background of every AppTest session
# (pages/shared/pair.preload_pair); tests load what they need themselves.
os.environ.setdefault("CACTUS_LAB_PRELOAD", "0")

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level tokenizer without merges: every byte is a token (ids 3..258)."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in bytes_to_unicode().values():
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS,
    )
    tokenizer.chat_template = CHATML
    return tokenizer


def tiny_llama(
    vocab: int, layers: int, seed: int, context: int = 256, init_scale: float = 0.25
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        initializer_range=init_scale,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config).eval()


def make_tiny_pair(context: int = 256, seed: int = 0) -> ModelPair:
    tokenizer = tiny_tokenizer()
    vocab = len(tokenizer)
    verifier = tiny_llama(vocab, layers=2, seed=seed, context=context)
    draft = tiny_llama(vocab, layers=1, seed=seed, context=context)
    shared = {k: w for k, w in verifier.state_dict().items() if not k.startswith("model.layers.1.")}
    draft.load_state_dict(shared)
    return ModelPair(
        verifier=verifier,
        draft=draft,
        tokenizer=tokenizer,
        verifier_name=f"tiny-random-llama-2l-seed{seed}",
        draft_name=f"tiny-random-llama-2l-seed{seed}-exit1",
        device=torch.device("cpu"),
        dtype=torch.float32,
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `cuda` are skipped on machines without a CUDA device.

    Under pytest-xdist (`make test` runs two workers with `--dist loadgroup`), tests spread one
    by one over the workers, except groups that each stay on one worker: a browser test module
    (its app server and Chromium are started once for the module), and the Ray tests (one local
    cluster for the module)."""
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(pytest.mark.xdist_group(f"browser-{item.module.__name__}"))
        elif item.module.__name__.endswith("test_sweep_ray"):
            item.add_marker(pytest.mark.xdist_group("ray"))
    if config.getoption("loadgroup", default=False):  # an xdist worker under --dist loadgroup
        _name_groups(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def _name_groups(items: list[pytest.Item]) -> None:
    """Append "@group" to the node id of each test marked xdist_group: the controller reads the
    groups from the ids. pytest-xdist 3.8 writes them to `item._nodeid`, which pytest 9 no
    longer reads (its ids live in `item._id`), so without this every group is split over the
    workers and each worker starts the group's module fixtures (a Ray cluster, a model)."""
    from _pytest.nodeid import NodeId

    for item in items:
        marks = item.iter_markers("xdist_group")
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "x")) for m in marks})
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One torch thread for the whole suite: CI has two shared cores (the browser tests' app
    server takes the other), and OpenMP barriers under contention cost far more than a second
    thread gains on these mid-sized tensors (measured 5-9x slower with two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def one_component_scan():
    """Each new AppTest scans every installed package's metadata for Streamlit components
    (a quarter of a second); the packages do not change while the tests run, so the scan is
    made once."""
    from streamlit.components.v2 import manifest_scanner

    scan = functools.cache(manifest_scanner.scan_component_manifests)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest_scanner, "scan_component_manifests", scan)
        yield


@pytest.fixture(scope="session")
def tiny_pair() -> ModelPair:
    """A tiny random verifier/draft pair (CPU, float32, context 256). Treat it as read-only."""
    return make_tiny_pair()


@pytest.fixture(scope="session")
def tiny_pair_factory() -> Callable[..., ModelPair]:
    """make_tiny_pair(context=256, seed=0): a fresh tiny pair, e.g. with a short context."""
    return make_tiny_pair


@pytest.fixture
def tiny_judge(monkeypatch, tiny_pair: ModelPair) -> None:
    """A random learned judge for the tiny pair's hidden size (64) in place of the shipped one,
    which reads the embedded verifier's (576)."""
    from cactus_core.maths.rules import learned_judge

    size = tiny_pair.verifier.config.hidden_size
    weights = torch.randn(2 * size, generator=torch.Generator().manual_seed(0))
    judge = learned_judge.Judge(weights, 0.0, "tiny")
    monkeypatch.setattr(learned_judge, "loaded_judge", lambda: judge)


@pytest.fixture(scope="session")
def tiny_pair_dirs(tiny_pair: ModelPair, tmp_path_factory) -> tuple[Path, Path]:
    """The tiny pair saved as two model folders (verifier, draft), as a user names a local pair."""
    root = tmp_path_factory.mktemp("tiny_pair")
    for role, model in (("verifier", tiny_pair.verifier), ("draft", tiny_pair.draft)):
        model.save_pretrained(root / role)
        tiny_pair.tokenizer.save_pretrained(root / role)
    return root / "verifier", root / "draft"


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless through Playwright, one per browser-test module."""
    from playwright.sync_api import sync_playwright
    from streamlit_server import launch_chromium

    with sync_playwright() as pw:
        b = launch_chromium(pw)
        yield b
        b.close()
