"""Portable sweep files and per-task tuning on the tiny pair: export then open gives the same
frontier and tuner answers; 10,000 damaged files each give one SweepFileError; task tags from
prompt files and the built-in prompts; the per-task split and its answers."""

from __future__ import annotations

import copy
import gzip
import json
import math
import random
import zlib
from dataclasses import replace

import pytest

from cactus_core.app.frontier.sweep_file import sweep_file_in_words
from cactus_core.engine.loading.prompts import builtin_prompts, builtin_tasks
from cactus_core.experiments.sweeps import file as sf
from cactus_core.experiments.sweeps.cache import SweepCache, canonical_json
from cactus_core.experiments.sweeps.config import (
    UNTAGGED,
    Setting,
    SweepConfig,
    parse_tagged_prompt_file,
    settings_from_grids,
)
from cactus_core.experiments.sweeps.reference import load_reference
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.experiments.tuning.tasks import (
    ALL_TASKS,
    answers_by_task,
    split_by_task,
    spread,
    task_part,
)
from cactus_core.maths.sampling import SamplingSettings

PROMPTS = (
    "Write a haiku about rain.",
    "What is 2 + 2?",
    "Sort a list in Python.",
    "What is 7 times 6?",
    "Write a limerick.",
    "Reverse a string in Python.",
)
TASKS = ("writing", "maths", "code", "maths", "writing", "code")


def tagged_config(**kw) -> SweepConfig:
    return SweepConfig(
        prompts=PROMPTS,
        tasks=TASKS,
        settings=tuple(settings_from_grids({"cactus": [0.0, 0.3, 1.0, 3.0]})),
        sampling=SamplingSettings(temperature=1.0, k=3, seed=1),
        max_new_tokens=8,
        chunk_size=2,
        **kw,
    )


@pytest.fixture(scope="module")
def swept(tiny_pair, tmp_path_factory):
    return run_sweep(tiny_pair, tagged_config(), SweepCache(tmp_path_factory.mktemp("c")))


@pytest.fixture(scope="module")
def exported(swept) -> bytes:
    prov = sf.provenance("python -m cactus_core sweep --export x.json", "cpu", "local", 1)
    return sf.export_sweep(swept, prov)


def test_export_then_open_gives_the_same_frontier_and_tuner_answers(swept, exported):
    for data in (exported, gzip.compress(exported)):
        opened = sf.load_sweep_file(data, "x.json")
        assert opened.result.to_json() == swept.to_json()  # every row, the limit, the fronts
        assert opened.config == swept.config and opened.pair == swept.model_identity
        assert opened.provenance["backend"] == "local" and opened.code["numbers"] >= 1
        for budget in (0.0, 0.01, 0.05, 0.3):
            assert answers_by_task(opened.result, "cactus", budget) == answers_by_task(
                swept, "cactus", budget
            )
    words = sweep_file_in_words(opened)
    assert "6 prompts" in words and "cpu" in words


def test_the_task_split_keeps_every_prompt_once_and_its_numbers(swept):
    parts = split_by_task(swept)
    assert list(parts) == ["writing", "maths", "code"]
    setting = "cactus:delta=1"
    every = sorted(r.index for part in parts.values() for r in part.get(setting).prompts)
    assert every == list(range(len(PROMPTS)))
    maths = parts["maths"].get(setting)
    assert [r.index for r in maths.prompts] == [1, 3]
    whole = {r.index: r for r in swept.get(setting).prompts}
    assert maths.estimate("emitted_kl").mean == pytest.approx(
        (whole[1].emitted_kl + whole[3].emitted_kl) / 2
    )
    # chunks mix tasks here: the task gets the chunk's throughput and no limit sums
    chunk = swept.get(setting).chunks[0]
    assert maths.chunks[0].tokens_per_s == pytest.approx(chunk.tokens_per_s)
    assert maths.limit_sums is None
    with pytest.raises(ValueError, match="tasks: writing, maths, code"):
        task_part(swept, "chat")


def test_answers_per_task_have_intervals_and_differ_from_all_prompts(swept):
    answers = answers_by_task(swept, "cactus", 0.05)
    assert [a.task for a in answers] == [ALL_TASKS, "writing", "maths", "code"]
    assert [a.prompts for a in answers] == [6, 2, 2, 2]
    for a in answers:
        assert a.param == "delta" and a.low <= a.value <= a.high
        assert 0.0 <= a.value <= 3.0 and math.isfinite(a.tokens_per_call)
    # two prompts a task are too few for an answer of its own: the table says so, and no
    # task's answer is set against the others'
    assert [a.enough for a in answers] == [True, False, False, False]
    assert math.isnan(spread(answers))


def test_untagged_sweeps_answer_for_all_prompts_only(tiny_pair, tmp_path):
    cfg = SweepConfig(prompts=PROMPTS[:2], settings=tagged_config().settings, max_new_tokens=4)
    result = run_sweep(tiny_pair, cfg, SweepCache(tmp_path))
    assert cfg.task_names == [] and split_by_task(result) == {}
    assert [a.task for a in answers_by_task(result, "cactus", 0.1)] == [ALL_TASKS]


def test_prompt_files_carry_tasks():
    data = b'{"prompt": "a", "task": "code"}\n"b"\n{"prompt": "c", "task": " maths "}\n'
    assert parse_tagged_prompt_file("p.jsonl", data) == (["a", "b", "c"], ["code", "", "maths"])
    assert parse_tagged_prompt_file("p.txt", b"a\nb\n") == (["a", "b"], ["", ""])
    for bad, match in (
        (b'{"prompt": "a", "task": 3}', "must be a string"),
        (b'{"prompt": "a", "task": "\\u0000x"}', "a task is a name"),
        (b'{"prompt": "a", "task": "' + b"x" * 41 + b'"}', "a task is a name"),
        (b'{"prompt": "a", "task": "untagged"}', "kept for prompts without"),
    ):
        with pytest.raises(ValueError, match=match):
            parse_tagged_prompt_file("p.jsonl", bad)
    cfg = SweepConfig(prompts=("a", "b"), tasks=("code", ""), settings=tagged_config().settings)
    assert cfg.task_names == ["code", UNTAGGED]
    with pytest.raises(ValueError, match="2 task tags for 1 prompts"):
        SweepConfig(prompts=("a",), tasks=("x", "y"), settings=cfg.settings)


def test_builtin_prompts_and_the_reference_carry_task_tags():
    tasks = builtin_tasks()
    assert len(tasks) == len(builtin_prompts())
    assert set(tasks) == {"chat", "code", "maths", "writing"}
    assert min(tasks.count(t) for t in set(tasks)) >= 3
    ref = load_reference()
    assert ref.tasks() == tasks[: int(ref.provenance["prompts"])]


# ------------------------------------------------------------------------- damaged files


def _other_kind(value):
    if isinstance(value, bool) or value is None:
        return [1]
    if isinstance(value, int | float):
        return "x"
    if isinstance(value, str):
        return 12345
    if isinstance(value, list):
        return {"a": 1}
    return [1]


def _random_path(body: dict, rng: random.Random) -> tuple:
    """A node reached by descending from the root, stopping with probability 0.3 at each level:
    every level of the structure gets hit, not mostly the long lists of numbers."""
    path: tuple = ()
    node = body
    while isinstance(node, dict | list) and node and (not path or rng.random() > 0.3):
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path, node = (*path, key), node[key]
    return path


def _mutate_structure(body_text: str, rng: random.Random) -> dict:
    """A copy of the body with one change that leaves it a wrong-shape sweep: a value of another
    JSON kind, a field removed or added, a list element dropped or repeated."""
    body = json.loads(body_text)
    while True:
        path = _random_path(body, rng)
        if not path:
            continue
        parent = body
        for key in path[:-1]:
            parent = parent[key]
        value = parent[path[-1]]
        kind = rng.randrange(4)
        if kind == 0:
            parent[path[-1]] = _other_kind(value)
        elif kind == 1 and isinstance(parent, dict):
            del parent[path[-1]]
        elif kind == 2 and isinstance(value, dict):
            value["unexpected"] = 1
        elif kind == 3 and isinstance(value, list) and value:
            i = rng.randrange(len(value))
            if rng.random() < 0.5:
                del value[i]
            else:
                value.insert(i, copy.deepcopy(value[i]))
        else:
            continue
        return body


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    kind = rng.randrange(4)
    i = rng.randrange(len(b))
    if kind == 0:
        b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del b[i : i + rng.randrange(1, 64)]
    elif kind == 2:
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
    else:
        b = b[:i]
    return bytes(b)


def _unzips_to(data: bytes, exported: bytes) -> bool:
    out = zlib.decompressobj(wbits=31)
    try:
        return out.decompress(data) == exported and out.eof and not out.unused_data
    except zlib.error:
        return False


@pytest.fixture(scope="module")
def small_file(tiny_pair, tmp_path_factory) -> bytes:
    """Two prompts, one setting, with the limit: every field a file has, in a few kB."""
    config = replace(tagged_config(), prompts=PROMPTS[:2], tasks=TASKS[:2],
                     settings=(Setting.of("cactus", delta=1.0),))  # fmt: skip
    result = run_sweep(tiny_pair, config, SweepCache(tmp_path_factory.mktemp("s")))
    return sf.export_sweep(result, sf.provenance("c", "cpu", "local", 1))


def test_ten_thousand_damaged_files_each_give_one_clear_error(small_file):
    rng = random.Random(0)
    exported = small_file
    body_text = canonical_json(json.loads(exported)["body"])
    assert sf.frame(body_text) == exported
    zipped = gzip.compress(exported, mtime=0)
    messages = set()
    for n in range(10_000):
        if n % 2 == 0:
            # a well-formed file of the wrong shape: the hash matches what it holds
            data = sf.frame(canonical_json(_mutate_structure(body_text, rng)))
        else:
            data = _mutate_bytes(zipped if n % 4 == 1 else exported, rng)
            if n % 4 == 1 and _unzips_to(data, exported):
                continue  # a flipped bit deflate ignores: the same file, not a damaged one
        with pytest.raises(sf.SweepFileError) as err:
            sf.load_sweep_file(data, "bad.json")
        text = str(err.value)
        assert text.startswith("bad.json: ") and "\n" not in text and len(text) < 400, text
        messages.add(text.split(" ")[1])
    assert len(messages) > 10  # the errors say what is wrong, not one generic sentence


def test_oversized_and_foreign_files_are_refused(exported, monkeypatch):
    for data, match in (
        (b"", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"format": "trace", "version": 1, "sha256": "", "body": {}}', "not a Cactus Lab"),
        (b'{"format": "trace"}', "lacks body, sha256, version"),
        (exported.replace(b'"version":1', b'"version":2'), "version 2"),
        (json.dumps(json.loads(exported), indent=1).encode(), "re-formatted"),
        (b"\x1f\x8b" + b"\x00" * 20, "damaged gzip"),
        (gzip.compress(exported)[:-30], "cut short|damaged gzip"),
    ):
        with pytest.raises(sf.SweepFileError, match=match):
            sf.load_sweep_file(data)
    monkeypatch.setattr(sf, "MAX_FILE_BYTES", len(exported) - 1)
    with pytest.raises(sf.SweepFileError, match="over the"):
        sf.load_sweep_file(exported)
    with pytest.raises(sf.SweepFileError, match="once unzipped"):
        sf.load_sweep_file(gzip.compress(exported))
