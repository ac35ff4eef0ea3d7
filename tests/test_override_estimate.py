"""The law of a rule that overrides sps rejections (FLy, learned judges): the mixture
pi = (1 − omega)·q + omega·p̃ against sampling, FLy's exact W = 1 law against its verifier,
omega's interval, the sums a sweep keeps, and a FLy sweep's rows marked estimated."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
from distributions import dirichlet
from scipy import stats

from cactus_core.experiments.estimates.override import (
    OMEGA_GRID,
    OverrideSums,
    estimate_override,
    mean_divergences,
    wilson_interval,
)
from cactus_core.experiments.sweeps.config import SweepConfig, settings_from_grids
from cactus_core.experiments.sweeps.records import ChunkRecord
from cactus_core.experiments.sweeps.run import run_sweep
from cactus_core.maths.rules import make_rule
from cactus_core.maths.rules.override import overridden_law
from cactus_core.maths.verify import verify


def override_mixture(p: torch.Tensor, q: torch.Tensor, omega: float) -> torch.Tensor:
    """The test's oracle: pi_omega = (1 − omega)·q + omega·p̃ [..., V]."""
    tilde = overridden_law(p, q)
    return q.to(tilde.dtype) * (1 - omega) + tilde * omega


def _chi2_pvalue(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    obs = torch.bincount(tokens, minlength=probs.numel()).double()
    keep = probs > 0
    assert obs[~keep].sum() == 0, "a token the law gives probability 0 was emitted"
    exp = probs[keep] * obs.sum()
    return float(stats.chisquare(obs[keep].numpy(), exp.numpy()).pvalue)


def _truncated_pair(v: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    p = dirichlet(v, (), seed=seed, conc=1.0)
    q = dirichlet(v, (), seed=seed + 50, conc=1.0)
    q[-2:] = 0  # q truncated (top-p): p's mass there must be redrawn, never written
    return p, q / q.sum()


def test_wilson_interval() -> None:
    iv = wilson_interval(5, 10)
    assert iv.estimate == 0.5
    assert iv.lo == pytest.approx(0.2366, abs=1e-4) and iv.hi == pytest.approx(0.7634, abs=1e-4)
    none = wilson_interval(0, 0)
    assert math.isnan(none.estimate) and (none.lo, none.hi) == (0.0, 1.0)
    assert wilson_interval(0, 7).lo == 0.0 and wilson_interval(7, 7).hi == 1.0
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(3, 2)


@pytest.mark.parametrize("omega", [0.0, 0.35, 1.0])
def test_sampled_overrides_follow_the_mixture(omega: float) -> None:
    """sps at one position with each rejection of a draft q allows overridden with chance
    omega (independent of the draft): the emitted tokens follow (1 − omega)·q + omega·p̃."""
    p, q = _truncated_pair(9, seed=1)
    g = torch.Generator().manual_seed(7)
    b = 60_000
    n = torch.multinomial(p, b, replacement=True, generator=g)  # [b]
    a = torch.clamp(q[n] / p[n], max=1.0)
    rejected = torch.rand(b, generator=g, dtype=torch.float64) >= a
    overridden = rejected & (q[n] > 0) & (torch.rand(b, generator=g) < omega)
    residual = (q - p).clamp_min(0)
    recovered = torch.multinomial(residual / residual.sum(), b, replacement=True, generator=g)
    out = torch.where(rejected & ~overridden, recovered, n)
    law = override_mixture(p, q, omega)
    assert _chi2_pvalue(out, law) > 1e-3
    assert float(law[q == 0].sum()) == 0.0


def test_overridden_law_is_the_draft_without_truncation() -> None:
    p = dirichlet(12, (4,), seed=2)
    q = dirichlet(12, (4,), seed=3)
    torch.testing.assert_close(overridden_law(p, q), p.double())


def test_fly_window_one_first_token_follows_its_exact_law() -> None:
    """FLy with W = 1 and k = 2: the first emitted token follows `emitted_inner` (p̃ where
    q's top-3 entropy opens the gate), whatever the second draft does."""
    rule = make_rule("fly", theta=0.3, W=1)
    p0, q0 = _truncated_pair(8, seed=4)
    assert bool(rule.gate(q0))
    p1, q1 = _truncated_pair(8, seed=5)
    q2 = dirichlet(8, (), seed=6)
    b = 50_000
    g = torch.Generator().manual_seed(11)
    p = torch.stack([p0, p1]).expand(b, 2, 8)
    q = torch.stack([q0, q1, q2]).expand(b, 3, 8)
    n = torch.stack(
        [torch.multinomial(row, b, replacement=True, generator=g) for row in (p0, p1)], dim=1
    )
    res = verify(rule, p, n, q, generator=g)
    law = rule.emitted_inner(p0, q0)
    torch.testing.assert_close(law, overridden_law(p0, q0))
    assert _chi2_pvalue(res.output_token_ids[:, 0], law) > 1e-3


def test_fly_without_gate_is_sps() -> None:
    # past log 3 the top-3 entropy never reaches theta: every round is sps's
    rule = make_rule("fly", theta=1.1, W=1)
    p0, q0 = _truncated_pair(8, seed=4)
    torch.testing.assert_close(rule.emitted_inner(p0, q0), q0.double())
    with pytest.raises(ValueError, match="estimate it from a decode"):
        make_rule("fly", theta=0.3, W=2).emitted_inner(p0, q0)


def test_divergences_grow_with_omega() -> None:
    p = dirichlet(30, (6,), seed=8, conc=0.3)
    q = dirichlet(30, (6,), seed=9, conc=0.3)
    q[:, :3] = 0
    q = q / q.sum(-1, keepdim=True)
    eligible = torch.tensor([True, True, False, True, False, True])
    rows = [mean_divergences(p, q, eligible, w) for w in OMEGA_GRID]
    for j in range(3):
        col = [r[j] for r in rows]
        assert col[0] == pytest.approx(0.0, abs=1e-12)
        assert all(b >= a - 1e-12 for a, b in itertools.pairwise(col)), j
    # TV is linear in omega
    assert rows[16][1] == pytest.approx(rows[-1][1] / 2, rel=1e-9)


def _synthetic_decode(omega: float, n: int, seed: int):
    """n positions of a decode whose rule overrides each eligible sps rejection with chance
    omega: (p, q, qn, sps_rejected, overridden, eligible)."""
    g = torch.Generator().manual_seed(seed)
    p = dirichlet(20, (n,), seed=seed, conc=0.4)
    q = dirichlet(20, (n,), seed=seed + 1, conc=0.4)
    qn = torch.rand(n, generator=g, dtype=torch.float64)
    qn[::7] = 0.0  # drafts the verifier rules out: never overridden
    rejected = torch.rand(n, generator=g) < 0.5
    eligible = torch.rand(n, generator=g) < 0.7
    trial = rejected & eligible & (qn > 0)
    overridden = trial & (torch.rand(n, generator=g) < omega)
    return p, q, qn, rejected, overridden, eligible


def test_omega_interval_covers_the_truth_and_brackets_the_divergences() -> None:
    covered = 0
    for seed in range(40):
        est = estimate_override(*_synthetic_decode(0.3, 400, seed))
        covered += est.omega.lo <= 0.3 <= est.omega.hi
        for iv in (est.kl, est.tv, est.reverse_kl):
            assert iv.lo <= iv.estimate <= iv.hi
    assert covered >= 34  # 95% intervals: 38 of 40 expected, 34 leaves room for chance


def test_estimate_rejects_an_override_that_was_no_trial() -> None:
    p, q, qn, rejected, overridden, eligible = _synthetic_decode(0.3, 50, 1)
    overridden = overridden.clone()
    overridden[~eligible] = True
    with pytest.raises(ValueError, match="eligible sps rejections"):
        estimate_override(p, q, qn, rejected, overridden, eligible)


def test_override_sums_add_and_read_the_estimate() -> None:
    a = _synthetic_decode(0.4, 300, 2)
    b = _synthetic_decode(0.4, 200, 3)
    both = OverrideSums.of(*a) + OverrideSums.of(*b)
    joined = estimate_override(*(torch.cat([x, y]) for x, y in zip(a, b, strict=True)))
    assert (both.overridden, both.trials, both.positions) == (
        joined.overridden,
        joined.trials,
        joined.positions,
    )
    assert both.omega() == joined.omega
    tokens = 600
    for name in ("kl", "tv", "reverse_kl"):
        iv = both.per_token(name, tokens)
        exact = getattr(joined, name)
        # read between grid points: convex in omega, so the interpolation errs only upward
        assert iv.estimate * tokens / both.positions >= exact.estimate - 1e-9
        assert iv.estimate * tokens / both.positions == pytest.approx(exact.estimate, rel=0.02)
    again = OverrideSums.from_dict(json.loads(json.dumps(both.to_dict())))
    assert again == both
    assert OverrideSums.empty() + both == both


def test_a_fly_sweep_marks_its_divergences_estimated(tiny_pair) -> None:
    grids = {"sps": [], "fly": [0.0], "kl-judge": [0.5]}
    config = SweepConfig(
        prompts=("Tell me about cacti.", "Explain rainbows.", "Write a haiku."),
        settings=tuple(settings_from_grids(grids)),
        max_new_tokens=24,
        chunk_size=2,
    )
    result = run_sweep(tiny_pair, config, None)
    rows = {r["setting"]: r for r in result.rows()}
    fly = rows["fly:theta=0"]
    assert fly["estimated"] and fly["override_trials"] > 0
    assert fly["omega_lo"] <= fly["omega"] <= fly["omega_hi"]
    for metric in ("emitted_kl", "emitted_tv", "emitted_reverse_kl"):
        assert fly[f"{metric}_lo"] <= fly[metric] <= fly[f"{metric}_hi"]
    assert fly["emitted_kl"] > 0  # the gate is open everywhere: it overrode, so pi moved
    assert not rows["sps"]["estimated"] and not rows["kl-judge:tau=0.5"]["estimated"]
    assert fly["tokens_per_call"] > rows["sps"]["tokens_per_call"]
    chunk = result.get("fly:theta=0").chunks[0]
    assert ChunkRecord.from_dict(json.loads(json.dumps(chunk.to_dict()))).override == (
        chunk.override
    )
    assert "omega" in result.to_csv().splitlines()[0]

    from cactus_core.app.frontier.figures import frontier_chart

    fig = frontier_chart(result.rows(), "tokens_per_call")
    names = [t.name for t in fig.data]
    assert "fly (estimated π)" in names and "sps" in names
    (trace,) = [t for t in fig.data if t.name == "fly (estimated π)"]
    assert trace.error_x.array is not None and "estimated" in trace.hovertemplate
