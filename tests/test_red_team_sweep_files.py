"""Hostile sweep files cost what their size allows, no more: a few kB claiming a million chunks
is refused before a chunk is planned, a gzip that unpacks into millions of `{}` before the JSON
parser builds one, and a public server reads at most `PUBLIC_MAX_FILE_BYTES`. Each check counts
the work done (keys built, parser calls, settings read) or bounds the memory (tracemalloc, with
room to spare); none times anything."""

from __future__ import annotations

import json
import tracemalloc
from types import SimpleNamespace

import pytest
from hostile_sweep_files import bomb, empty_body, empty_sweep
from test_sweep_file_page import tagged_sweep

from cactus_core.engine.loading.deployment import PUBLIC_ENV
from cactus_core.experiments.sweeps import file as sf
from cactus_core.experiments.sweeps import plan as sweep_plan
from cactus_core.experiments.sweeps.cache import SweepCache, canonical_json
from cactus_core.experiments.sweeps.config import Setting, SweepConfig, settings_from_grids
from cactus_core.experiments.sweeps.file import frame
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.maths.sampling import SamplingSettings

MB = 2**20


class TooMuchWork(Exception):
    """Raised by the counters below once a loader does far more than the file warrants, so
    that the old loader fails in a second rather than after a minute and 1.6 GB."""


@pytest.fixture
def keys_built(monkeypatch) -> list[int]:
    """How many chunk keys (`_chunk_payload`) the loader builds; over 5,000 stops it."""
    built = [0]
    real = sweep_plan._chunk_payload

    def counting(*args):
        built[0] += 1
        if built[0] > 5000:
            raise TooMuchWork(f"{built[0]} chunk keys built")
        return real(*args)

    monkeypatch.setattr(sweep_plan, "_chunk_payload", counting)
    return built


def test_a_few_kb_claiming_a_million_chunks_is_refused_before_planning(keys_built):
    data = empty_sweep(1000, 1000)
    assert len(data) < 48_000
    tracemalloc.start()
    try:
        with pytest.raises(sf.SweepFileError, match="0 chunk records where the configuration"):
            sf.load_sweep_file(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert keys_built[0] == 0
    assert peak < 16 * MB, f"{peak / MB:.0f} MB"


def test_more_settings_than_a_file_may_hold_are_refused_before_any_is_read(keys_built, monkeypatch):
    data = empty_sweep(1000, 4000)  # about 110 kB
    read = []
    monkeypatch.setattr(sf.Setting, "from_id", lambda text: read.append(text) or Setting(text))
    with pytest.raises(sf.SweepFileError, match="more than 1,000 settings"):
        sf.load_sweep_file(data)
    assert read == [] and keys_built[0] == 0


@pytest.fixture(scope="module")
def one_prompt(tiny_pair, tmp_path_factory) -> dict:
    """The body of a real sweep of one prompt and one setting, in chunks of one."""
    config = SweepConfig(
        prompts=("Write a haiku.",),
        settings=(Setting.of("cactus", delta=1.0),),
        sampling=SamplingSettings(temperature=1.0, k=3, seed=2),
        max_new_tokens=6,
        chunk_size=1,
    )
    result = run_sweep(tiny_pair, config, SweepCache(tmp_path_factory.mktemp("one")))
    return json.loads(sf.export_sweep(result, sf.provenance("c", "cpu", "local", 1)))["body"]


def many_prompts(body: dict, n: int) -> dict:
    """The one-prompt sweep as n prompts (the same record repeated, renumbered): a well-formed
    file of 2n chunks."""
    out = json.loads(json.dumps(body))
    out["prompts"] = out["prompts"] * n
    base, cactus = body["chunks"]
    out["chunks"] = []
    for i in range(n):
        for entry in (base, cactus):
            entry = json.loads(json.dumps(entry))
            entry["chunk"] = i
            entry["record"]["prompts"][0]["index"] = i
            out["chunks"].append(entry)
    return out


def test_chunk_keys_are_built_only_for_the_records_read(one_prompt, keys_built):
    body = many_prompts(one_prompt, 400)
    opened = sf.load_sweep_file(sf.frame(canonical_json(body)))
    assert len(opened.config.prompts) == 400 and keys_built[0] == 800  # one per record
    keys_built[0] = 0
    body["chunks"][2]["setting"] = "cactus:delta=3"  # the third record is not what it says
    with pytest.raises(sf.SweepFileError, match="chunk record 3 is 'cactus:delta=3'"):
        sf.load_sweep_file(sf.frame(canonical_json(body)))
    assert keys_built[0] == 3  # not 800: the plan stopped where the records did


@pytest.fixture
def parser_calls(monkeypatch) -> list[int]:
    """Calls of the JSON parser by the loader: a bomb must be refused before the first."""
    calls = [0]

    def loads(*args, **kwargs):
        calls[0] += 1
        raise TooMuchWork("the JSON parser ran on a bomb")

    monkeypatch.setattr(sf, "json", SimpleNamespace(loads=loads, JSONDecodeError=ValueError))
    return calls


@pytest.mark.parametrize("unit", [b"{},", b"[],", b"0,", b"1.5,"])
def test_a_json_bomb_is_refused_before_the_parser_builds_anything(unit, parser_calls):
    data = bomb(sf.MAX_FILE_BYTES - 16, unit)
    assert len(data) < 200_000
    tracemalloc.start()
    try:
        with pytest.raises(sf.SweepFileError, match="are more than a sweep file of 64 MB holds"):
            sf.load_sweep_file(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert parser_calls[0] == 0
    # the unzipped bytes and no more (the parser once took 1.95 GB of them)
    assert peak < 2.5 * sf.MAX_FILE_BYTES, f"{peak / MB:.0f} MB"


def test_a_public_server_unpacks_at_most_its_own_limit(monkeypatch, parser_calls):
    monkeypatch.setenv(PUBLIC_ENV, "1")
    assert sf.max_file_bytes() == sf.PUBLIC_MAX_FILE_BYTES < sf.MAX_FILE_BYTES
    data = bomb(sf.MAX_FILE_BYTES - 16)
    tracemalloc.start()
    try:
        with pytest.raises(sf.SweepFileError, match="over the 16 MB limit once unzipped"):
            sf.load_sweep_file(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert parser_calls[0] == 0 and peak < 2.5 * sf.PUBLIC_MAX_FILE_BYTES, f"{peak / MB:.0f} MB"


def test_the_labs_densest_file_at_the_size_limit_still_opens(tiny_pair, tmp_path, monkeypatch):
    """The counts leave room for real files: a sweep in chunks of one with the limit and its
    own estimate (the most objects per byte the lab writes) opens with the limit set to its
    exact size."""
    config = SweepConfig(
        prompts=tuple(f"Prompt number {i}." for i in range(6)),
        settings=tuple(settings_from_grids({"cactus": [0.0, 1.0], "sps": []})),
        sampling=SamplingSettings(temperature=1.0, k=3, seed=1),
        max_new_tokens=6,
        chunk_size=1,
        own_estimate=True,
    )
    result = run_sweep(tiny_pair, config, SweepCache(tmp_path))
    data = sf.export_sweep(result, sf.provenance("c", "cpu", "local", 1))
    monkeypatch.setattr(sf, "MAX_FILE_BYTES", len(data))
    assert sf.load_sweep_file(data).result.to_json() == result.to_json()
    monkeypatch.setattr(sf, "MAX_FILE_BYTES", len(data) - 1)
    with pytest.raises(sf.SweepFileError, match="over the"):
        sf.load_sweep_file(data)


def test_a_table_of_results_is_named_for_what_it_is(tiny_pair, tmp_path):
    result = tagged_sweep(tiny_pair, tmp_path)
    with pytest.raises(sf.SweepFileError, match=r"table of results .* not a sweep file"):
        sf.load_sweep_file(result.to_json().encode(), "frontier.json")


def test_answers_of_thousands_of_forms_are_refused_and_checks_compile_once():
    """A valid-looking file whose answer lists 20,000 forms (word=w0|…|w19999) took 42-67 s to
    open in public mode and 17-24 s a rerun: one regex compiled per form, prompt, setting and
    rerun. Forms are capped where the file is read, and a spec's test is compiled once."""
    from cactus_core.experiments.quality import task_score
    from cactus_core.experiments.sweeps.file import SweepFileError, load_sweep_file

    body = empty_body(2, 1)
    body["prompts"] = [
        {"text": "a", "task": "", "answer": "word=" + "|".join(f"w{i}" for i in range(20_000))},
        {"text": "b", "task": "", "answer": "number=3"},
    ]
    with pytest.raises(SweepFileError, match="at most 32 accepted forms"):
        load_sweep_file(frame(canonical_json(body)))
    body["prompts"][0]["answer"] = "word=" + "x" * 101
    with pytest.raises(SweepFileError, match="at most 100 characters"):
        load_sweep_file(frame(canonical_json(body)))
    task_score._checker.cache_clear()
    spec = "word=" + "|".join(f"w{i}" for i in range(task_score.MAX_FORMS))
    texts = [f"the answer is w{i % 40}." for i in range(200)]
    judged = task_score.task_score([spec] * len(texts), texts)
    assert judged.correct == sum(i % 40 < task_score.MAX_FORMS for i in range(200))
    assert task_score._checker.cache_info().misses == 1  # parsed and compiled once
