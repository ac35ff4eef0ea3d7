"""One chain round, read whole: the functions a reader opens to follow it from the coins to the
`RoundOutcome` (docs/architecture.md, "One chain round, whole"). The set is written down here
and measured from the source, so the figure in the docs is the code's and cannot grow unseen.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "cactus_core"

# file -> the definitions a chain round runs through (the decoder's default path; the lazy
# head's `verify_sequential` is the same round scored row by row, and the rule is its own file)
READING = {
    "engine/decoding/chain_round.py": [
        "Coins", "draw_coins", "ChainRounds.run", "verify_draft", "round_to_host",
    ],
    "engine/drafting/drafter.py": [
        "Draft", "draft_loop", "IndependentDrafter.propose", "IndependentDrafter.after_verify",
    ],
    "maths/verify.py": ["VerifyResult", "verify", "_emit", "_output_tokens", "_rows"],
    "engine/decoding/host.py": [
        "to_host", "_cast", "finite_rows", "check_finite", "pad_nan", "logprobs",
    ],
    "engine/decoding/outcome.py": ["RoundOutcome"],
}  # fmt: skip
# Measured when this was written: 339 lines over 5 files, against the goal of 250 over 4.
MAX_LINES, MAX_FILES = 340, 5


def _span(path: Path, qualname: str) -> int:
    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    *owners, name = qualname.split(".")
    for owner in owners:
        scope = next(n.body for n in scope if isinstance(n, ast.ClassDef) and n.name == owner)
    node = next(n for n in scope if getattr(n, "name", None) == name)
    assert isinstance(node, ast.FunctionDef | ast.ClassDef)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return node.end_lineno - first + 1


def chain_round_lines() -> int:
    return sum(_span(ROOT / f, name) for f, names in READING.items() for name in names)


def test_a_chain_round_reads_in_a_few_hundred_lines():
    assert len(READING) <= MAX_FILES
    assert chain_round_lines() <= MAX_LINES, chain_round_lines()
