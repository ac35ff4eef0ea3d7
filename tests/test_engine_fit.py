"""SGLang's rule against its kernel's description, and its thresholds fitted to a lab setting's
acceptance on rows and on estimated curves."""

from __future__ import annotations

import pytest
import torch
from distributions import dirichlet

from cactus_core.experiments.estimates.curves import estimate_frontier
from cactus_core.experiments.estimates.engine_fit import (
    SGLANG_RULE,
    fit_on_curves,
    fit_on_rows,
    rule_means,
    sglang_rule,
    written,
)
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.rules import make_rule


def kernel_pi(p: torch.Tensor, q: torch.Tensor, t_acc: float, t_single: float) -> torch.Tensor:
    """pi of one chain position as SGLang's target-only kernel runs it, written from its steps:
    draft n ~ p; accept when the coin u ~ U[0, 1) has u <= q_n / t_acc, or when q_n >= t_single;
    else set the draft row to q_n at n (0 elsewhere) and sample relu(q − that row)."""
    v = p.shape[-1]
    pi = torch.zeros_like(q)
    for n in range(v):
        if p[n] == 0:
            continue
        a = 1.0 if q[n] >= t_single else min(1.0, float(q[n]) / t_acc)
        a = a if q[n] > 0 else 0.0
        draft_row = torch.zeros_like(q)
        draft_row[n] = q[n]
        relu = (q - draft_row).clamp_min(0)
        pi[n] += p[n] * a
        if a < 1:
            pi += p[n] * (1 - a) * relu / relu.sum()
    return pi


@pytest.mark.parametrize(("t_acc", "t_single"), [(1.0, 1.0), (0.3, 1.0), (0.5, 0.2), (0.05, 0.6)])
def test_rule_is_the_kernel_on_a_chain(t_acc, t_single):
    for seed in range(4):
        p = dirichlet(9, (), seed=seed, conc=0.5)
        q = dirichlet(9, (), seed=seed + 50, conc=0.5)
        q[seed] = 0.0  # a token the verifier rules out
        q = q / q.sum()
        rule = sglang_rule(t_acc, t_single)
        torch.testing.assert_close(
            emitted_distribution(rule, p, q), kernel_pi(p, q, t_acc, t_single), rtol=0, atol=1e-12
        )


@pytest.mark.parametrize("conc", [0.2, 1.0])
def test_lossless_at_thresholds_one_whatever_the_draft(conc):
    q = dirichlet(30, (8,), seed=3)
    for p in (dirichlet(30, (8,), seed=4, conc=conc), torch.eye(30, dtype=torch.float64)[:8]):
        torch.testing.assert_close(emitted_distribution(sglang_rule(1.0), p, q), q)
        # it accepts sum p·q, below lossless speculative sampling's sum min(p, q)
        acc = rule_means(sglang_rule(1.0), p, q)[0]
        assert acc == pytest.approx(float((p * q).sum(-1).mean()))
        assert acc <= rule_means(make_rule("sps"), p, q)[0]
    # lowering t_acc moves pi away from q
    kls = [float(kl(emitted_distribution(sglang_rule(t), p, q), q).mean()) for t in (0.3, 0.1)]
    assert 0 < kls[0] < kls[1]


def rows(seed: int = 1, n: int = 300, v: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """Drafts that roughly track the verifier, peaky and flat rows mixed."""
    q = dirichlet(v, (n,), seed=seed, conc=0.3)
    noise = dirichlet(v, (n,), seed=seed + 1, conc=0.3)
    return 0.6 * q + 0.4 * noise, q


@pytest.mark.parametrize("delta", [0.0, 0.05, 0.2])
def test_fit_on_rows_meets_the_acceptance_with_the_written_threshold(delta):
    p, q = rows()
    rule = make_rule("cactus", delta=delta)
    fit = fit_on_rows(rule, p, q, "synthetic rows")
    assert fit.threshold_acc == written(fit.threshold_acc) and 0 < fit.threshold_acc <= 1
    assert (fit.acceptance, fit.kl) == rule_means(sglang_rule(fit.threshold_acc), p, q)
    assert (fit.target_acceptance, fit.target_kl) == rule_means(rule, p, q)
    assert abs(fit.error) < 2e-3 and not fit.edge  # three digits of t_acc
    assert fit.positions == 300
    assert "--speculative-accept-threshold-acc" in fit.flags()


def test_fit_edges_say_so():
    p, q = rows()
    # a setting that accepts less than SGLang at t_acc = 1
    low = fit_on_rows(make_rule("topk", k_top=1), p, q, "rows")
    if low.target_acceptance < rule_means(sglang_rule(1.0), p, q)[0]:
        assert low.threshold_acc == 1.0 and low.error > 0 and "already accepts" in low.edge
    # a relaxed rule that accepts more than SGLang ever does on these rows: q-truncated rows
    q_cut = torch.where(q > 0.05, q, torch.zeros_like(q))
    q_cut = q_cut / q_cut.sum(-1, keepdim=True)
    high = fit_on_rows(make_rule("relaxed-topk", delta_r=1.0, K=40), p, q_cut, "rows")
    assert high.error <= 1e-9
    if high.error < -1e-3:
        assert "beyond SGLang's reach" in high.edge


def test_fit_on_curves_agrees_with_the_rows():
    p, q = rows(seed=5)
    est = estimate_frontier(p, q, 4, rules=["cactus", SGLANG_RULE])
    rule = make_rule("cactus", delta=0.01)
    on_rows = fit_on_rows(rule, p, q, "rows")
    on_curves = fit_on_curves(rule, est.curves["cactus"], est.curves[SGLANG_RULE], "curves")
    assert abs(on_curves.target_acceptance - on_rows.target_acceptance) < 5e-3
    assert abs(on_curves.threshold_acc - on_rows.threshold_acc) / on_rows.threshold_acc < 0.1
    assert abs(on_curves.error) < 5e-3 and on_curves.positions == 0
    with pytest.raises(ValueError, match="curves"):
        fit_on_curves(rule, est.curves[SGLANG_RULE], est.curves["cactus"], "curves")


def test_bad_rows_are_refused():
    with pytest.raises(ValueError, match=r"\[N, W\]"):
        fit_on_rows(make_rule("cactus"), torch.ones(3), torch.ones(3), "rows")
