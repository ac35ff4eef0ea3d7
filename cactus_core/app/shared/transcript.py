"""Tokens of a decode run as the Decode page draws them: fates, colours, the transcript's HTML
and the chips' Markdown. Everything a user can type ends up escaped here."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cactus_core.engine.decoding.replay import Replay
    from cactus_core.engine.decoding.trace import RoundTrace

FATE_STYLE: dict[str, str] = {
    "accepted": "background:#d8f0e6;border-bottom:2px solid #009E73;",
    "rejected": (
        "background:#fbe3d6;color:#8a3200;text-decoration:line-through;"
        "border-bottom:2px solid #D55E00;"
    ),
    "recovered": "background:#fcefcf;border-bottom:2px solid #E69F00;",
    "bonus": "background:#d6e8f5;border-bottom:2px solid #0072B2;",
    # verifier-only steps (when the context leaves no room to draft) and never-judged drafts
    "sampled": "border-bottom:2px solid #999999;",
    "dropped": "color:#999999;text-decoration:line-through;",
    "not tried": "color:#999999;",
}
FATE_LABELS: dict[str, str] = {
    "accepted": "accepted draft",
    "rejected": "rejected draft (not emitted)",
    "recovered": "recovered (drawn from the residual)",
    "bonus": "bonus (all k accepted; drawn from q)",
    "sampled": "sampled by the verifier alone",
    "dropped": "dropped (drafted after a rejection, never judged)",
    "not tried": "not tried (the walk took another branch)",
}
# The clean text: the emitted tokens only, each underlined in its fate's colour (no struck
# drafts, no fills), in the page's own font, so it reads as the answer it is.
CLEAN_STYLE: dict[str, str] = {
    "accepted": "border-bottom:2px solid #009E73;",
    "recovered": "border-bottom:2px solid #E69F00;",
    "bonus": "border-bottom:2px solid #0072B2;",
    "sampled": "border-bottom:2px solid #999999;",
}
_LEGEND_FATES = ("accepted", "rejected", "recovered", "bonus")
_CHIP_COLOUR = {
    "accepted": "green",
    "rejected": "red",
    "recovered": "orange",
    "bonus": "blue",
    "sampled": "gray",
    "dropped": "gray",
    "not tried": "gray",
}
_CHIP_SYMBOL = {
    "accepted": "✓",
    "rejected": "✗",
    "recovered": "↺",
    "bonus": "★",
    "sampled": "•",
    "dropped": "–",
    "not tried": "·",
}


@dataclass(frozen=True)
class TokenView:
    """One token as the transcript shows it: its fate, its round, the row of the round's tree it
    was judged or drawn at (the inspector's index), and the drafted node it is, if one."""

    text: str
    fate: str  # accepted | rejected | dropped | recovered | bonus | sampled
    round: int
    row: int
    node: int | None = None
    flipped: bool = False


def node_fates(rnd: RoundTrace) -> list[str]:
    """Each node's fate as the pages name it: "accepted", "rejected", "dropped" (never judged
    because a candidate above it was rejected: a chain's drafts after its rejection) or "not
    tried" (never judged because the walk took another branch)."""
    v = rnd.verdict
    out: list[str] = []
    for i, fate in enumerate(v.fates):
        if fate != "unreached":
            out.append(fate)
            continue
        parent = v.parents[i]
        below_rejection = parent >= 0 and out[parent] in ("rejected", "dropped")
        out.append("dropped" if below_rejection else "not tried")
    return out


def show_text(text: str) -> str:
    """Whitespace made visible, for labels and tables."""
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def _visible(text: str, fate: str) -> str:
    # A struck-through space is invisible; rejected whitespace gets a visible stand-in.
    if fate == "rejected":
        text = text.replace(" ", "␣").replace("\n", "↵")
    return html.escape(text) if text else "∅"


def legend_html(annotated: bool = True) -> str:
    """The fate legend, styled like the transcript (the clean text's has no rejected drafts)."""
    styles = FATE_STYLE if annotated else CLEAN_STYLE
    items = [
        f'<span style="{styles[f]}padding:1px 4px;border-radius:3px;">{FATE_LABELS[f]}</span>'
        for f in _LEGEND_FATES
        if f in styles
    ]
    items.append(
        '<span style="outline:2px dashed #6a1b9a;padding:1px 4px;border-radius:3px;">'
        "fate flips under replay</span>"
    )
    return (
        '<div style="display:flex;flex-wrap:wrap;gap:8px;font-size:0.9em;">'
        + "".join(items)
        + "</div>"
    )


def transcript_html(prompt_text: str, tokens: Sequence[TokenView], annotated: bool = True) -> str:
    """The decoded text with every token coloured by fate (a block of HTML, no scripts).
    annotated: every round as drafted, rejected drafts struck through, in a monospace font;
    otherwise the clean text, the emitted tokens only, each underlined by how it came."""
    font = "ui-monospace,SFMono-Regular,Menlo,monospace" if annotated else "inherit"
    parts = [
        '<div class="cactus-transcript" style="white-space:pre-wrap;overflow-wrap:anywhere;'
        f"line-height:1.9;font-family:{font};"
        "font-size:0.92em;padding:10px 12px;"
        'border:1px solid #dfe5da;border-radius:8px;background:#ffffff;">'
    ]
    if prompt_text:
        parts.append(f'<span style="color:#7a857a;">{html.escape(prompt_text)}</span>')
    for t in tokens:
        style = FATE_STYLE.get(t.fate)
        if style is None:
            raise ValueError(f"unknown fate {t.fate!r}; expected one of {', '.join(FATE_STYLE)}")
        if not annotated:
            if t.fate not in CLEAN_STYLE:
                continue  # a rejected or dropped draft was never written
            style = CLEAN_STYLE[t.fate]
        if t.flipped:
            style += "outline:2px dashed #6a1b9a;"
        title = html.escape(f"round {t.round + 1}: {FATE_LABELS[t.fate]}")
        text = _visible(t.text, t.fate) if annotated else html.escape(t.text)
        parts.append(f'<span title="{title}" style="{style}border-radius:3px;">{text}</span>')
    parts.append("</div>")
    return "".join(parts)


def chip_label(t: TokenView) -> str:
    """A Markdown label for a clickable token chip (st.pills), coloured by fate."""
    text = show_text(t.text)
    # Markdown would read these as formatting.
    for ch in "\\`*_[]<>#~$:|":
        text = text.replace(ch, "\\" + ch)
    colour = _CHIP_COLOUR[t.fate]
    body = f"~~{text}~~" if t.fate in ("rejected", "dropped") else text
    mark = "⟲ " if t.flipped else ""
    return f"{mark}{_CHIP_SYMBOL[t.fate]} :{colour}-background[:{colour}[{body}]]"


def flipped_nodes(replay: Replay | None) -> dict[int, set[int]]:
    """Round index -> drafted nodes whose fate changes under the replay."""
    if replay is None:
        return {}
    return {r.index: set(r.flipped) for r in replay.rounds if r.flipped}


def round_tokens(
    rnd: RoundTrace, flips: set[int] | None = None, include_dropped: bool = True
) -> list[TokenView]:
    """The tokens of one round in reading order: at each row the walk stood on, the candidates
    tried there (the rejected ones, then the accepted one), each rejected one followed, if
    asked, by the drafts below it that were dropped; then the recovered or bonus token (or a
    verifier-only step's sample). Rows whose token EOS or the budget cut show nothing."""
    flips = flips or set()
    v = rnd.verdict
    fates, kids = node_fates(rnd), v.children
    emitted = len(rnd.emitted_ids)
    views: list[TokenView] = []

    def dropped_below(node: int) -> None:
        for child in kids[node + 1]:
            if fates[child] == "dropped":
                views.append(
                    TokenView(rnd.draft_text[child], "dropped", rnd.index, node + 1, child)
                )
                dropped_below(child)

    for slot, row in enumerate(v.path_rows[:emitted]):
        for i in kids[row]:
            if fates[i] not in ("accepted", "rejected"):
                continue
            views.append(TokenView(rnd.draft_text[i], fates[i], rnd.index, row, i, i in flips))
            if fates[i] == "rejected" and include_dropped:
                dropped_below(i)
        if slot == len(v.path):
            text = rnd.emitted_text[slot] if slot < len(rnd.emitted_text) else ""
            views.append(TokenView(text, rnd.emitted_fates[slot], rnd.index, row))
    return views


def transcript_tokens(
    rounds: Sequence[RoundTrace], replay: Replay | None = None
) -> list[TokenView]:
    """Every round's tokens for the transcript (dropped drafts left out)."""
    flips = flipped_nodes(replay)
    out: list[TokenView] = []
    for rnd in rounds:
        out.extend(round_tokens(rnd, flips.get(rnd.index), include_dropped=False))
    return out


def num(x: float) -> str:
    """How a probability, coin or KL appears in a sentence: three decimals, or two significant
    digits below 0.0005, where three decimals would print a non-zero q_n as 0.000."""
    return f"{x:.3f}" if x == 0 or abs(x) >= 5e-4 else f"{x:.1e}"


def tok(text: str) -> str:
    """A token in a sentence: quoted, whitespace made visible."""
    return f"'{show_text(text)}'"
