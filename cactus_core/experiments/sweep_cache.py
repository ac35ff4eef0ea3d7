"""On-disk cache for sweep chunks: one JSON file per (full configuration, model pair, chunk).

A key is the SHA-256 of the canonical JSON of everything that can change a chunk's numbers
(models, rule and parameters, sampling, prompts, seeds, code version), so a finished sweep
reruns with no model call and an interrupted one redoes only the chunks it had not written.
Writes go to a temporary file in the same folder and are renamed into place, so a crash
leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

# Bump when the stored chunk format or the meaning of a stored number changes.
CACHE_VERSION = 1


def default_cache_dir() -> Path:
    """$CACTUS_CACHE_DIR/sweeps, else ~/.cache/cactus-lab/sweeps (the models' cache root)."""
    root = os.environ.get("CACTUS_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "cactus-lab"
    return base / "sweeps"


def canonical_json(payload: Any) -> str:
    """Sorted keys, no whitespace: the same configuration always gives the same bytes."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)


def cache_key(payload: Any) -> str:
    return hashlib.sha256(canonical_json({"v": CACHE_VERSION, "key": payload}).encode()).hexdigest()


class SweepCache:
    """A folder of JSON records addressed by configuration payloads."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    def path(self, payload: Any) -> Path:
        key = cache_key(payload)
        return self.root / key[:2] / f"{key}.json"

    def get(self, payload: Any) -> Any | None:
        """The stored value, or None when absent, unreadable, or stored for another payload."""
        path = self.path(payload)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            # A missing file is the normal miss; an unreadable one is recomputed and rewritten.
            return None
        if not isinstance(record, dict) or record.get("key") != json.loads(canonical_json(payload)):
            return None
        return record.get("value")

    def put(self, payload: Any, value: Any) -> Path:
        """Store value atomically (temporary file in the same folder, fsync, rename)."""
        path = self.path(payload)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(
            {"v": CACHE_VERSION, "key": payload, "value": value}, sort_keys=True, allow_nan=False
        )
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def __contains__(self, payload: Any) -> bool:
        return self.get(payload) is not None
