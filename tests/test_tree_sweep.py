"""Sweeps, sweep files and the tuner with draft trees (tiny pair with a tiny feature draft): a
tree sweep's points carry tokens per call and the exact emitted KL from the probe, equal to a
tree decode of each prompt alone; the tree is part of the cache key and of the sweep file; the
tuner's answer names the tree flags, and the CLI takes every tree setting."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import pytest

from cactus_core.cli import add_tree_args, tree_from_args
from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.loading.models import with_feature_draft
from cactus_core.experiments.sweeps import file as sf
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import Setting, SweepConfig
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.experiments.tuning.tune import tune
from cactus_core.maths.sampling import SamplingSettings

SHAPE = TreeSettings(nodes=6, depth=3, width=1, branch=2, root_branch=2)
PROMPTS = ("Tell me about cacti.", "Why is the sky blue?", "Name a colour.")


@pytest.fixture(scope="module")
def feature_pair(tiny_pair):
    return with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier))


@pytest.fixture(scope="module")
def config():
    return SweepConfig(
        prompts=PROMPTS,
        settings=(Setting.of("cactus", delta=0.5), Setting.of("sps")),
        sampling=SamplingSettings(temperature=1.0, seed=4),
        max_new_tokens=10,
        chunk_size=2,
        tree=SHAPE,
    )


@pytest.fixture(scope="module")
def swept(feature_pair, config, tmp_path_factory):
    return run_sweep(feature_pair, config, SweepCache(tmp_path_factory.mktemp("tree")))


def test_a_tree_sweep_point_is_each_prompt_decoded_with_the_tree(feature_pair, config, swept):
    res = swept.get(Setting.of("cactus", delta=0.5))
    dec = SpeculativeDecoder(
        feature_pair, res.setting.make_rule(), sampling=config.sampling, tree=SHAPE
    )
    for i, rec in enumerate(res.prompts):
        alone = dec.generate(PROMPTS[i], max_new_tokens=10, seed=config.sampling.seed + i)
        assert rec.tokens == alone.stats.new_tokens
        assert rec.verifier_calls == alone.stats.verifier_calls
        assert rec.emitted_kl_sum == pytest.approx(alone.stats.kl_sum, rel=1e-4, abs=1e-7)
    row = swept.get(Setting.of("sps")).summary()
    assert row["emitted_kl"] == 0.0
    cactus = res.summary()
    assert cactus["tokens_per_call"] > 1 and cactus["emitted_kl"] > 0
    assert math.isfinite(cactus["efficiency"]) and cactus["position_reached"][0] > 0


def test_the_tree_is_in_the_cache_key_and_the_sweep_file(config, swept):
    chain = replace(config, tree=None)
    assert "tree" not in chain.decoding() and config.decoding()["tree"] == SHAPE.to_dict()
    opened = sf.load_sweep_file(sf.export_sweep(swept, sf.provenance("c", "cpu", "local", 1)))
    assert opened.config.tree == SHAPE
    before, after = (
        r.get(Setting.of("cactus", delta=0.5)).summary() for r in (swept, opened.result)
    )
    assert after["tokens_per_call"] == before["tokens_per_call"]
    assert after["emitted_kl"] == before["emitted_kl"]


def test_the_tuner_runs_trees_and_names_the_tree_flags(feature_pair, config, swept, tmp_path):
    cfg = replace(config, settings=(Setting.of("cactus", delta=0.5),))
    answer = tune(feature_pair, cfg, 0.05, sweep=swept, cache=SweepCache(tmp_path), max_runs=2)
    assert answer.value is not None, answer.message
    assert answer.cli_flags().endswith(" ".join(SHAPE.cli_flags()))
    assert answer.sampling["tree"] == SHAPE.to_dict()


def test_the_cli_takes_every_tree_setting():
    parser = argparse.ArgumentParser()
    add_tree_args(parser, "trees")
    args = parser.parse_args(" ".join(SHAPE.cli_flags()).split())
    assert tree_from_args(args) == SHAPE
