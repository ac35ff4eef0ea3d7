"""Sweeps on the tiny random pair: every metric, the cache, resuming, pairing, the exact
emitted KL, the limit and the tuner."""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import replace

import pytest

from cactus_core.engine.decoding.decoder import SpeculativeDecoder
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import (
    BASELINE,
    Setting,
    SweepConfig,
    prompt_seed,
    settings_from_grids,
)
from cactus_core.experiments.sweeps.run import METRICS, SweepCancelled, run_sweep
from cactus_core.experiments.tuning.tune import tune

PROMPTS = (
    "Tell me about cacti.",
    "Explain how rainbows form.",
    "Write a haiku about rain.",
    "What is 2 + 2?",
    "Name three colours.",
)
GRIDS = {"sps": [], "cactus": [0.0, 0.3, 1.0], "interp": [0.5], "optimal": [0.2], "tas": [0.05]}


def _config(**kw) -> SweepConfig:
    base = SweepConfig(
        prompts=PROMPTS,
        settings=tuple(settings_from_grids(GRIDS)),
        max_new_tokens=12,
        chunk_size=2,
    )
    return replace(base, **kw)


@contextmanager
def count_forwards(pair):
    """Count every forward of both models (the test's proof that nothing ran). The hooks sit on
    the input embeddings, which every path runs, the decoder's cached steps included."""
    calls = {"n": 0}
    hooks = [
        m.get_input_embeddings().register_forward_pre_hook(
            lambda *_: calls.__setitem__("n", calls["n"] + 1)
        )
        for m in (pair.verifier, pair.draft)
    ]
    try:
        yield calls
    finally:
        for h in hooks:
            h.remove()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("sweep-cache")


@pytest.fixture(scope="module")
def swept(tiny_pair, cache_dir):
    return run_sweep(tiny_pair, _config(), SweepCache(cache_dir))


def test_every_setting_has_every_metric(swept):
    assert [s.setting.id for s in swept.settings] == [
        "sps",
        "cactus:delta=0",
        "cactus:delta=0.3",
        "cactus:delta=1",
        "interp:alpha=0.5",
        "optimal:budget=0.2",
        "tas:epsilon=0.05",
    ]
    for s in swept.settings:
        for metric in METRICS:
            e = s.estimate(metric)
            assert math.isfinite(e.mean), (s.setting.id, metric)
            assert e.lo <= e.mean <= e.hi
            assert e.n == (3 if metric == "tokens_per_s" else 5)  # chunks, prompts
        assert 1.0 <= s.estimate("tokens_per_call").mean <= 5.0  # at most k + 1
        assert 0.0 <= s.estimate("acceptance_rate").mean <= 1.0
        assert s.summary()["scored_positions"] > 0
        assert 0 < s.efficiency <= 1.0 + 1e-6
    base = swept.baseline
    assert base.estimate("tokens_per_call").mean == 1.0
    assert base.estimate("emitted_kl").mean == 0.0
    assert math.isfinite(base.estimate("nll").mean)
    # lossless rules emit exactly q: zero KL, at any delta = 0
    for sid in ("sps", "cactus:delta=0"):
        assert swept.get(sid).estimate("emitted_kl").mean == pytest.approx(0.0, abs=1e-6)
    assert swept.get("cactus:delta=1").estimate("emitted_kl").mean > 0.01


def test_rerun_is_served_from_the_cache_without_any_model_call(tiny_pair, swept, cache_dir):
    with count_forwards(tiny_pair) as calls:
        again = run_sweep(tiny_pair, _config(), SweepCache(cache_dir))
    assert calls["n"] == 0
    assert again.computed_chunks == 0
    assert again.to_json() == swept.to_json()


def test_an_interrupted_sweep_resumes(tiny_pair, swept, tmp_path):
    config = _config(settings=tuple(settings_from_grids({"cactus": [0.0, 1.0]})))
    cache = SweepCache(tmp_path)
    done = []
    with pytest.raises(SweepCancelled):
        run_sweep(
            tiny_pair,
            config,
            cache,
            on_progress=lambda p: done.append(p),
            should_stop=lambda: len(done) >= 4,
        )
    assert len(done) == 4 and not any(p.cached for p in done)
    resumed_progress = []
    resumed = run_sweep(tiny_pair, config, cache, on_progress=resumed_progress.append)
    total = len(config.chunks()) * 3  # baseline + 2 settings
    assert resumed.computed_chunks == total - 4
    assert sum(p.cached for p in resumed_progress) == 4
    assert resumed_progress[-1].done == resumed_progress[-1].total == total
    # same numbers as the uninterrupted sweep (same prompts, seeds and coins)
    for sid in ("cactus:delta=0", "cactus:delta=1"):
        a, b = resumed.get(sid), swept.get(sid)
        assert [r.text for r in a.prompts] == [r.text for r in b.prompts]
        assert a.estimate("emitted_kl").mean == pytest.approx(b.estimate("emitted_kl").mean)


def test_settings_are_paired_same_prompt_same_seed(tiny_pair, swept, tmp_path):
    # cactus at delta = 0 verifies against q exactly like sps; with common random numbers
    # both see the same coins, so they must write the same text for every prompt.
    sps, zero = swept.get("sps"), swept.get("cactus:delta=0")
    assert [r.text for r in sps.prompts] == [r.text for r in zero.prompts]
    assert [r.index for r in sps.prompts] == list(range(len(PROMPTS)))
    # and prompt i's coins do not depend on how the prompts were chunked
    one_by_one = run_sweep(
        tiny_pair,
        _config(settings=(Setting.of("cactus", delta=0.3),), chunk_size=1),
        SweepCache(tmp_path),
    )
    assert [r.text for r in one_by_one.settings[0].prompts] == [
        r.text for r in swept.get("cactus:delta=0.3").prompts
    ]


def test_emitted_kl_is_the_mean_of_the_traces_per_position_kl(tiny_pair, swept):
    setting = swept.get("cactus:delta=1")
    config = _config()
    for idx in config.chunks():
        dec = SpeculativeDecoder(tiny_pair, setting.setting.make_rule(), k=4, temperature=0.7)
        outs = dec.generate(
            [PROMPTS[i] for i in idx], max_new_tokens=12, seed=prompt_seed(0, idx[0])
        )
        for i, out in zip(idx, outs, strict=True):
            per_token = [
                rnd.positions[j].kl_pi_q if j < rnd.k else 0.0  # the bonus token comes from q
                for rnd in out.trace.rounds
                for j in range(len(rnd.emitted_ids))
            ]
            rec = next(r for r in setting.prompts if r.index == i)
            assert rec.text == out.text
            assert rec.emitted_kl == pytest.approx(sum(per_token) / len(per_token), rel=1e-5)


def test_the_limit_is_never_below_a_measured_setting(swept):
    for s in swept.settings:
        assert s.expected_acceptance <= s.limit_acceptance + 1e-6, s.setting.id
    # optimal verifies against the per-position optimum, so it sits close to the one-price
    # limit; sps at KL 0 is exactly the limit's start, sum min(p, q).
    assert swept.get("optimal:budget=0.2").efficiency > 0.95
    assert swept.get("sps").efficiency == pytest.approx(1.0, abs=1e-6)
    curve = swept.pooled_limit()
    assert curve is not None and curve.count == sum(
        s.summary()["scored_positions"] for s in swept.settings
    )


def test_measured_acceptance_tracks_the_exact_expectation(swept):
    # The coins make the measured rate noisy; over all settings it must agree on average.
    diffs = [s.estimate("acceptance_rate").mean - s.expected_acceptance for s in swept.settings]
    assert abs(sum(diffs) / len(diffs)) < 0.1


def test_tuner_meets_the_budget_on_its_confirming_run(tiny_pair, swept, cache_dir):
    cache = SweepCache(cache_dir)
    budget = 0.5 * swept.get("cactus:delta=0.3").estimate("emitted_kl").mean
    result = tune(tiny_pair, _config(), budget, rule="cactus", sweep=swept, cache=cache)
    assert result.confirmed and result.status in ("met", "runs"), result.message
    assert 0.0 < result.value < 0.3
    # the answer is a run's, and the upper end of its KL interval fits
    assert result.chosen.source == "run" and result.measured_kl.hi <= budget
    assert (result.value, result.measured_kl.mean) in result.tries
    # the confirming run is an ordinary cached sweep of that one setting
    with count_forwards(tiny_pair) as calls:
        again = run_sweep(tiny_pair, _config(settings=(result.setting,)), cache)
    assert calls["n"] == 0
    assert again.settings[0].estimate("emitted_kl").mean == result.measured_kl.mean
    exported = json.loads(result.to_json())
    assert exported["rule"] == "cactus" and exported["delta"] == result.value
    assert f"--delta {result.value:.6g}" in result.cli_flags()
    assert "--k 4" in result.cli_flags() and "--temperature 0.7" in result.cli_flags()


def test_tuner_rejects_bad_input(tiny_pair, swept):
    with pytest.raises(ValueError, match="tuner works on"):
        tune(tiny_pair, _config(), 0.1, rule="tas", sweep=swept)
    with pytest.raises(ValueError, match="budget"):
        tune(tiny_pair, _config(), -0.1, sweep=swept)


def test_json_and_csv_exports(swept):
    body = json.loads(swept.to_json())
    assert body["model"] == swept.model_identity
    assert [r["setting"] for r in body["rows"]][:2] == [BASELINE, "sps"]
    assert body["rows"][0]["acceptance_rate"] is None  # undefined for verifier-only
    assert len(body["limit_curve"]["mean_kl"]) == len(body["limit_curve"]["mean_acceptance"])
    lines = swept.to_csv().strip().splitlines()
    assert lines[0].startswith("setting,label,rule,param,value,tokens_per_call")
    assert len(lines) == 1 + 1 + len(swept.settings)
    text, base = swept.outputs("cactus:delta=1", 2)
    assert text == swept.get("cactus:delta=1").prompts[2].text
    assert base == swept.baseline.prompts[2].text


def test_cache_key_covers_the_model_and_the_sampling(
    tiny_pair, tiny_pair_factory, swept, cache_dir
):
    cache = SweepCache(cache_dir)
    config = _config(settings=(Setting.of("cactus", delta=1.0),))
    other_pair = tiny_pair_factory(seed=5)
    with count_forwards(other_pair) as calls:
        run_sweep(other_pair, replace(config, prompts=PROMPTS[:1]), cache)
    assert calls["n"] > 0  # another model pair is another key
    with count_forwards(tiny_pair) as calls:
        hotter = replace(config.sampling, temperature=0.9)
        run_sweep(tiny_pair, replace(config, prompts=PROMPTS[:1], sampling=hotter), cache)
    assert calls["n"] > 0


def test_compare_reads_cactus_front_at_each_other_point(swept):
    table = swept.compare("cactus", "tokens_per_call")
    assert set(table) == {"sps", "interp", "optimal", "tas"}
    for rows in table.values():
        for r in rows:
            assert r["a_wins"] == (r["a"] > r["b"])
    assert swept.compare("topk") == {}


def test_own_estimate_is_the_rule_curve_on_the_run_s_own_positions(
    tiny_pair, swept, tmp_path, monkeypatch
):
    """With own_estimate, each setting keeps its rule's curve on the positions it decoded; with
    every id kept (top-M = the vocabulary) it is exact there: at the setting's own value its
    acceptance and KL are the sweep's exact expectation and KL on the same positions."""
    import cactus_core.experiments.sweeps.run as sweep_module

    monkeypatch.setattr(sweep_module, "OWN_ESTIMATE_TOP_M", tiny_pair.verifier.config.vocab_size)
    settings = (Setting.of("interp", alpha=1.0), Setting.of("sps"))
    config = _config(settings=settings, own_estimate=True, chunk_size=3)
    result = run_sweep(tiny_pair, config, SweepCache(tmp_path))
    for res in result.settings:
        curve = res.own_curve(config.sampling.k)
        assert curve is not None and curve.rule == res.setting.rule
        assert sum(c.estimate_positions for c in res.chunks) == sum(r.scored for r in res.prompts)
        value = dict(res.setting.params).get("alpha")
        assert curve.at(value, "acceptance") == pytest.approx(res.expected_acceptance, rel=1e-6)
        assert curve.at(value, "kl_position") == pytest.approx(res.scored_kl, rel=1e-6, abs=1e-9)
    # A sweep without it keeps none, and shares only the verifier-only chunks with it.
    assert all(s.own_curve(4) is None for s in swept.settings)
    plain = run_sweep(tiny_pair, replace(config, own_estimate=False), SweepCache(tmp_path))
    assert plain.computed_chunks == len(plain.config.chunks()) * len(settings)


def test_a_feature_draft_sweeps_in_batches_with_the_same_text_as_alone(tiny_pair, tmp_path):
    """A pair with a feature draft sweeps chunk by chunk like any pair (the verifier batched,
    the draft row by row), and prompt i's text does not depend on its chunk."""
    from cactus_core.engine.loading.feature_draft import FeatureDraft
    from cactus_core.engine.loading.models import with_feature_draft

    pair = with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier))
    settings = (Setting.of("sps"), Setting.of("cactus", delta=0.3))
    batched = run_sweep(pair, _config(settings=settings), SweepCache(tmp_path / "b"))
    alone = run_sweep(pair, _config(settings=settings, chunk_size=1), SweepCache(tmp_path / "a"))
    for name in ("sps", "cactus:delta=0.3"):
        got = batched.get(name)
        assert [r.text for r in got.prompts] == [r.text for r in alone.get(name).prompts]
        assert all(r.text for r in got.prompts)
