"""The Frontier page's maths and figures without any model: intervals, Pareto fronts, the
limit solver, the tuner's interpolation, prompt files, the sweep cache and the Plotly
builders."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from cactus_core.app.frontier.figures import (
    FRONT_NAME,
    acceptance_limit_chart,
    figure_html,
    frontier_chart,
)
from cactus_core.app.shared.rule_style import rule_colour
from cactus_core.experiments.estimates.frontier import (
    dominance_check,
    interpolate_param_for_budget,
    mean_ci,
    pareto_front,
    t_quantile_975,
)
from cactus_core.experiments.sweeps.cache import SweepCache
from cactus_core.experiments.sweeps.config import (
    MAX_PROMPTS,
    Setting,
    SweepConfig,
    parse_prompt_file,
    settings_from_grids,
)
from cactus_core.maths.divergence import kl
from cactus_core.maths.emitted import emitted_distribution
from cactus_core.maths.limit import LIMIT_T_GRID, LimitSums, limit_sums, optimal_target
from cactus_core.maths.rules import make_rule


def _rows(n: int, v: int, seed: int = 0, spread: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic (p, q) rows: drafts that roughly track q, peaky and flat mixed."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, v, generator=g, dtype=torch.float64) * spread
    temp = torch.linspace(0.5, 2.0, n, dtype=torch.float64)[:, None]
    q = torch.softmax(base / temp, -1)
    p = torch.softmax((base + torch.randn(n, v, generator=g, dtype=torch.float64)) / temp, -1)
    return p, q


# ------------------------------------------------------------------------------ statistics


@pytest.mark.parametrize("df", [1, 2, 5, 12, 30, 31, 45, 100, 1000])
def test_t_quantile_matches_scipy(df):
    assert t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-3)


def test_mean_ci_matches_the_t_interval():
    x = [1.2, 0.7, 1.9, 1.1, 0.4, 1.6]
    est = mean_ci(x)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert est.mean == pytest.approx(np.mean(x))
    assert (est.lo, est.hi) == (pytest.approx(lo, rel=1e-3), pytest.approx(hi, rel=1e-3))
    assert est.n == 6


def test_mean_ci_edge_cases():
    one = mean_ci([2.5])
    assert (one.mean, one.lo, one.hi, one.n) == (2.5, 2.5, 2.5, 1)
    assert math.isnan(mean_ci([]).mean)
    assert mean_ci([1.0, math.nan, 3.0]).n == 2  # NaN = undefined for that unit, left out
    assert mean_ci([1.0, math.inf]).mean == math.inf
    assert mean_ci([1.0, math.inf]).to_dict()["mean"] is None  # JSON has no inf


def test_pareto_front_keeps_only_undominated_points():
    xs = [0.0, 0.1, 0.2, 0.2, 0.5, 0.4, math.nan]
    ys = [1.0, 1.5, 1.4, 1.8, 1.7, 2.0, 9.0]
    assert pareto_front(xs, ys) == [0, 1, 3, 5]


def test_dominance_check_reads_the_step_front():
    rows = dominance_check([0.0, 0.2, 0.5], [1.0, 2.0, 3.0], [0.1, 0.3, 0.6], [1.5, 1.9, 3.5])
    assert [r["a"] for r in rows] == [1.0, 2.0, 3.0]
    assert [r["a_wins"] for r in rows] == [False, True, False]
    # B's points cheaper than A's cheapest are not compared
    assert dominance_check([0.2], [1.0], [0.1], [0.5]) == []


# ------------------------------------------------------------------------------ the limit


def _binary_kl(x: float, y: float) -> float:
    return x * math.log(x / y) + (1 - x) * math.log((1 - x) / (1 - y))


def test_limit_two_tokens_known_optimum():
    # p = (.8, .2), q = (.3, .7): pi = (x, 1 - x) with x in [.3, .8] accepts x + .2 at
    # KL = binary KL(x ‖ .3), so the limit at that KL is exactly x + .2.
    curve = limit_sums(torch.tensor([[0.8, 0.2]]), torch.tensor([[0.3, 0.7]])).curve()
    for x in (0.3, 0.35, 0.5, 0.7, 0.8):
        assert curve.at(_binary_kl(x, 0.3)) == pytest.approx(x + 0.2, abs=2e-4)
    assert curve.at(10.0) == pytest.approx(1.0)  # past KL(p ‖ q): pi = p, everything accepted


def test_one_price_limit_agrees_with_the_per_position_budget_solver():
    """At one position one price and one budget are the same constraint: the curve's point at
    each t must be what `optimal_target` (a bisection on A by KL, another solver) reaches at
    that point's KL."""
    p, q = _rows(6, 40, seed=3)
    for row in range(p.shape[0]):
        curve = limit_sums(p[row : row + 1], q[row : row + 1]).curve()
        for i in range(8, len(LIMIT_T_GRID), 40):
            budget = float(curve.mean_kl[i])
            pi = optimal_target(p[row].double(), q[row].double(), budget)
            reached = torch.minimum(p[row].double(), pi).sum().item()
            assert curve.mean_acceptance[i] == pytest.approx(reached, abs=1e-6)


def test_limit_sums_pool_across_blocks_and_serialise():
    p, q = _rows(30, 16, seed=5)
    whole = limit_sums(p, q)
    parts = limit_sums(p[:11], q[:11]) + limit_sums(p[11:], q[11:])
    assert parts.count == whole.count == 30
    assert parts.acc == pytest.approx(whole.acc)
    back = LimitSums.from_dict(json.loads(json.dumps(whole.to_dict())))
    assert back == whole
    with pytest.raises(ValueError, match="t grid"):
        LimitSums.from_dict({"acc": [0.0], "kl": [0.0], "count": 1})


def test_limit_handles_truncated_q():
    # top-p style zeros in q: drafts outside q's support can never be emitted.
    p = torch.tensor([[0.7, 0.1, 0.2]])
    q = torch.tensor([[0.5, 0.5, 0.0]])
    curve = limit_sums(p, q).curve()
    assert curve.mean_acceptance[0] == pytest.approx(0.6)  # sum min(p, q)
    # at most: pi = (.7, .3, 0) accepts all of p's mass on q's support plus nothing more
    assert curve.mean_acceptance[-1] == pytest.approx(0.8, abs=1e-6)
    assert np.all(np.isfinite(curve.mean_kl))


RULES = [
    make_rule("sps"),
    *(make_rule("cactus", delta=d) for d in (0.05, 0.3, 1.0, 3.0)),
    make_rule("cactus-exact", delta=0.3),
    make_rule("interp", alpha=0.4),
    make_rule("tas", epsilon=0.05),
    make_rule("topk", k_top=3),
    *(make_rule("optimal", budget=b) for b in (0.02, 0.2)),
]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.label)
def test_no_rule_beats_the_limit(rule):
    p, q = _rows(40, 30, seed=11)
    curve = limit_sums(p, q).curve()
    acc = float((p * rule.accept_probs_all(p, q)).sum(-1).mean())
    div = float(kl(emitted_distribution(rule, p, q).double(), q).mean())
    assert acc <= curve.at(div) + 1e-6


def test_optimal_rule_sits_on_the_limit_when_positions_are_alike():
    # With one row repeated, a per-position budget and one price coincide: efficiency 1.
    p, q = _rows(1, 30, seed=2)
    p, q = p.repeat(6, 1), q.repeat(6, 1)
    curve = limit_sums(p, q).curve()
    for budget in (0.01, 0.1, 0.3):
        rule = make_rule("optimal", budget=budget)
        acc = float((p * rule.accept_probs_all(p, q)).sum(-1).mean())
        div = float(kl(emitted_distribution(rule, p, q).double(), q).mean())
        assert acc == pytest.approx(curve.at(div), abs=2e-4)


# ------------------------------------------------------------------------------ the tuner


def test_interpolate_param_for_budget():
    deltas, kls = [0.0, 0.1, 0.3, 1.0], [0.0, 0.05, 0.12, 0.3]
    assert interpolate_param_for_budget(deltas, kls, 0.05) == pytest.approx(0.1)
    assert interpolate_param_for_budget(deltas, kls, 0.2) == pytest.approx(0.3 + 0.7 * 8 / 18)
    assert interpolate_param_for_budget(deltas, kls, 5.0) == 1.0  # no extrapolation
    # a noisy dip is flattened (running max), so the answer never jumps past an overshoot
    assert interpolate_param_for_budget([0, 1, 2, 3], [0, 0.4, 0.3, 0.6], 0.35) < 1.0
    assert interpolate_param_for_budget([0.1, 1.0], [0.2, 0.4], 0.1) == 0.1
    with pytest.raises(ValueError, match="budget"):
        interpolate_param_for_budget(deltas, kls, -1.0)


# ------------------------------------------------------------------------------ settings


def test_settings_from_grids_and_ids_round_trip():
    settings = settings_from_grids({"cactus": [0, 0.5, 0.5], "topk": [5], "sps": []})
    assert [s.id for s in settings] == ["cactus:delta=0", "cactus:delta=0.5", "topk:k_top=5", "sps"]
    for s in settings:
        assert Setting.from_id(s.id) == s
    assert settings[1].label == "cactus δ=0.5"
    assert settings[1].value == 0.5
    with pytest.raises(ValueError, match="unknown rule"):
        settings_from_grids({"magic": [1]})
    with pytest.raises(ValueError):
        settings_from_grids({"interp": [1.5]})  # alpha out of range
    with pytest.raises(ValueError, match="at least one prompt"):
        SweepConfig(prompts=(), settings=tuple(settings))


# ------------------------------------------------------------------------------ prompt files


def test_parse_jsonl_and_txt():
    data = b'{"prompt": "one"}\n\n"two"\r\n{"prompt": "three", "id": 3}\n'
    assert parse_prompt_file("set.jsonl", data) == ["one", "two", "three"]
    assert parse_prompt_file("set.TXT", b"first\n  \nsecond line\\nwith a break\n") == [
        "first",
        "second line\nwith a break",
    ]


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("a.jsonl", b'{"prompt": "ok"}\n{"prompt": "broken"\n', "line 2: not valid JSON"),
        (
            "a.jsonl",
            b'{"prompt": "ok"}\n\n{"text": "x"}\n',
            'line 3: the JSON object has no "prompt"',
        ),
        ("a.jsonl", b"[1, 2]\n", "line 1: expected a string"),
        ("a.jsonl", b'"  "\n', "line 1: the prompt is empty"),
        ("a.txt", b"fine\n\xff\xfe bad\n", "line 2: not valid UTF-8"),
        ("a.csv", b"x\n", "must end in .jsonl or .txt"),
        ("a.txt", b"\n\n", "no prompts"),
    ],
)
def test_bad_prompt_files_name_the_line(name, data, message):
    with pytest.raises(ValueError, match=message):
        parse_prompt_file(name, data)


def test_prompt_file_limits():
    with pytest.raises(ValueError, match="5 MB"):
        parse_prompt_file("big.txt", b"x" * (5 * 1024 * 1024 + 1))
    many = b"\n".join(b"p%d" % i for i in range(MAX_PROMPTS + 1))
    with pytest.raises(ValueError, match="more than 1000 prompts"):
        parse_prompt_file("many.txt", many)
    assert (
        len(parse_prompt_file("ok.txt", b"\n".join(b"p%d" % i for i in range(MAX_PROMPTS)))) == 1000
    )


# ------------------------------------------------------------------------------ cache


def test_cache_round_trip_atomic_and_corruption(tmp_path):
    cache = SweepCache(tmp_path)
    key = {"model": "m", "setting": {"rule": "cactus", "params": {"delta": 0.5}}}
    assert cache.get(key) is None
    path = cache.put(key, {"x": [1, 2]})
    assert cache.get(key) == {"x": [1, 2]}
    assert key in cache
    assert not list(path.parent.glob(".tmp-*"))  # no temporary file left behind
    other = {**key, "model": "n"}
    assert cache.get(other) is None
    path.write_text("{ truncated", encoding="utf-8")  # e.g. a disk that filled up
    assert cache.get(key) is None
    cache.put(key, {"x": 3})
    assert cache.get(key) == {"x": 3}


def test_cache_key_ignores_dict_order(tmp_path):
    cache = SweepCache(tmp_path)
    cache.put({"a": 1, "b": 2}, "v")
    assert cache.get({"b": 2, "a": 1}) == "v"


# ------------------------------------------------------------------------------ figures


def _fake_rows() -> list[dict]:
    def row(rule, value, kl_, tpc, setting=None):
        sid = setting or f"{rule}:x={value}"
        return {
            "setting": sid, "label": sid, "rule": rule, "param": "x", "value": value,
            "tokens_per_call": tpc, "tokens_per_call_lo": tpc - 0.1,
            "tokens_per_call_hi": tpc + 0.1,
            "emitted_kl": kl_, "emitted_kl_lo": kl_, "emitted_kl_hi": kl_,
            "speedup": tpc / 2, "speedup_lo": tpc / 2, "speedup_hi": tpc / 2,
            "scored_kl": kl_, "expected_acceptance": tpc / 5, "limit_acceptance": tpc / 4.5,
            "efficiency": 0.9,
        }  # fmt: skip

    return [
        row("verifier-only", None, 0.0, 1.0, "verifier-only"),
        row("cactus", 0.0, 0.0, 1.8),
        row("cactus", 0.5, 0.1, 2.4),
        row("cactus", 1.0, 0.3, 2.9),
        row("tas", 0.09, 0.2, 2.0),
        row("tas", 0.01, 0.5, 2.5),
    ]


def test_frontier_chart_series_front_and_customdata():
    fig = frontier_chart(_fake_rows(), "tokens_per_call", selected="cactus:x=0.5")
    names = [t.name for t in fig.data]
    assert names[:3] == ["verifier-only", "cactus", "tas"]
    assert FRONT_NAME in names and "selected" in names
    cactus = fig.data[1]
    assert list(cactus.x) == [0.0, 0.1, 0.3]
    assert [c[0] for c in cactus.customdata] == ["cactus:x=0.0", "cactus:x=0.5", "cactus:x=1.0"]
    assert cactus.error_y.array is not None
    front = next(t for t in fig.data if t.name == FRONT_NAME and t.mode == "lines")
    assert max(front.y) == 2.9 and 2.0 not in front.y  # tas at 0.2 is dominated
    # each corner of the front is marked in its own rule's colour, so a corner of a rule
    # hidden in the legend still says whose setting it is
    corners = next(t for t in fig.data if t.name == FRONT_NAME and t.mode == "markers")
    assert [c[0] for c in corners.customdata] == ["cactus:x=0.0", "cactus:x=0.5", "cactus:x=1.0"]
    assert set(corners.marker.color) == {rule_colour("cactus")}
    assert fig.layout.xaxis.title.text.startswith("emitted KL")


def test_acceptance_chart_draws_the_limit():
    p, q = _rows(10, 12)
    fig = acceptance_limit_chart(_fake_rows(), limit_sums(p, q).curve())
    names = [t.name for t in fig.data]
    assert "limit (best any rule could reach)" in names
    assert "limit at each setting's KL" in names
    assert "verifier-only" not in names


def test_html_export():
    fig = acceptance_limit_chart(_fake_rows(), limit_sums(*_rows(10, 12)).curve())
    html = figure_html([fig, frontier_chart(_fake_rows(), "tokens_per_call")])
    assert html.count("plotly-graph-div") >= 2 and "<script src=" not in html  # offline
    with pytest.raises(ValueError, match="no rows"):
        frontier_chart([], "tokens_per_call")
