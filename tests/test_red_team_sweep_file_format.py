"""One sweep-file format, opened wherever it is saved: the Frontier page's download, the CLI's
`sweep --export` and the opener agree (the same records, the same result once opened), the
CLI's table of results is named for what it is, and an opened file's provenance reads as
words, the pair by its models' names, every field cut short."""

from __future__ import annotations

import json

import pytest

from cactus_core.app.frontier.sweep_file import PAGE_COMMAND, page_sweep_file, sweep_file_in_words
from cactus_core.cli import main
from cactus_core.engine.loading.models import load_pair
from cactus_core.experiments.sweeps import file as sf
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import SweepConfig, settings_from_grids
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.maths.sampling import SamplingSettings


def test_the_pages_download_the_clis_export_and_the_opener_agree(tiny_pair_dirs, tmp_path, capsys):
    cache = tmp_path / "cache"
    export, table = tmp_path / "cli.json.gz", tmp_path / "table.json"
    args = ["sweep", "--verifier", str(tiny_pair_dirs[0]), "--draft", str(tiny_pair_dirs[1]),
            "--rules", "cactus", "--grid", "cactus=0,1", "--n-prompts", "2",
            "--max-new-tokens", "6", "--chunk-size", "1", "--cache-dir", str(cache),
            "--export", str(export), "--output", str(table)]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    cli = sf.load_sweep_file(export.read_bytes(), export.name)
    # the page's sweep of the same configuration on the same pair, read from the same cache
    pair = load_pair(verifier=str(tiny_pair_dirs[0]), draft=str(tiny_pair_dirs[1]))
    result = run_sweep(pair, cli.config, SweepCache(cache))
    assert result.computed_chunks == 0
    page = sf.load_sweep_file(page_sweep_file(result, "cpu"), "sweep.json")
    assert page.result.to_json() == cli.result.to_json() == result.to_json()
    assert page.pair == cli.pair == pair.identity
    body = json.loads(page_sweep_file(result, "cpu"))["body"]
    cli_body = json.loads(sf.gzip.decompress(export.read_bytes()))["body"]
    assert {k: v for k, v in body.items() if k != "provenance"} == {
        k: v for k, v in cli_body.items() if k != "provenance"
    }
    assert page.provenance["command"] == PAGE_COMMAND
    assert cli.provenance["command"].startswith("python -m cactus_core sweep ")
    with pytest.raises(sf.SweepFileError, match="table of results"):
        sf.load_sweep_file(table.read_bytes(), table.name)


@pytest.fixture(scope="module")
def opened(tiny_pair, tmp_path_factory):
    config = SweepConfig(
        prompts=("Write a haiku.", "What is 2 + 2?"),
        settings=tuple(settings_from_grids({"cactus": [0.0, 1.0]})),
        sampling=SamplingSettings(temperature=1.0, k=3, seed=2),
        max_new_tokens=6,
    )
    result = run_sweep(tiny_pair, config, SweepCache(tmp_path_factory.mktemp("c")))
    return result, sf.load_sweep_file(page_sweep_file(result, "cuda:0", "ray", 4))


def test_provenance_in_words(opened):
    _, file = opened
    words = sweep_file_in_words(file)
    assert words.startswith("2 settings × 2 prompts on cuda:0 (ray, 4 workers), made 20")
    assert f"with: {PAGE_COMMAND}." in words
    assert words.endswith(
        "Pair: verifier tiny-random-llama-2l-seed0, draft tiny-random-llama-2l-seed0-exit1, "
        "in float32."
    )
    assert "#" not in words and "|" not in words  # not the raw identity with its hashes


def test_every_field_is_cut_short(opened):
    result, _ = opened
    prov = sf.provenance("y" * 5000, "cpu\n" * 100, "local", 1)
    words = sweep_file_in_words(sf.load_sweep_file(sf.export_sweep(result, prov)))
    assert "y" * 199 + "…" in words and "y" * 200 not in words
    assert "\n" not in words and len(words) < 1000
