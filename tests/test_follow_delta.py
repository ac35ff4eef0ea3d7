"""δ from the Decode page's slider to the formula, hop by hop (docs/architecture.md, "Follow δ").

A hop is a call that hands δ on, as a number or inside the rule, request or decoder that holds
it, to a function that reads it or passes it on. Returns, and storing it in a plain holder (the
form's `DecodeRequest`, the page's `Form`), are not hops. The test walks the route on the
source: each hop's caller exists and makes that call, each hop starts in the function the last
one called, and the route stays within MAX_HOPS and is the one the docs list.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_HOPS = 12

# (file, function that makes the call, the call as written, the function it reaches)
ROUTE = [
    ("pages/shared/rule_picker.py", "rule_picker", "RULES[name]", "Rule.__init__"),
    ("pages/decode.py", "main", "act", "act"),
    ("pages/decode.py", "act", "f.request.stream", "DecodeRequest.stream"),
    ("cactus_core/app/shared/request.py", "DecodeRequest.stream", "SpeculativeDecoder",
     "SpeculativeDecoder.__init__"),
    ("cactus_core/app/shared/request.py", "DecodeRequest.stream", "decoder.rounds",
     "SpeculativeDecoder.rounds"),
    ("cactus_core/engine/decoding/decoder.py", "SpeculativeDecoder.rounds", "self._decode",
     "SpeculativeDecoder._decode"),
    ("cactus_core/engine/decoding/decoder.py", "SpeculativeDecoder._decode", "rounds.run",
     "ChainRounds.run"),
    ("cactus_core/engine/decoding/chain_round.py", "ChainRounds.run", "verify_draft",
     "verify_draft"),
    ("cactus_core/engine/decoding/chain_round.py", "verify_draft", "verify", "verify"),
    ("cactus_core/maths/verify.py", "verify", "rule.accept", "Rule.accept"),
    ("cactus_core/maths/rules/base.py", "Rule.accept", "self.h_n", "Cactus.h_n"),
    ("cactus_core/maths/rules/cactus.py", "Cactus.h_n", "cactus_h", "cactus_h"),
]  # fmt: skip


def _function(path: Path, qualname: str) -> ast.FunctionDef:
    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    *owners, name = qualname.split(".")
    for owner in owners:
        scope = next(n.body for n in scope if isinstance(n, ast.ClassDef) and n.name == owner)
    found = [n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"{path.relative_to(ROOT)} has no {qualname}"
    return found[0]


def _calls(fn: ast.FunctionDef) -> set[str]:
    return {ast.unparse(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}


@pytest.mark.parametrize("hop", ROUTE, ids=lambda h: f"{h[1]}->{h[2]}")
def test_each_hop_makes_its_call(hop):
    file, caller, call, _ = hop
    assert call in _calls(_function(ROOT / file, caller)), f"{caller} no longer calls {call}"


def test_the_route_is_connected_and_short():
    assert len(ROUTE) <= MAX_HOPS
    reached = {"Rule.__init__"}  # the rule picker's number is in the rule from here on
    for i, (_, caller, _, callee) in enumerate(ROUTE[1:], 1):
        # a hop starts where δ is: the function the last hop reached, or the page and the
        # request it is held in between (returns and holders are not hops)
        assert caller in reached | {"main"}, (i, caller)
        reached.add(callee)
    # the last hop is the formula, with the rule's own δ
    h_n = _function(ROOT / "cactus_core/maths/rules/cactus.py", "Cactus.h_n")
    assert "cactus_h(d.qn, self.delta)" in ast.unparse(h_n)


def test_the_docs_list_the_same_route():
    docs = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    section = docs.split("## Follow δ", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^(\d+)\. (.+?)(?=^\d+\. |\Z)", section, re.M | re.S)
    assert [int(n) for n, _ in items] == list(range(1, len(ROUTE) + 1))
    for (_, text), (_, caller, call, _) in zip(items, ROUTE, strict=True):
        assert f"`{caller.split('.')[-1]}" in text or f"`{caller}" in text, (caller, text)
        assert f"`{call}" in text, (call, text)
