"""What the plugin did in this process: the vLLM version it found and each patch's outcome.
`plugin.register` writes it; the guard reads it to refuse a rule whose patch is not in place.
A module of its own, so that the guard needs nothing of the plugin that applies the patches."""

from __future__ import annotations

CHECKED_VERSIONS = ("0.32.0",)  # the vLLM releases this plugin was tested against

_STATUS: dict[str, str] = {}


def record(name: str, outcome: str) -> None:
    _STATUS[name] = outcome


def recorded() -> bool:
    return bool(_STATUS)


def status() -> dict[str, str]:
    """What register() did in this process: each patch's outcome, and vLLM's version."""
    return dict(_STATUS)
