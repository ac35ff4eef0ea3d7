"""Issue 15's library items: custom code never runs, damaged checkpoints are refused without
echoing their contents, the sweep cache keys on weights and code and survives a damaged cache,
the prompt-file parser ends in prompts or a ValueError (fuzzed), and traces are validated."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from cactus_core.engine.decoding.replay import reverify
from cactus_core.engine.decoding.trace import MAX_VOCAB, Trace
from cactus_core.engine.loading import weights as cw
from cactus_core.engine.loading.models import ModelLoadError, load_pair
from cactus_core.experiments.sweeps import cache as sc
from cactus_core.experiments.sweeps.cache import CacheWarning, SweepCache, code_version
from cactus_core.experiments.sweeps.config import (
    Setting,
    SweepConfig,
    parse_grid,
    parse_prompt_file,
    settings_from_grids,
)
from cactus_core.experiments.sweeps.run import _chunk_payload, cached_chunks, run_sweep
from cactus_core.maths.rules import RULES
from cactus_core.maths.sampling import SamplingSettings

ROOT = Path(__file__).resolve().parent.parent
SECRET = "SECRET-7f3a"  # planted in bad files; must never appear in an error


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ------------------------------------------------------------------------ custom code


def _custom_code_folder(folder: Path, marker: Path) -> Path:
    folder.mkdir()
    auto = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    config = {"model_type": "evil-lab-test", "auto_map": auto, "vocab_size": 10}
    (folder / "config.json").write_text(json.dumps(config))
    tok = {"auto_map": {"AutoTokenizer": ["evil.EvilTokenizer", None]}}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok))
    (folder / "evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import PretrainedConfig\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evil-lab-test'\n"
    )
    return folder


def test_a_folder_with_custom_code_never_runs_it_whatever_stdin_says(tmp_path):
    marker = tmp_path / "marker"
    folder = _custom_code_folder(tmp_path / "evil", marker)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CACTUS_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "cactus_core", "generate", "hi", "--quiet"]
    argv += ["--verifier", str(folder), "--draft", str(folder), "--device", "cpu"]
    proc = subprocess.run(
        argv, input="y\n", capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert not marker.exists(), "the folder's Python ran"
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "never runs" in proc.stderr


def test_every_from_pretrained_in_the_library_sets_trust_remote_code():
    import ast

    calls = 0
    for path in sorted((ROOT / "cactus_core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "from_pretrained":
                continue
            calls += 1
            names = {k.arg for k in node.keywords}
            # `**kw` in models._from_folder always holds the flag (checked by test_models).
            assert "trust_remote_code" in names or None in names, f"{path.name}:{node.lineno}"
    assert calls >= 5


# ------------------------------------------------------------------------ damaged checkpoints


def test_a_checkpoint_missing_tensors_is_refused(tiny_pair_dirs, tmp_path):
    verifier = _copy(tiny_pair_dirs[0], tmp_path / "v")
    weights = verifier / "model.safetensors"
    tensors = load_file(str(weights))
    dropped = next(k for k in tensors if "layers.1.mlp" in k)
    del tensors[dropped]
    save_file(tensors, str(weights), metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="lacks 1 tensor") as err:
        load_pair(str(verifier), str(tiny_pair_dirs[1]), device="cpu")
    assert dropped in str(err.value) and "random" in str(err.value)


def test_unpicklable_bin_weights_give_a_clear_error_without_the_bytes(tiny_pair_dirs, tmp_path):
    verifier = _copy(tiny_pair_dirs[0], tmp_path / "v")
    (verifier / "model.safetensors").unlink()
    (verifier / "pytorch_model.bin").write_bytes(b"\x80\x04c" + SECRET.encode() + b"\nboom\n")
    with pytest.raises(ModelLoadError) as err:
        load_pair(str(verifier), str(tiny_pair_dirs[1]), device="cpu")
    assert "could not load a causal LM" in str(err.value)
    assert SECRET not in str(err.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hidden_size", SECRET),
        ("vocab_size", 10**12),
        ("num_hidden_layers", -987654),
        ("max_position_embeddings", 12345.5),
        ("num_attention_heads", True),
    ],
)
def test_config_values_of_the_wrong_kind_are_named_not_echoed(
    tiny_pair_dirs, tmp_path, field, value
):
    verifier = _copy(tiny_pair_dirs[0], tmp_path / "v")
    config = json.loads((verifier / "config.json").read_text())
    config[field] = value
    (verifier / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=field) as err:
        load_pair(str(verifier), str(tiny_pair_dirs[1]), device="cpu")
    assert str(value) not in str(err.value)


def test_config_json_that_is_not_an_object_is_refused(tiny_pair_dirs, tmp_path):
    verifier = _copy(tiny_pair_dirs[0], tmp_path / "v")
    (verifier / "config.json").write_text(json.dumps([SECRET]))
    with pytest.raises(ModelLoadError, match="JSON object") as err:
        load_pair(str(verifier), str(tiny_pair_dirs[1]), device="cpu")
    assert SECRET not in str(err.value)


# ------------------------------------------------------------------------ weights and the key


def test_weight_hashes_are_remembered_until_the_file_changes_even_with_its_mtime_set_back(
    tmp_path,
):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"a" * 1000)
    cache = tmp_path / "cache"
    assert cw.file_digest(f, cache) == hashlib.sha256(b"a" * 1000).hexdigest()
    cw._memo.clear()  # a new process: the on-disk record answers, nothing is read again
    (record,) = (cache / "digests").iterdir()
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "sha256": "f" * 64}))
    assert cw.file_digest(f, cache) == "f" * 64
    record.write_text(json.dumps(data))
    cw._memo.clear()
    st = f.stat()
    f.write_bytes(b"b" * 1000)  # edited in place: the same size ...
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and the mtime set back
    assert cw.file_digest(f, cache) == hashlib.sha256(b"b" * 1000).hexdigest()
    assert cw.file_digest(f) == hashlib.sha256(b"b" * 1000).hexdigest()  # in memory too


def _config(prompts=("tell me about cacti",)) -> SweepConfig:
    return SweepConfig(
        prompts=tuple(prompts),
        settings=(Setting.of("cactus", delta=1.0),),
        sampling=SamplingSettings(temperature=1.0, k=2, seed=3),
        max_new_tokens=4,
        chunk_size=1,
        limit=False,
    )


def test_new_weights_in_the_same_folder_are_not_served_from_the_cache(tiny_pair_dirs, tmp_path):
    verifier = _copy(tiny_pair_dirs[0], tmp_path / "v")
    draft = tiny_pair_dirs[1]
    cache = SweepCache(tmp_path / "sweeps")
    pair = load_pair(str(verifier), str(draft), device="cpu", cache_dir=tmp_path)
    assert pair.verifier_weights == cw.weights_digest(verifier)
    assert pair.verifier_weights[:16] in pair.identity and pair.draft_weights[:16] in pair.identity
    assert run_sweep(pair, _config(), cache).computed_chunks == 2
    assert run_sweep(pair, _config(), cache).computed_chunks == 0

    weights = verifier / "model.safetensors"
    tensors = load_file(str(weights))
    tensors = {k: v + 0.01 * torch.randn_like(v) for k, v in tensors.items()}
    time.sleep(0.01)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    retrained = load_pair(str(verifier), str(draft), device="cpu", cache_dir=tmp_path)
    assert retrained.verifier_name == pair.verifier_name
    assert retrained.identity != pair.identity
    assert cached_chunks(retrained.identity, _config(), cache) == (0, 2)
    assert run_sweep(retrained, _config(), cache).computed_chunks == 2


def test_the_key_holds_the_code_version(tiny_pair, monkeypatch):
    config = _config()
    payload = _chunk_payload(tiny_pair.identity, config, config.settings[0], (0,))
    assert payload["code"] == code_version()
    assert {"numbers", "sources", "torch", "transformers"} <= set(payload["code"])
    before = sc.cache_key(payload)
    monkeypatch.setattr(sc, "NUMBERS_VERSION", sc.NUMBERS_VERSION + 1)
    code_version.cache_clear()
    try:
        bumped = _chunk_payload(tiny_pair.identity, config, config.settings[0], (0,))
        assert sc.cache_key(bumped) != before
    finally:
        code_version.cache_clear()


def test_pairs_built_in_memory_are_identified_by_their_parameters(tiny_pair_factory):
    assert tiny_pair_factory(seed=0).identity == tiny_pair_factory(seed=0).identity
    assert tiny_pair_factory(seed=0).identity != tiny_pair_factory(seed=1).identity


# ------------------------------------------------------------------------ a damaged cache


def _record(cache: SweepCache, payload, value) -> Path:
    path = cache.path(payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"v": sc.CACHE_VERSION, "key": payload, "value": value}
    path.write_text(json.dumps(body))
    return path


@pytest.mark.parametrize("value", [{"prompts": 5}, [], None, {"setting": 1, "prompts": []}])
def test_valid_json_of_the_wrong_shape_is_a_miss_with_a_warning(tiny_pair, tmp_path, value):
    cache = SweepCache(tmp_path)
    config = _config()
    payload = _chunk_payload(tiny_pair.identity, config, config.settings[0], (0,))
    _record(cache, payload, value)
    with pytest.warns(CacheWarning, match="damaged"):
        assert cache.get(payload) is None
    with pytest.warns(CacheWarning):
        result = run_sweep(tiny_pair, config, SweepCache(tmp_path))
    assert result.computed_chunks == 2
    assert run_sweep(tiny_pair, config, SweepCache(tmp_path)).computed_chunks == 0  # rewritten


def test_a_value_the_caller_cannot_decode_is_a_miss(tmp_path):
    cache = SweepCache(tmp_path)
    cache.put({"k": 1}, {"a": 1})

    def decode(value):
        return value["b"]

    with pytest.warns(CacheWarning, match="another shape"):
        assert cache.get({"k": 1}, decode=decode) is None
    assert cache.get({"k": 1}, decode=lambda v: v["a"]) == 1


def test_a_folder_where_a_file_should_be_is_a_miss_and_not_cached(tiny_pair, tmp_path):
    cache = SweepCache(tmp_path)
    config = _config()
    payload = _chunk_payload(tiny_pair.identity, config, config.settings[0], (0,))
    cache.path(payload).mkdir(parents=True)
    with pytest.warns(CacheWarning, match="cannot read"):
        assert cache.get(payload) is None
    with pytest.warns(CacheWarning, match="cannot write"):
        assert cache.put(payload, {"x": 1}) is None
    with pytest.warns(CacheWarning):
        assert run_sweep(tiny_pair, config, SweepCache(tmp_path)).computed_chunks == 2


def test_an_unwritable_cache_root_only_costs_the_caching(tiny_pair, tmp_path):
    root = tmp_path / "not-a-folder"
    root.write_text("a file where the cache root should be")
    cache = SweepCache(root)
    with pytest.warns(CacheWarning, match="cannot write") as caught:
        result = run_sweep(tiny_pair, _config(("a", "b")), cache)
    assert result.computed_chunks == 4
    assert len([w for w in caught if issubclass(w.category, CacheWarning)]) == 1  # once


# ------------------------------------------------------------------------ prompt files


def test_deeply_nested_jsonl_is_a_clear_error():
    with pytest.raises(ValueError, match="line 2: the JSON is nested too deeply"):
        parse_prompt_file("deep.jsonl", b'"fine"\n' + b"[" * 100_000 + b"\n")
    with pytest.raises(ValueError, match="line 1: the JSON is nested too deeply"):
        parse_prompt_file("deep.jsonl", b'{"prompt": ' + b'{"a": ' * 50_000 + b"1")


def test_a_lone_surrogate_is_a_clear_error():
    for line in (b'"x\\ud800y"', b'{"prompt": "ok \\udfff"}'):
        with pytest.raises(ValueError, match="line 1: the prompt is not valid Unicode"):
            parse_prompt_file("s.jsonl", line)
    assert parse_prompt_file("ok.jsonl", b'"\\ud83c\\udf35"') == ["\U0001f335"]  # a real pair


def test_a_huge_number_is_a_clear_error():
    with pytest.raises(ValueError, match="line 1"):
        parse_prompt_file("n.jsonl", b"1" * 10_000)


_ALPHABET = [*b'[]{}",:\\u0123456789abcdefxyz \n\r\t', 0x00, 0x80, 0xC3, 0xED, 0xFF]
_PIECES = [b'"prompt"', b"\\ud800", b"\\udc00", b"\\u0000", b"[" * 3000, b"{", b"null", b"\\n"]


def _random_text(rng: random.Random) -> str:
    # Mostly printable, with some of everything: controls, lone surrogates, astral characters.
    pools = [(0x20, 0x7E), (0x00, 0x1F), (0xA0, 0x2FFF), (0xD800, 0xDFFF), (0x1F300, 0x1F6FF)]
    weights = [70, 5, 15, 3, 7]
    out = []
    for _ in range(rng.randrange(0, 30)):
        lo, hi = rng.choices(pools, weights)[0]
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def _prompt_file(rng: random.Random, name: str) -> bytes:
    """A prompt file that is mostly well formed, sometimes with a byte flipped."""
    lines = []
    for _ in range(rng.randrange(1, 6)):
        text = _random_text(rng)
        if name.lower().endswith(".jsonl"):
            obj = {"prompt": text} if rng.random() < 0.5 else text
            line = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
            lines.append(line.encode("utf-8", "replace"))
        else:
            lines.append(text.encode("utf-8", "replace"))
    data = bytearray(b"\n".join(lines))
    if data and rng.random() < 0.3:
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def _fuzz_case(rng: random.Random) -> tuple[str, bytes]:
    name = rng.choices(["f.jsonl", "f.txt", "f.JSONL", "f.csv", "f"], [45, 40, 5, 5, 5])[0]
    kind = rng.random()
    if kind < 0.5 and name != "f":
        data = _prompt_file(rng, name)
    elif kind < 0.65:
        data = rng.randbytes(rng.randrange(0, 200))
    elif kind < 0.85:
        data = bytes(rng.choice(_ALPHABET) for _ in range(rng.randrange(0, 120)))
    else:
        parts = [rng.choice(_PIECES) if rng.random() < 0.4 else rng.randbytes(3) for _ in range(8)]
        data = b'{"prompt": "' + b"".join(parts) + rng.choice([b'"}', b'"', b""])
    return name, data


def test_fuzz_prompt_files_end_in_prompts_or_a_value_error():
    rng = random.Random(15)
    outcomes = {"prompts": 0, "error": 0}
    for _ in range(12_000):
        name, data = _fuzz_case(rng)
        try:
            prompts = parse_prompt_file(name, data)
        except ValueError:
            outcomes["error"] += 1
            continue
        assert prompts and all(isinstance(p, str) and p.strip() for p in prompts)
        for p in prompts:
            p.encode("utf-8")  # every prompt can reach a tokenizer
            assert "\x00" not in p
        outcomes["prompts"] += 1
    assert outcomes["prompts"] > 500 and outcomes["error"] > 500


def test_an_integer_parameter_refuses_a_fraction():
    name, param = next(
        (n, p) for n, cls in RULES.items() for p in cls.params_spec if p.integer and cls.swept()
    )
    with pytest.raises(ValueError, match="whole number"):
        parse_grid(name, "2.7")
    with pytest.raises(ValueError, match="whole number"):
        settings_from_grids({name: [2.7]})
    assert settings_from_grids({name: [3.0]})[0].params == ((param.name, 3),)


# ------------------------------------------------------------------------ traces


@pytest.fixture(scope="module")
def trace_dict(tiny_pair) -> dict:
    from cactus_core.engine.decoding.decoder import SpeculativeDecoder
    from cactus_core.maths.rules import make_rule

    dec = SpeculativeDecoder(tiny_pair, make_rule("cactus", delta=1.0), k=3, temperature=1.0)
    return dec.generate("tell me", max_new_tokens=8, seed=0).trace.to_dict()


def _broken(trace_dict: dict, path: list, value) -> dict:
    data = json.loads(json.dumps(trace_dict))
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (["rounds"], {"a": 1}, "'rounds' must be a list"),
        (["rounds", 0], [1, 2], "rounds[0] must be an object"),
        (["rounds", 0, "index"], "3", "rounds[0].index must be an integer"),
        (["rounds", 0, "emitted_ids"], _DELETE, "rounds[0] has no 'emitted_ids'"),
        (["rounds", 0, "emitted_ids"], [-1], "rounds[0].emitted_ids holds a token id"),
        (["rounds", 0, "emitted_fates"], ["maybe"], "rounds[0].emitted_fates must be among"),
        (["rounds", 0, "draft_text"], [1], "rounds[0].draft_text must be a list of strs"),
        (["rounds", 0, "draft_text"], [], "draft_text must have one entry per node"),
        (["rounds", 0, "verdict"], _DELETE, "rounds[0].verdict is not a round's verdict"),
        (["rounds", 0, "verdict", "tokens"], [1, "x"], "verdict tokens must hold integers"),
        (["rounds", 0, "verdict", "emitted", -1], 10**6, "outside the vocabulary"),
        (["rounds", 0, "verdict", "fates"], ["maybe"], "verdict fates must be among"),
        (["rounds", 0, "truncated"], "no", "rounds[0].truncated must be true or false"),
        (["rounds", 0, "positions"], {}, "rounds[0].positions must be a list"),
        (["rounds", 0, "positions", 0, "q_probs"], "x", "positions[0].q_probs must be a list"),
        (["rounds", 0, "positions", 0, "q_ids"], [10**9], "positions[0].q_ids holds a token id"),
        (["rounds", 0, "positions", 0, "q_probs"], [0.5], "q_ids and q_probs differ in length"),
        (["meta"], [], "'meta' must be an object"),
        (["meta", "vocab_size"], 10**12, "meta.vocab_size must be an integer in"),
        (["meta", "vocab_size"], "259", "meta.vocab_size must be an integer in"),
        (["token_text"], {"x": "a"}, "token_text['x'] must map"),
    ],
)
def test_trace_schema_errors_name_the_field(trace_dict, path, value, field):
    text = json.dumps(_broken(trace_dict, path, value))
    with pytest.raises(ValueError, match="not a trace") as err:
        Trace.from_json(text)
    assert field in str(err.value)


def test_trace_vocab_size_is_bounded_before_allocating(trace_dict):
    data = _broken(trace_dict, ["meta", "vocab_size"], MAX_VOCAB + 1)
    with pytest.raises(ValueError, match="vocab_size"):
        Trace.from_dict(data)
    trace = Trace.from_dict(json.loads(json.dumps(trace_dict)))
    trace.meta["vocab_size"] = 10**12  # edited after loading: replay checks it again
    with pytest.raises(ValueError, match="vocab_size"):
        reverify(trace, "cactus")


def test_a_round_whose_rows_do_not_fit_its_tree_is_refused(trace_dict):
    data = json.loads(json.dumps(trace_dict))
    rnd = next(r for r in data["rounds"] if r["verdict"]["tokens"])
    rnd["positions"] = rnd["positions"][:-1]
    with pytest.raises(ValueError, match="one position per row"):
        Trace.from_dict(data)
    data = json.loads(json.dumps(trace_dict))
    for pos in data["rounds"][0]["positions"]:
        pos["replay_q_ids"], pos["replay_q_probs"] = [], []
    with pytest.raises(ValueError, match="replay rows"):
        reverify(Trace.from_dict(data), "cactus")
    data = _broken(trace_dict, ["meta", "rule_params"], "x")
    with pytest.raises(ValueError, match="rule_params"):
        Trace.from_dict(data).rule  # noqa: B018


def test_a_string_is_read_as_a_path_only_if_that_file_exists(trace_dict, tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace_dict))
    assert Trace.from_json(str(path)).rounds and Trace.from_json(path).rounds
    assert Trace.from_file(path).rounds and Trace.from_text(json.dumps(trace_dict)).rounds
    monkeypatch.chdir(tmp_path)
    for text in ("t.json.missing", "/etc/definitely-missing", "", "x" * 10_000, "[1, 2]"):
        with pytest.raises(ValueError, match="not a trace"):
            Trace.from_json(text)
    with pytest.raises(ValueError, match="not a trace"):
        Trace.from_text("t.json")  # uploads never name a file, even one that exists
    with pytest.raises(ValueError, match="not a trace"):
        Trace.from_text("[" * 100_000)
