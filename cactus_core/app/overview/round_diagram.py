"""One round of speculative sampling as a picture (an inline SVG, no scripts): draft, verify,
accept or resample, bonus. The Overview draws it and the other pages point to it, so every
page explains the loop with the same four boxes and the same colours as the transcript."""

from __future__ import annotations

import html

from cactus_core.app.shared.figures import FATE_COLOURS

_BOX_W, _BOX_H, _GAP, _TOP = 215, 122, 46, 30
# (title, lines, colour of the box's edge)
_STEPS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "1 · Draft",
        (
            "The small draft model",
            "proposes k tokens, one",
            "after another, each",
            "sampled from its p.",
        ),
        "#555555",
    ),
    (
        "2 · Verify",
        ("The large verifier scores", "all k + 1 positions in", "one forward pass:", "q at each."),
        "#555555",
    ),
    (
        "3 · Accept or resample",
        (
            "Each draft n, in order, is",
            "kept with probability a(n).",
            "A rejected one is redrawn",
            "and the round ends.",
        ),
        FATE_COLOURS["recovered"],
    ),
    (
        "4 · Bonus",
        (
            "If all k were kept, one",
            "more token is drawn",
            "from q, for free.",
            "Then a new round.",
        ),
        FATE_COLOURS["bonus"],
    ),
)


def round_diagram_svg() -> str:
    """The round as an SVG element, sized to its content (it scales to the column's width)."""
    width = 4 * _BOX_W + 3 * _GAP + 20
    height = _TOP + _BOX_H + 92
    parts = [
        f'<svg viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img" '
        'aria-label="One round: draft, verify, accept or resample, bonus" '
        'style="width:100%;max-width:1000px;height:auto;font-family:sans-serif;">',
        "<defs><marker id='arrow' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='7' "
        "markerHeight='7' orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' "
        "fill='#555'/></marker></defs>",
    ]
    for i, (title, lines, edge) in enumerate(_STEPS):
        x = 10 + i * (_BOX_W + _GAP)
        parts.append(
            f'<rect x="{x}" y="{_TOP}" width="{_BOX_W}" height="{_BOX_H}" rx="10" '
            f'fill="#ffffff" stroke="{edge}" stroke-width="2"/>'
        )
        parts.append(
            f'<text x="{x + 12}" y="{_TOP + 24}" font-size="16" font-weight="bold" '
            f'fill="#1f2a1f">{html.escape(title)}</text>'
        )
        for j, line in enumerate(lines):
            parts.append(
                f'<text x="{x + 12}" y="{_TOP + 48 + 19 * j}" font-size="14" '
                f'fill="#333333">{html.escape(line)}</text>'
            )
        if i < len(_STEPS) - 1:
            y = _TOP + _BOX_H / 2
            parts.append(
                f'<line x1="{x + _BOX_W + 4}" y1="{y}" x2="{x + _BOX_W + _GAP - 4}" y2="{y}" '
                'stroke="#555" stroke-width="2" marker-end="url(#arrow)"/>'
            )
    # what decides a(n), under the third box; the loop back to the draft, under everything
    x3 = 10 + 2 * (_BOX_W + _GAP)
    below = _TOP + _BOX_H
    parts.append(
        f'<text x="{x3 + 4}" y="{below + 22}" font-size="13" fill="#333333">'
        "the rule sets a(n): lossless is min(1, q_n / p_n);</text>"
    )
    parts.append(
        f'<text x="{x3 + 4}" y="{below + 40}" font-size="13" fill="#333333">'
        "Cactus raises q_n toward h_n within a budget δ</text>"
    )
    loop_y = below + 70
    x_end = 10 + 3 * (_BOX_W + _GAP) + _BOX_W / 2
    x_start = 10 + _BOX_W / 2
    parts.append(
        f'<path d="M{x_end},{below} L{x_end},{loop_y} L{x_start},{loop_y} L{x_start},{below + 4}" '
        'fill="none" stroke="#999" stroke-width="2" stroke-dasharray="6 4" '
        'marker-end="url(#arrow)"/>'
    )
    parts.append(
        f'<text x="{x_start + 12}" y="{loop_y - 8}" font-size="13" fill="#555555">'
        "next round, from the last token written</text>"
    )
    parts.append("</svg>")
    return "".join(parts)
