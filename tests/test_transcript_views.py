"""The Decode transcript: the clean text first (the emitted tokens only, no struck drafts, in
the page's font), every draft one toggle away."""

from __future__ import annotations

from cactus_core.app.shared import transcript as T

TOKENS = [
    T.TokenView("The", "accepted", 0, 0),
    T.TokenView("Cities", "rejected", 0, 1),
    T.TokenView(" cacti", "recovered", 0, 1),
    T.TokenView(" store", "bonus", 1, 4),
]


def test_the_clean_text_is_what_was_written():
    clean = T.transcript_html("", TOKENS, annotated=False)
    assert "Cities" not in clean and "line-through" not in clean
    assert ">The<" in clean and "> cacti<" in clean and "> store<" in clean
    assert "monospace" not in clean
    assert "rejected draft" not in T.legend_html(annotated=False)


def test_the_annotated_view_strikes_every_rejected_draft():
    full = T.transcript_html("", TOKENS, annotated=True)
    assert "Cities" in full and "line-through" in full and "monospace" in full
    assert "rejected draft" in T.legend_html(annotated=True)
