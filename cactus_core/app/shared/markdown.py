"""Names from links, sidebars and sweep files shown in Markdown: as text, never as markup.

A model name is whatever a link or a file says it is, so a page never pastes one into
Markdown as it is: `[text](https://…)` would render a link and `**` would restyle the line.
"""

from __future__ import annotations

import re

# What can start markup inside a line: emphasis, code, links and images ([ ]), raw HTML and
# autolinks (< > and the ":" of a bare URL), tables, strikethrough, LaTeX, Streamlit's
# :colour[…] and :material/…: directives. A name is one line, so block markup (#, -, +, 1.)
# cannot start.
_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|~$:])")


def md_text(name: str) -> str:
    """`name` escaped for Markdown: every character that could start markup in a line
    backslashed, and newlines as spaces (a name is one line)."""
    return _SPECIAL.sub(r"\\\1", " ".join(name.split()))


def md_code(name: str) -> str:
    """`name` as inline code, fenced by more backticks than it holds in a row."""
    name = " ".join(name.split())
    longest = max((len(run) for run in re.findall(r"`+", name)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if name.startswith("`") or name.endswith("`") or longest else ""
    return f"{fence}{pad}{name}{pad}{fence}"
