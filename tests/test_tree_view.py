"""Tree rounds shown node by node: the figure builder (layout, fates, the accepted path, hover
numbers, a step's partial reveal), Step through's tree steps narrated from the verdict's own
numbers, the Decode inspector on a tree round, and an AppTest that opens Step through on a tree
run and finds the tree figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest
from test_tree_verify import PARENTS, one_tree

from cactus_core.app.shared.figures import FATE_COLOURS
from cactus_core.app.shared.inspector import inspect_token
from cactus_core.app.shared.pair_cache import PairCache
from cactus_core.app.shared.request import DecodeRequest
from cactus_core.app.shared.round_view import live_stats, round_label
from cactus_core.app.shared.settings import AppSettings
from cactus_core.app.shared.transcript import num, round_tokens
from cactus_core.app.shared.tree_figure import TreeFrame, node_hover, tree_figure, tree_positions
from cactus_core.app.step.figures import step_figures
from cactus_core.app.step.run import StepRun
from cactus_core.app.step.view import round_steps
from cactus_core.engine.drafting.tree_settings import TreeSettings
from cactus_core.engine.loading.embedded_drafts import EMBEDDED_DRAFTS
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.loading.models import with_feature_draft
from cactus_core.maths.rules import make_rule
from cactus_core.maths.sampling import SamplingSettings
from cactus_core.maths.traversal import post_order
from cactus_core.maths.tree import children_of, verify_tree

APP = Path(__file__).resolve().parent.parent / "app.py"
TREE = TreeSettings(nodes=8, depth=3)
FEATURE_LABEL = next(d.label for d in EMBEDDED_DRAFTS if d.feature_draft is not None)


@pytest.fixture(scope="module")
def feature_pair(tiny_pair):
    return with_feature_draft(tiny_pair, FeatureDraft.tiny_for(tiny_pair.verifier))


def test_positions_put_a_parent_between_its_children():
    # root -> 0, 1; 0 -> 2; the extra (emitted) child under node 1 (row 2)
    pos = tree_positions([-1, -1, 0], extra_under=2)
    assert [x for x, _ in pos] == [0, 1, 1, 2, 2]
    assert pos[3][1] == 0.0 and pos[4][1] == -1.0  # leaves in order: node 2, then the extra
    assert pos[1][1] == 0.0 and pos[2][1] == -1.0
    assert pos[0][1] == -0.5


def _verdict(seed: int = 0):
    tree, q = one_tree(seed)
    gen = torch.Generator().manual_seed(seed)
    return verify_tree(make_rule("cactus", delta=0.5), tree, q, generator=gen)


def _frame(v, reveal=None) -> TreeFrame:
    return TreeFrame(v, [f"t{t}" for t in v.tokens], "root", f"t{v.emitted[-1]}", reveal)


def test_the_figure_colours_fates_and_draws_the_path_bold():
    v = _verdict()
    fig = tree_figure(_frame(v))
    by_name = {t.name: t for t in fig.data}
    for fate, name in (("accepted", "accepted"), ("rejected", "rejected")):
        want = [i for i, f in enumerate(v.fates) if f == fate]
        if want:
            assert list(by_name[name].customdata) == want
            assert by_name[name].marker.color == FATE_COLOURS[fate]
    unreached = [i for i, f in enumerate(v.fates) if f == "unreached"]
    assert list(by_name["not reached"].customdata) == unreached
    path = by_name["accepted path"]
    assert path.line.width > by_name["edges"].line.width
    assert len(path.x) == 3 * len(v.path)  # one segment per accepted node
    last = by_name[v.last]
    assert last.marker.color == FATE_COLOURS[v.last] and last.text[0] == f"t{v.emitted[-1]}"
    # every judged node's hover states its numbers
    for i, fate in enumerate(v.fates):
        hover = node_hover(_frame(v), i)
        if fate != "unreached":
            assert num(v.accept_probs[i]) in hover and num(v.coins[i]) in hover
            assert num(v.h[i]) in hover and num(v.p[i]) in hover and num(v.q[i]) in hover


def test_a_partial_reveal_hides_later_fates_and_the_last_token():
    v = _verdict()
    fig = tree_figure(_frame(v, reveal=0))
    names = {t.name for t in fig.data}
    assert "not judged yet" in names and v.last not in names
    assert {"accepted", "rejected", "not reached"}.isdisjoint(names)
    fig1 = tree_figure(_frame(v, reveal=1))
    shown = {t.name: list(t.customdata) for t in fig1.data if t.customdata is not None}
    roots = children_of(PARENTS)[0]
    assert sorted(i for k, ids in shown.items() if k != "not judged yet" for i in ids) == roots
    with pytest.raises(ValueError, match="one label per node"):
        TreeFrame(v, ["x"], "root", "y")


def _tree_request(rule: str = "cactus", seed: int = 0, params=None) -> DecodeRequest:
    s = AppSettings(
        device="cpu",
        embedded_draft=FEATURE_LABEL,
        tree=TREE,
        sampling=SamplingSettings(seed=seed, temperature=0.7),
    )
    return DecodeRequest(
        "Hello", s, make_rule(rule, **({"delta": 1.0} if params is None else params)), 16, True
    )


@pytest.fixture(scope="module")
def tree_run(feature_pair) -> StepRun:
    run = StepRun.start(feature_pair, _tree_request())
    run.finish()
    return run


def test_step_through_takes_a_tree_round_apart(tree_run):
    assert tree_run.rounds and all(not r.sampled for r in tree_run.rounds)
    endings = set()
    for r, rnd in enumerate(tree_run.rounds):
        steps = round_steps(tree_run, r)
        kinds = [s.kind for s in steps]
        v = rnd.verdict
        depth = max(v.depths)
        assert kinds == ["draft"] * depth + ["verify"] + ["decide"] * len(v.decided_rows) + [
            "residual" if v.last == "recovered" else "bonus",
            "summary",
        ]
        endings.add(kinds[-2])
        for step in steps:
            for value in step.numbers.values():
                assert num(value) in step.narration, (step.kind, value)
            if rnd.branching:
                assert "tree" in step_figures(step)
            if step.kind == "decide":  # the row's exact p, q and h (first candidate)
                assert set(step.bars.series) == {"p", "q", "h"}
                assert "bars" in step_figures(step)
        # the decide steps reveal one depth more each, the ending all of it
        if rnd.branching:
            reveals = [s.frame.reveal for s in steps]
            assert reveals[: depth + 1] == [0] * (depth + 1) and reveals[-1] is None
    assert endings == {"residual", "bonus"}  # both endings occur in this run


def test_the_decode_inspector_shows_the_rounds_tree(tree_run):
    trace = tree_run.output.trace
    stats = live_stats(trace.rounds, 1.0)
    judged = sum(r.verdict.decided for r in trace.rounds)
    stats_out = tree_run.output.stats
    assert stats.acceptance_rate == pytest.approx(stats_out.accepted_tokens / judged)
    assert stats_out.decided_tokens == judged
    for rnd in [r for r in trace.rounds if r.branching][:4]:
        assert "-node tree" in round_label(rnd, False)
        for view in round_tokens(rnd, None):
            ins = inspect_token(trace, rnd.index, view.row, view.node)
            assert ins.frame is not None and ins.notes
            assert tree_figure(ins.frame).data


def _tree_session(feature_pair, monkeypatch, page: str, **state) -> AppTest:
    """A fresh session on the embedded pair's name with tree drafting, the tiny feature pair
    standing in for the embedded one."""
    from pages.shared import pair as pair_page

    monkeypatch.setattr(pair_page, "_PAIRS", PairCache(max_entries=2))
    monkeypatch.setattr(pair_page, "_load_pair", lambda *args: feature_pair)
    at = AppTest.from_file(APP, default_timeout=180)
    base = {
        "sb_device": "cpu",
        "sb_embedded_draft": FEATURE_LABEL,
        "sb_drafting": "tree",
        "sb_tree_nodes": TREE.nodes,
        "sb_tree_depth": TREE.depth,
    }
    for key, value in {**base, **state}.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def _titles(at: AppTest) -> list[str]:
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return [s["layout"].get("title", {}).get("text", "") for s in specs]


def test_the_decode_page_inspects_a_tree_run(feature_pair, monkeypatch):
    at = _tree_session(feature_pair, monkeypatch, "pages/decode.py", dec_max_new=16)
    at.button(key="dec_go").click().run()
    run = at.session_state["decode_run"]
    at.session_state[f"dec_round_{run.run_id}_0"] = True
    at.run()
    at.pills[0].set_value(0).run()
    assert not at.exception, at.exception
    assert any(m.value.startswith("**Round 1, depth 1") for m in at.markdown)
    assert any(t.startswith("The draft tree") for t in _titles(at))
    assert any(c.value.startswith("Tree rounds replay node by node") for c in at.caption)
    at.button(key="dec_replay").click().run()
    assert not at.exception, at.exception
    replay = at.session_state["decode_run"].replay
    assert replay is not None and replay.rounds[0].after.branching
    assert any(m.label == "tokens per call" for m in at.metric)


def test_step_through_page_shows_the_tree(feature_pair, monkeypatch):
    at = _tree_session(feature_pair, monkeypatch, "pages/step.py", step_max_new=16)
    run: StepRun = at.session_state["step_state"].run
    assert run.rounds[0].branching
    assert any(t.startswith("The draft tree") for t in _titles(at))
    at.button(key="step_next").click().run()
    at.button(key="step_next").click().run()
    assert not at.exception
    depth = max(run.rounds[0].verdict.depths)
    for _ in range(depth - 1):  # one draft step per depth, then the verify step
        at.button(key="step_next").click().run()
    assert at.subheader[0].value == round_steps(run, 0)[depth + 1].title  # the first decision


def test_step_through_page_tells_a_traversal_round(feature_pair, monkeypatch):
    """`block` picked with a tree: the page walks the round's nodes leaves first, each decide
    step telling traversal verification's weight and coin."""
    at = _tree_session(feature_pair, monkeypatch, "pages/step.py", step_max_new=16)
    at.selectbox(key="step_rule").set_value("block").run()
    assert not at.exception, at.exception
    run: StepRun = at.session_state["step_state"].run
    assert run.judge.name == "block" and run.rounds[0].branching
    steps = round_steps(run, 0)
    first = next(i for i, s in enumerate(steps) if s.kind == "decide")
    for _ in range(first):
        at.button(key="step_next").click().run()
    assert not at.exception, at.exception
    assert at.subheader[0].value == steps[first].title
    assert any("Traversal verification judges the tree" in m.value for m in at.markdown)


def test_the_frontier_page_sweeps_with_the_sidebars_tree(feature_pair, monkeypatch, tmp_path):
    import cactus_core.experiments.sweeps.run as sweep_module

    monkeypatch.setenv("CACTUS_CACHE_DIR", str(tmp_path))
    configs = []
    real = sweep_module.run_chunk
    monkeypatch.setattr(
        sweep_module, "run_chunk", lambda pair, cfg, *a: configs.append(cfg) or real(pair, cfg, *a)
    )
    at = _tree_session(feature_pair, monkeypatch, "pages/frontier.py")
    at.slider(key="fr_n_24").set_value(2)
    at.slider(key="fr_max_new").set_value(8)
    at.slider(key="fr_chunk").set_value(2)
    at.multiselect(key="fr_rules").set_value(["cactus"])
    at.run()
    at.text_input(key="fr_grid_cactus").set_value("0.5")
    at.run()
    at.button(key="fr_run").click().run()
    assert not at.exception, at.exception
    assert configs and all(c.tree == TREE for c in configs)
    table = next(d.value for d in at.dataframe if "NLL" in d.value.columns)  # cells as shown
    assert list(table["setting"]) == ["verifier-only", "cactus δ=0.5"]
    assert float(table["tokens/call"].iloc[1]) >= 1.0


def test_step_through_takes_a_traversal_round_apart(feature_pair):
    """`block` on a tree (traversal verification): every round's steps build, each number a
    step shows is in its narration, and there is one decide step per node whose coin was read,
    leaves first (post-order), the accepted one last."""
    run = StepRun.start(feature_pair, _tree_request("block", seed=3, params={}))
    run.finish()
    assert run.rounds
    for r, rnd in enumerate(run.rounds):
        steps = round_steps(run, r)
        if rnd.sampled:
            continue
        v = rnd.verdict
        decides = [s for s in steps if s.kind == "decide"]
        judged = [c for c in post_order(v.parents) if v.coin_judged(c)]
        assert len(decides) == len(judged) >= 1
        assert all("Traversal verification" in s.narration for s in decides)
        if v.path:
            assert "accepted" in decides[-1].narration and judged[-1] == v.path[-1]
        for step in steps:
            for value in step.numbers.values():
                assert num(value) in step.narration, (step.kind, value)


def test_tree_views_show_each_rows_acceptance_against_its_optimum(tree_run):
    """Step through's tree decide steps and the Decode inspector put the walk's lossless
    acceptance at a row beside the optimal-transport bound, computed from the trace's rows."""
    seen = 0
    trace = tree_run.output.trace
    for r, rnd in enumerate(tree_run.rounds):
        if not rnd.branching:
            continue
        for step in round_steps(tree_run, r):
            if step.kind == "decide" and "optimum" in step.numbers:
                assert 0 <= step.numbers["rrs"] <= step.numbers["optimum"] + 1e-6 <= 1 + 1e-6
                assert "optimal-transport bound" in step.narration
                seen += 1
        row = next(i for i, kids in enumerate(rnd.verdict.children) if len(kids) == 2)
        notes = inspect_token(trace, r, row).notes
        assert any("optimal-transport bound" in n for n in notes)
    assert seen
