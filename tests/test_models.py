"""Model loading: the embedded offline pair, other pairs from folders / hub ids, and the checks."""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import huggingface_hub
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from cactus_core.engine.loading import models as cm
from cactus_core.engine.loading.models import ModelLoadError, load_pair
from cactus_core.engine.loading.pair import ModelPair
from cactus_core.engine.loading.prompts import builtin_prompts
from cactus_core.engine.runtime.subset_head import VocabSubsetHead
from cactus_core.maths.sampling import logits_to_probs

WORDS = [
    "the",
    "a",
    "cactus",
    "desert",
    "water",
    "sun",
    "tell",
    "me",
    "about",
    "how",
    "do",
    "they",
    "survive",
    "in",
    "hi",
]


def _tiny_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["[UNK]", "<pad>", "<eos>", *words])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="<pad>", eos_token="<eos>"
    )


def _save_tiny(folder: Path, words: list[str] = WORDS, layers: int = 1, seed: int = 0) -> Path:
    tok = _tiny_tokenizer(words)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128 if layers == 1 else 96,
    )
    LlamaForCausalLM(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {
        "verifier": _save_tiny(root / "verifier", layers=2, seed=1),
        "draft": _save_tiny(root / "draft", layers=1, seed=2),
        # Same size, different ids: only a real tokenizer check catches this one.
        "other": _save_tiny(root / "other", words=list(reversed(WORDS)), seed=3),
    }


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch) -> Path:
    from huggingface_hub import constants

    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    return hub


def _add_to_hub_cache(hub: Path, repo_id: str, src: Path) -> None:
    # The layout huggingface_hub reads offline: refs/main names a snapshot folder.
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    commit = "0" * 40
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in src.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


# ---------------------------------------------------------------------------------------------
# Pairs from local folders and hub ids (tiny random models)


def test_local_folders_load_as_a_pair(tiny_dirs):
    pair = load_pair(tiny_dirs["verifier"], tiny_dirs["draft"], device="cpu")
    assert isinstance(pair, ModelPair)
    assert pair.device == torch.device("cpu") and pair.dtype == torch.float32
    assert not pair.verifier.training and not pair.draft.training
    assert pair.context_length == 96  # the smaller of the two
    assert str(tiny_dirs["verifier"].resolve()) in pair.identity
    ids = pair.encode_prompt("tell me about the cactus")
    assert ids == pair.tokenizer("tell me about the cactus")["input_ids"]  # no template: raw
    with torch.no_grad():
        q = pair.verifier(torch.tensor([ids])).logits
        p = pair.draft(torch.tensor([ids])).logits
    assert q.shape == p.shape


def test_dtype_argument(tiny_dirs):
    pair = load_pair(tiny_dirs["verifier"], tiny_dirs["draft"], device="cpu", dtype="bfloat16")
    assert pair.dtype == torch.bfloat16
    assert pair.verifier.dtype == torch.bfloat16 and pair.draft.dtype == torch.bfloat16
    assert "bfloat16" in pair.identity


def test_bad_arguments_raise_value_errors(tiny_dirs, tmp_path):
    with pytest.raises(ValueError, match="device"):
        load_pair(tiny_dirs["verifier"], tiny_dirs["draft"], device="tpu")
    with pytest.raises(ValueError, match="dtype"):
        load_pair(tiny_dirs["verifier"], tiny_dirs["draft"], device="cpu", dtype="int8")
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_pair(tmp_path / "missing" / "model", tiny_dirs["draft"], device="cpu")
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_pair(str(tmp_path / "missing.gguf"), tiny_dirs["draft"], device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            load_pair(tiny_dirs["verifier"], tiny_dirs["draft"], device="cuda")


def test_mismatched_tokenizers_name_both_models(tiny_dirs):
    with pytest.raises(ModelLoadError) as err:
        load_pair(tiny_dirs["verifier"], tiny_dirs["other"], device="cpu")
    msg = str(err.value)
    assert str(tiny_dirs["verifier"].resolve()) in msg
    assert str(tiny_dirs["other"].resolve()) in msg
    assert "tokeni" in msg or "vocabular" in msg


def test_tokenizer_check_catches_same_vocab_different_encoding():
    a, b = _tiny_tokenizer(WORDS), _tiny_tokenizer(WORDS)
    b.backend_tokenizer.pre_tokenizer = pre_tokenizers.Split("zzz", "isolated")
    cm.check_tokenizers_agree(a, a, "A", "A")
    with pytest.raises(ModelLoadError, match=r"'A'.*'B'.*tokenize"):
        cm.check_tokenizers_agree(a, b, "A", "B")


def test_hub_ids_load_from_the_local_hub_cache(tiny_dirs, empty_hub_cache, monkeypatch):
    _add_to_hub_cache(empty_hub_cache, "tiny-org/verifier", tiny_dirs["verifier"])
    _add_to_hub_cache(empty_hub_cache, "tiny-org/draft", tiny_dirs["draft"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pair = load_pair("tiny-org/verifier", "tiny-org/draft", device="cpu")
    assert pair.verifier_name == "tiny-org/verifier" and pair.draft_name == "tiny-org/draft"
    assert pair.verifier.config.num_hidden_layers == 2


@pytest.mark.parametrize("offline", ["1", ""])
def test_unreachable_hub_id_fails_fast_with_a_path_hint(
    tiny_dirs, empty_hub_cache, monkeypatch, offline
):
    # Offline, the hub is not asked at all; otherwise once, with a short timeout (played here by
    # a stand-in that fails as an unreachable hub does), so the error comes within seconds.
    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    probes = []

    def unreachable(self, repo_id, **kwargs):
        probes.append(kwargs.get("timeout"))
        raise OSError("Network is unreachable")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unreachable)
    with pytest.raises(ModelLoadError) as err:
        load_pair("cactus-lab-tests/no-such-model-xyz", tiny_dirs["draft"], device="cpu")
    assert probes == ([] if offline else [cm.HUB_PROBE_TIMEOUT_S])
    msg = str(err.value)
    assert "cactus-lab-tests/no-such-model-xyz" in msg and "local folder" in msg


def _record_from_pretrained(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    for cls in (AutoModelForCausalLM, AutoTokenizer):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, **kwargs):
            calls.append(dict(kwargs))
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    return calls


def test_trust_remote_code_is_always_passed_explicitly(tiny_dirs, monkeypatch):
    # Left unset, transformers asks on stdin whether to run a folder's own Python (issue 15).
    calls = _record_from_pretrained(monkeypatch)
    load_pair(tiny_dirs["verifier"], tiny_dirs["draft"], device="cpu")
    assert len(calls) == 4
    assert all(kw.get("trust_remote_code") is False for kw in calls)
    calls.clear()
    load_pair(tiny_dirs["verifier"], tiny_dirs["draft"], device="cpu", trust_remote_code=True)
    assert len(calls) == 4
    assert all(kw.get("trust_remote_code") is True for kw in calls)


def test_embedded_draft_refuses_a_verifier_with_another_tokenizer(tiny_dirs):
    with pytest.raises(ModelLoadError, match="embedded draft"):
        load_pair(tiny_dirs["verifier"], None, device="cpu")


# ---------------------------------------------------------------------------------------------
# The GGUF conversion cache (a fake converter: the real one is exercised by the slow tests)


@pytest.fixture
def fake_converter(tiny_dirs, monkeypatch) -> list[Path]:
    runs: list[Path] = []

    def convert(gguf: Path, out: Path) -> None:
        runs.append(out)
        out.mkdir(parents=True)
        for f in tiny_dirs["verifier"].iterdir():
            (out / f.name).write_bytes(f.read_bytes())

    monkeypatch.setattr(cm, "_convert_gguf", convert)
    return runs


def _fake_gguf(tmp_path: Path) -> Path:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    return gguf


def test_gguf_conversion_is_cached_and_reused(tmp_path, fake_converter, tiny_dirs):
    gguf, cache = _fake_gguf(tmp_path), tmp_path / "cache"
    folder = cm.convert_gguf_cached(gguf, cache)
    assert cm.cache_is_valid(folder) and len(fake_converter) == 1
    assert cm.convert_gguf_cached(gguf, cache) == folder and len(fake_converter) == 1
    manifest = json.loads((folder / cm.MANIFEST).read_text())
    assert "model.safetensors" in manifest["files"]
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temp left
    pair = load_pair(str(gguf), tiny_dirs["draft"], device="cpu", cache_dir=cache)
    assert pair.verifier.config.num_hidden_layers == 2 and len(fake_converter) == 1


@pytest.mark.parametrize(
    "damage", ["truncate", "flip_byte", "drop_manifest", "bad_manifest", "drop_file"]
)
def test_broken_cache_is_rebuilt_not_loaded(tmp_path, fake_converter, damage):
    gguf, cache = _fake_gguf(tmp_path), tmp_path / "cache"
    folder = cm.convert_gguf_cached(gguf, cache)
    weights = folder / "model.safetensors"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:-100])
    elif damage == "flip_byte":
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "drop_manifest":
        (folder / cm.MANIFEST).unlink()
    elif damage == "bad_manifest":
        (folder / cm.MANIFEST).write_text("{not json")
    else:
        (folder / "config.json").unlink()
    assert not cm.cache_is_valid(folder)
    assert cm.convert_gguf_cached(gguf, cache) == folder
    assert len(fake_converter) == 2 and cm.cache_is_valid(folder)


def test_half_written_conversion_is_never_used(tmp_path, fake_converter, monkeypatch):
    gguf, cache = _fake_gguf(tmp_path), tmp_path / "cache"

    def crash(folder: Path, source: Path) -> None:
        raise KeyboardInterrupt  # killed after the weights, before the manifest

    monkeypatch.setattr(cm, "_write_manifest", crash)
    with pytest.raises(KeyboardInterrupt):
        cm.convert_gguf_cached(gguf, cache)
    final = cm.gguf_cache_folder(gguf, cache)
    assert not final.exists()
    assert not [p for p in final.parent.iterdir() if p.name.startswith(".tmp")]
    monkeypatch.undo()


def test_processes_that_start_on_an_empty_cache_at_once_convert_once(
    tmp_path, fake_converter, monkeypatch
):
    """Test workers and Ray actors load the embedded pair at the same moment on a fresh
    machine: one converts, the others wait for its folder, and no one's folder is replaced
    under it (each open() is its own lock holder, as another process's would be)."""
    gguf, cache = _fake_gguf(tmp_path), tmp_path / "cache"
    start = threading.Barrier(4)
    convert = cm._convert_gguf

    def slow_convert(gguf: Path, out: Path) -> None:
        time.sleep(0.2)  # a real conversion takes half a minute; the others arrive meanwhile
        convert(gguf, out)

    monkeypatch.setattr(cm, "_convert_gguf", slow_convert)

    def load() -> tuple[Path, bytes]:
        start.wait()
        folder = cm.convert_gguf_cached(gguf, cache)
        return folder, (folder / "model.safetensors").read_bytes()

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: load(), range(4)))
    assert len(fake_converter) == 1
    assert len({folder for folder, _ in results}) == 1 and len({w for _, w in results}) == 1
    assert cm.cache_is_valid(results[0][0])


def test_cache_dir_comes_from_argument_then_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(cm.CACHE_ENV, str(tmp_path / "env"))
    assert cm.resolve_cache_dir() == tmp_path / "env"
    assert cm.resolve_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv(cm.CACHE_ENV)
    assert cm.resolve_cache_dir() == Path.home() / ".cache" / "cactus-lab"


# ---------------------------------------------------------------------------------------------
# Prompts and the draft's files


def test_builtin_prompts_are_varied_and_not_trained_on():
    from training.prompts import generate_prompts

    prompts = builtin_prompts()
    assert len(prompts) >= 20 and len(set(prompts)) == len(prompts)
    assert all(isinstance(p, str) and len(p) > 10 for p in prompts)
    training = generate_prompts()
    assert len(training) > 10 * len(prompts)
    assert not set(prompts) & set(training)


def test_draft_assets_fit_the_size_budget():
    files = [p for p in cm.DRAFT_DIR.iterdir() if p.is_file()]
    names = {p.name for p in files}
    assert {"config.json", "model.safetensors", "README.md"} <= names
    assert sum(p.stat().st_size for p in files) <= 40 * 2**20
    cfg = json.loads((cm.DRAFT_DIR / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["tie_word_embeddings"]
    from safetensors import safe_open

    with safe_open(str(cm.DRAFT_DIR / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    # Only the draft's own layers are stored: the embedding and the shared lowest layers are
    # the verifier's and come from it at load time.
    assert "model.embed_tokens.weight" not in keys and "lm_head.weight" not in keys
    for i in range(cfg.get("cactus_shared_verifier_layers", 0)):
        assert not [k for k in keys if k.startswith(f"model.layers.{i}.")]


# ---------------------------------------------------------------------------------------------
# The embedded pair (slow: one real GGUF conversion per session, into a clean cache)


# The tests that read `embedded` stay on one worker, so that the conversion runs once.
EMBEDDED_GROUP = pytest.mark.xdist_group("embedded-conversion")


@pytest.fixture(scope="session")
def embedded(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cactus-cache")
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        pair = load_pair(cache_dir=cache, device="cpu")
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old
    return pair, cache


@pytest.mark.slow
@EMBEDDED_GROUP
def test_embedded_pair_loads_offline_from_a_clean_cache(embedded):
    pair, cache = embedded
    assert pair.verifier_name == cm.EMBEDDED_VERIFIER_NAME
    assert pair.verifier.config.num_hidden_layers == 30
    assert pair.dtype == torch.float32 and pair.device == torch.device("cpu")
    assert pair.context_length == 8192
    assert pair.draft.config.num_hidden_layers < 30
    (folder,) = (cache / "converted").iterdir()
    assert cm.cache_is_valid(folder)
    assert cm.embedded_cache_ready(cache)  # what the app's start-up load checks
    ids = pair.encode_prompt("Tell me about cacti.")
    text = pair.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    assert "Tell me about cacti." in text
    assert (
        pair.encode_prompt("Tell me about cacti.", chat_template=False)
        == pair.tokenizer("Tell me about cacti.")["input_ids"]
    )
    with torch.no_grad():
        x = torch.tensor([ids])
        q, p = pair.verifier(x).logits[0, -1], pair.draft(x).logits[0, -1]
    assert q.shape == p.shape == (49152,)
    assert torch.isfinite(p).all()
    # The verifier answers sensibly: its greedy first token is a word, not an end marker.
    assert pair.tokenizer.decode([int(q.argmax())]).strip()


@pytest.mark.slow
@EMBEDDED_GROUP
def test_embedded_draft_uses_the_verifiers_tokenizer(embedded):
    pair, _ = embedded
    cfg = json.loads((cm.DRAFT_DIR / "config.json").read_text())
    assert cfg["cactus_tokenizer_sha256"] == cm.tokenizer_fingerprint(pair.tokenizer)
    # One embedding matrix: the draft's input table and head are the verifier's.
    v_emb = pair.verifier.get_input_embeddings().weight
    assert pair.draft.get_input_embeddings().weight.data_ptr() == v_emb.data_ptr()
    head = pair.draft.get_output_embeddings()
    if cfg.get(cm.DRAFT_HEAD_IDS_KEY):
        # A head over a token subset: the verifier's rows for those ids, nothing else.
        assert isinstance(head, VocabSubsetHead)
        assert torch.equal(head.weight, v_emb[head.token_ids])
        with torch.no_grad():
            p = pair.draft(torch.tensor([pair.encode_prompt("Hi")])).logits[0, -1]
        outside = torch.ones(p.shape[0], dtype=torch.bool)
        outside[head.token_ids] = False
        assert (logits_to_probs(p, temperature=0.7)[outside] == 0).all()
        assert pair.tokenizer.eos_token_id in head.token_ids.tolist()
    else:
        assert head.weight.data_ptr() == v_emb.data_ptr()
    assert pair.draft.config.vocab_size == pair.verifier.config.vocab_size
    # The draft's lowest layers are the verifier's own (frozen in training, not stored).
    for i in range(cfg.get("cactus_shared_verifier_layers", 0)):
        assert pair.draft.model.layers[i] is pair.verifier.model.layers[i]


@pytest.mark.slow
@EMBEDDED_GROUP
def test_second_embedded_load_reuses_the_cache(embedded, monkeypatch):
    _, cache = embedded

    def no_conversion(*args, **kwargs):
        raise AssertionError("the cache should have been reused")

    monkeypatch.setattr(cm, "_convert_gguf", no_conversion)
    pair = load_pair(cache_dir=cache, device="cpu")  # its time: benchmarks/bench_app.py
    assert pair.identity == embedded[0].identity
