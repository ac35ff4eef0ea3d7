"""The shipped reference sweep: its provenance, its coverage, its identity with the embedded
pair, and the builder that regenerates it (on the tiny pair)."""

from __future__ import annotations

import math

import pytest

from cactus_core.experiments.estimates.curves import estimable
from cactus_core.experiments.sweeps import reference as ref
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import Setting
from cactus_core.maths.rules import RULES


@pytest.fixture(scope="module")
def shipped() -> ref.Reference:
    return ref.load_reference()


def test_provenance_and_size(shipped: ref.Reference) -> None:
    p = shipped.provenance
    for key in ("command", "commit", "model", "date", "prompts"):
        assert p[key], key
    assert p["command"].startswith(ref.REFERENCE_COMMAND)
    assert "verifier=" in p["model"] and "draft=" in p["model"] and "#" in p["model"]
    assert ref.REFERENCE_FILE.stat().st_size <= 5 * 2**20
    assert "Reference sweep" in shipped.caption()


def test_every_rule_both_top_p_with_the_limit(shipped: ref.Reference) -> None:
    assert sorted(shipped.sweeps) == sorted(ref.REFERENCE_TOP_P)
    for top_p, sweep in shipped.sweeps.items():
        assert sweep.limit is not None and sweep.estimate is not None
        # every rule it measured whose pi follows from one position has a curve; FLy and the
        # learned judge have measured points only (their pi depends on the whole round). A rule
        # added since it was made is absent until --missing-only adds it (the views say so).
        measured = {n for n in RULES if sweep.has(n)}
        assert {"sps", "cactus"} <= measured
        assert set(sweep.estimate.curves) == {n for n in measured if estimable(n)}
        for name, cls in RULES.items():
            if name not in measured:
                continue
            rows = sweep.rule_rows(name)
            want = 1 if cls.swept() is None else ref.MIN_SETTINGS_PER_RULE
            assert len(rows) >= want, (top_p, name)
            assert all(math.isfinite(r["tokens_per_call"]) for r in rows), (top_p, name)
            if not estimable(name):
                assert name not in sweep.own_runs and name not in sweep.estimate.curves
                continue
            # Every measured setting brought its own estimated curve, made on its positions.
            runs = sweep.own_runs[name]
            assert sorted(v for v, _ in runs if v is not None) == sorted(
                r["value"] for r in rows if r["value"] is not None
            ), (top_p, name)
            curve = sweep.estimate.curves[name]
            for value, own in runs:
                assert curve.at(value, "acceptance") == pytest.approx(
                    own.at(value, "acceptance")
                ), (top_p, name, value)


@pytest.mark.slow
def test_matches_the_embedded_pair(shipped: ref.Reference) -> None:
    """A new draft (or verifier) gives a new identity: regenerate the reference then."""
    from cactus_core.app.shared.settings import AppSettings
    from cactus_core.cli import build_parser
    from cactus_core.cli.models import pair_kwargs_from_args
    from cactus_core.engine.loading.embedded_drafts import REFERENCE_EMBEDDED_DRAFT, embedded_draft
    from cactus_core.engine.loading.models import load_pair

    kwargs = embedded_draft(REFERENCE_EMBEDDED_DRAFT).load_kwargs("cpu")
    assert load_pair(device="cpu", **kwargs).identity == shipped.model, (
        f"the shipped reference sweep was made for another pair; run `{ref.REFERENCE_COMMAND}`"
    )
    # The pair the app loads for the settings it says are the reference's, and the one the
    # reference's own command loads (on any CPU, whichever dtype is its default).
    assert AppSettings(device="cpu", embedded_draft=REFERENCE_EMBEDDED_DRAFT).on_reference_pair
    args = build_parser().parse_args(["sweep", "--reference", "--device", "cpu"])
    assert pair_kwargs_from_args(args) == {
        "verifier": None,
        "draft": None,
        "device": "cpu",
        **kwargs,
    }


def test_the_pages_say_when_the_pair_is_not_the_reference_s(shipped: ref.Reference) -> None:
    from cactus_core.app.shared.reference import reference_part
    from cactus_core.app.shared.settings import AppSettings
    from cactus_core.maths.sampling import SamplingSettings

    sampling = SamplingSettings(temperature=0.7, k=4)
    same, f32, plain = (
        AppSettings(device="cpu", embedded_draft=label, sampling=sampling)
        for label in ("feature draft, bfloat16", "feature draft, float32", "3-layer draft, float32")
    )
    typed = AppSettings(verifier="some/model", device="cpu", sampling=sampling)
    assert same.on_reference_pair
    assert not (f32.on_reference_pair or plain.on_reference_pair or typed.on_reference_pair)
    assert reference_part(shipped, same.sampling, same.on_reference_pair)[1] is None
    for other in (f32, plain):
        _, note = reference_part(shipped, other.sampling, other.on_reference_pair)
        assert note.startswith(
            "The reference was measured on the embedded pair with the feature draft, bfloat16"
        )


def _ends_of_each_grid() -> tuple[Setting, ...]:
    """Every rule at the first and the last of its reference settings."""
    by_rule: dict[str, list[Setting]] = {}
    for setting in ref.reference_settings():
        by_rule.setdefault(setting.rule, []).append(setting)
    return tuple(s for run in by_rule.values() for s in dict.fromkeys((run[0], run[-1])))


@pytest.mark.usefixtures("tiny_judge")
def test_builder_on_the_tiny_pair(tiny_pair, tmp_path, monkeypatch) -> None:
    """Every rule, at both ends of its grid (all 80 settings took 40 s; the grid itself is
    checked on the shipped file above)."""
    monkeypatch.setattr(ref, "REFERENCE_MAX_NEW_TOKENS", 6)
    ends = _ends_of_each_grid()
    monkeypatch.setattr(ref, "reference_settings", lambda: ends)
    prompts = ("Tell me about cacti.", "Name three colours.")
    data = ref.build_reference(tiny_pair, prompts, "test", SweepCache(tmp_path / "cache"))
    path = ref.write_reference(data, tmp_path / "ref.json.gz")
    back = ref.load_reference(path)
    assert back.model == tiny_pair.identity
    assert back.provenance["prompts"] == 2
    part = back.for_top_p(0.95)
    assert part is not None and back.for_top_p(0.5) is None
    settings = ref.reference_settings()
    assert len(part.rows) == len(settings) + 1  # and verifier-only
    assert {s.rule for s in settings} == set(RULES)
    assert part.estimate is not None
    assert set(part.estimate.curves) == {n for n in RULES if estimable(n)}
    assert sum(len(r) for r in part.own_runs.values()) == len(
        [s for s in settings if estimable(s.rule)]
    )


def test_every_grid_value_of_a_measured_rule_is_in_the_reference_at_both_top_p() -> None:
    """A grid grown since the file was made (cactus' 0.001 and 0.01) fails here until
    `sweep --reference --missing-only` adds it; a rule added since, with no row at all, is
    said to be not in the reference yet instead (the next test)."""
    data = ref.read_reference_data()
    measured = {row["rule"] for part in data["sweeps"] for row in part["rows"]}
    missing = ref.missing_settings(data)
    assert {
        top_p: [s.id for s in todo if s.rule in measured]
        for top_p, todo in missing.items()
        if any(s.rule in measured for s in todo)
    } == {}


def test_a_rule_the_reference_lacks_is_said_to_be_not_in_it_yet(shipped) -> None:
    """Adding a rule needs no regeneration: every view that reads the reference says the
    rule is not in it yet, and how to add it, instead of failing or drawing nothing."""
    from dataclasses import replace

    from cactus_core.app.shared.reference import compact_caption, compact_frontier, missing_rules
    from cactus_core.experiments.tuning.tune import first_guess

    part = shipped.for_top_p(1.0)
    without = replace(part, rows=[r for r in part.rows if r["rule"] != "fly"])
    assert part.has("fly") and not without.has("fly")
    assert missing_rules(part) is None
    line = missing_rules(without)
    assert line is not None and line.startswith("fly is not in the reference yet: run a sweep")
    assert "--missing-only" in line
    with pytest.raises(ValueError, match="fly is not in the reference yet"):
        first_guess(without, "fly", 0.1)
    fig = compact_frontier(without, "fly", {"theta": 0.5})  # sps and the limit, no marker
    assert "current setting" not in [t.name for t in fig.data]
    assert compact_caption(False, False, "fly", in_reference=False).startswith(
        "fly is not in the reference yet"
    )


@pytest.mark.parametrize("top_p", ref.REFERENCE_TOP_P)
@pytest.mark.parametrize("budget", [0.02, 0.05])
def test_small_budgets_are_answered_between_measured_runs(shipped, top_p, budget) -> None:
    """The first guess at a small budget lies between two of the rule's measured positive
    settings, not in the stretch between delta = 0 and the first one that no run measured."""
    from cactus_core.experiments.tuning.tune import first_guess

    part = shipped.for_top_p(top_p)
    guess = first_guess(part, "cactus", budget)
    swept = sorted(r["value"] for r in part.rule_rows("cactus") if r["value"])
    assert swept[0] < guess.value < swept[-1], (guess.value, swept)
    assert guess.kl == pytest.approx(budget, rel=1e-6)
