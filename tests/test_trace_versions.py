"""Trace files of the previous format (version 1: per-draft lists, a verdict only for tree
rounds) still open, as rounds that hold their verdict as a tree like every new one; a hostile
value anywhere in a file is a ValueError, and a replay's rows are capped before allocation.

The three files in tests/data were written by the lab before the round record became one tree
(a chain run, a draft-tree run and a verifier-only run of the tiny test pair)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from cactus_core.engine.decoding import replay as replay_module
from cactus_core.engine.decoding.replay import reverify
from cactus_core.engine.decoding.trace import TRACE_VERSION, Trace
from cactus_core.maths.rules import make_rule

DATA = Path(__file__).parent / "data"
OLD_FATES = {"accepted": "accepted", "rejected": "rejected", "dropped": "unreached"}


def _old(name: str) -> dict:
    with gzip.open(DATA / f"trace_v1_{name}.json.gz", "rt") as f:
        return json.load(f)


@pytest.mark.parametrize("name", ["chain", "tree", "plain"])
def test_a_version_1_file_opens_and_saves_as_the_current_version(name):
    raw = _old(name)
    assert raw["version"] == 1
    trace = Trace.from_dict(raw)
    assert len(trace.rounds) == len(raw["rounds"]) > 0
    for old, rnd in zip(raw["rounds"], trace.rounds, strict=True):
        v = rnd.verdict
        assert rnd.emitted_ids == old["emitted_ids"]
        assert v.emitted == [*old["emitted_ids"]][: len(v.emitted)] or old["truncated"]
        assert rnd.next_id == old["next_id"] and rnd.sample_coin == old["sample_coin"]
        assert len(rnd.positions) == v.size + 1
        if old.get("tree") is not None:  # a tree round: the verdict it stored
            assert v.to_dict() == old["tree"]
            assert [v.tokens[i] for i in v.path] == old["draft_ids"]
        elif old["k"] == 0:  # a verifier-only step: a tree with no node
            assert rnd.sampled and v.size == 0 and rnd.emitted_fates == ["sampled"]
        else:  # a chain: the one-child tree of its drafts
            assert not rnd.branching
            assert v.parents == list(range(-1, old["k"] - 1))
            assert v.tokens == old["draft_ids"] and v.coins == old["accept_coins"]
            assert v.fates == [OLD_FATES[f] for f in old["draft_fates"]]
            assert len(v.path) == old["num_accepted"]
            assert rnd.draft_text == [trace.text(t) for t in v.tokens]
    again = Trace.from_json(trace.to_json())
    assert json.loads(trace.to_json())["version"] == TRACE_VERSION
    assert again.to_dict() == trace.to_dict()


@pytest.mark.parametrize("name", ["chain", "tree"])
def test_an_old_file_replays_its_own_rule_without_a_flip(name):
    trace = Trace.from_dict(_old(name))
    replay = reverify(trace, trace.rule)
    # The files keep 8 entries of each row (a tail smeared over the rest): a chain's decisions
    # replay exactly, a tree's later candidates read residuals of the cut rows.
    assert replay.flips == 0 and (replay.decisions_exact or name == "tree")
    drafted = [r for r in trace.rounds if not r.sampled]
    assert [r.num_accepted_after for r in replay.rounds] == [r.num_accepted for r in drafted]


def test_an_old_chain_round_whose_lists_disagree_is_refused():
    raw = _old("chain")
    raw["rounds"][0]["draft_fates"] = raw["rounds"][0]["draft_fates"][:-1]
    with pytest.raises(ValueError, match=r"not a trace: rounds\[0\]"):
        Trace.from_dict(raw)


def hostile_variants(doc: dict):
    """The trace with one value at a time replaced by what a hostile file may hold: a number
    too large for a float, a negative, text, a nested list."""
    values = [10**400, -1, "x", [[]]]  # each stands for a kind that escaped as another error

    def paths(obj, at=()):
        yield at
        items = obj.items() if isinstance(obj, dict) else enumerate(obj[:2]) if isinstance(
            obj, list) else ()  # fmt: skip
        for key, value in items:
            yield from paths(value, (*at, key))

    for path in list(paths(doc))[1:]:
        for value in values:
            variant = copy.deepcopy(doc)
            holder = variant
            for key in path[:-1]:
                holder = holder[key]
            holder[path[-1]] = value
            yield path, value, variant


@pytest.mark.parametrize("name", ["chain", "tree"])
def test_every_hostile_value_is_a_value_error(name):
    """Each field of a version-1 file and of its version-2 form, replaced by a hostile value,
    gives a ValueError on reading or replaying, never an OverflowError or a TypeError (10 of
    58 hostile files did)."""
    old = _old(name)
    for doc in (old, Trace.from_dict(old).to_dict()):
        for path, value, variant in hostile_variants(doc):
            try:
                reverify(Trace.from_text(json.dumps(variant)), make_rule("cactus", delta=0.5))
            except ValueError:
                pass
            except Exception as err:
                pytest.fail(f"{path} = {value!r}: {type(err).__name__}: {err}")


def test_a_replay_that_would_rebuild_too_many_cells_is_refused(monkeypatch):
    """Rows × vocabulary is capped before a round's rows are allocated."""
    trace = Trace.from_dict(_old("chain"))
    rows = max(len(r.positions) for r in trace.rounds if not r.sampled)
    vocab = int(trace.meta["vocab_size"])
    monkeypatch.setattr(replay_module, "MAX_REPLAY_CELLS", rows * vocab - 1)
    with pytest.raises(ValueError, match="cells a replay rebuilds at once"):
        reverify(trace, make_rule("cactus", delta=0.5))
