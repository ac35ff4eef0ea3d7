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
}
FATE_LABELS: dict[str, str] = {
    "accepted": "accepted draft",
    "rejected": "rejected draft (not emitted)",
    "recovered": "recovered (drawn from the residual)",
    "bonus": "bonus (all k accepted; drawn from q)",
    "sampled": "sampled by the verifier alone",
    "dropped": "dropped (drafted after a rejection, never judged)",
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
}
_CHIP_SYMBOL = {
    "accepted": "✓",
    "rejected": "✗",
    "recovered": "↺",
    "bonus": "★",
    "sampled": "•",
    "dropped": "–",
}


@dataclass(frozen=True)
class TokenView:
    """One token as the transcript shows it."""

    text: str
    fate: str  # accepted | rejected | recovered | bonus
    round: int
    slot: int
    flipped: bool = False


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
        title = html.escape(f"round {t.round + 1}, slot {t.slot + 1}: {FATE_LABELS[t.fate]}")
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


def flipped_slots(replay: Replay | None) -> dict[int, set[int]]:
    """Round index -> drafted slots whose fate changes under the replay."""
    if replay is None:
        return {}
    return {r.index: set(r.flipped_slots) for r in replay.rounds if r.flipped_slots}


def round_tokens(
    rnd: RoundTrace, flips: set[int] | None = None, include_dropped: bool = True
) -> list[TokenView]:
    """The tokens of one round in reading order: accepted drafts, the rejected draft, the
    dropped drafts after it (if asked), then the recovered or bonus token."""
    flips = flips or set()
    views: list[TokenView] = []
    m, emitted = rnd.num_accepted, len(rnd.emitted_ids)
    for j in range(rnd.k):
        fate = rnd.draft_fates[j]
        if fate == "accepted" and j >= emitted:
            break  # cut by EOS or the token budget
        if fate == "rejected" and emitted <= m:
            break  # the recovered token was cut, so the rejection never showed
        if fate == "dropped" and not include_dropped:
            continue
        views.append(TokenView(rnd.draft_text[j], fate, rnd.index, j, j in flips))
    if emitted > m:
        fate = rnd.emitted_fates[m]
        text = rnd.emitted_text[m] if m < len(rnd.emitted_text) else ""
        views.append(TokenView(text, fate, rnd.index, m if fate != "sampled" else 0))
    return views


def transcript_tokens(
    rounds: Sequence[RoundTrace], replay: Replay | None = None
) -> list[TokenView]:
    """Every round's tokens for the transcript (dropped drafts left out)."""
    flips = flipped_slots(replay)
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
