"""Sweep files made to exhaust a server that opens them: shared by
tests/test_red_team_sweep_files.py and benchmarks/bench_hostile_sweep_files.py."""

from __future__ import annotations

import gzip

from cactus_core.experiments.sweeps.cache import canonical_json, code_version
from cactus_core.experiments.sweeps.config import Setting
from cactus_core.experiments.sweeps.file import frame
from cactus_core.maths.sampling import SamplingSettings


def empty_body(n_prompts: int, n_settings: int) -> dict:
    """A sweep of n_prompts × n_settings in chunks of one prompt, with no records at all: the
    48 kB file (1,000 × 1,000) once took 40-130 s and 1.66 GB to refuse, 4,000 settings ran
    out of memory."""
    settings = [Setting.of("cactus", delta=round(0.001 * (i + 1), 6)).id for i in range(n_settings)]
    cfg = {**SamplingSettings().to_dict(), "max_new_tokens": 8, "chat_template": True,
           "chunk_size": 1, "limit": False, "own_estimate": False,
           "settings": settings}  # fmt: skip
    prov = {"command": "c", "commit": "x", "date": "2026-01-01", "machine": "m", "device": "cpu",
            "backend": "local", "workers": 1}  # fmt: skip
    return {"pair": "p", "config": cfg, "prompts": [{"text": "a", "task": ""}] * n_prompts,
            "code": code_version(), "provenance": prov, "chunks": []}  # fmt: skip


def empty_sweep(n_prompts: int, n_settings: int) -> bytes:
    """`empty_body` as a file, framed and hashed as the lab writes one."""
    return frame(canonical_json(empty_body(n_prompts, n_settings)))


def bomb(n_bytes: int, unit: bytes = b"{},") -> bytes:
    """gzip of `[{},{},…]` (or of another unit) unpacking to about n_bytes."""
    count = n_bytes // len(unit)
    return gzip.compress(b"[" + unit * (count - 1) + unit.rstrip(b",") + b"]", 9, mtime=0)
