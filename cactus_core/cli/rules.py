"""`python -m cactus_core rules`: the acceptance rules with their parameters and citations, and
each rule in words (docs/rules.md's two generated parts)."""

from __future__ import annotations

import argparse
import sys

from cactus_core.maths.rules import RULES


def add_rules(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rules", help="the acceptance rules with their parameters (Markdown)")
    p.set_defaults(handler=cmd_rules)


def cmd_rules(args: argparse.Namespace) -> int:
    from cactus_core.maths.rules.table import rules_in_words, rules_markdown

    sys.stdout.write(rules_markdown(RULES) + "\n" + rules_in_words(RULES))
    return 0
