"""What a model folder holds, checked and fingerprinted before and after transformers reads it.

- `weights_digest`: a SHA-256 over every file that decides a model's numbers (weights, config,
  tokenizer), so caches keyed on a pair notice new weights placed in the same folder. Each
  file's hash is remembered by (real path, inode, size, modification and change times), in
  memory and on disk, so a large model is read in full once, not on every load. The change
  time (ctime) is the kernel's: writing a file or setting its mtime back both move it, so
  weights edited in place are hashed again even when their size and mtime are restored.
- `hub_revision`: the commit of a hub snapshot folder.
- `check_config`: config.json's sizes are whole numbers in sane ranges before transformers
  allocates anything from them (a string where a number belongs, or a vocabulary of 10^12).
- `check_loading_info`: a checkpoint that lacks tensors the architecture needs is refused;
  transformers would fill them with random values and only log it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from cactus_core.engine.loading.deployment import ModelLoadError

# Files that change what a model computes. The GGUF converter's manifest is left out: it holds
# a timestamp, not numbers.
FINGERPRINTED = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json", ".model", ".txt",
                 ".jinja", ".tiktoken")  # fmt: skip
UNFINGERPRINTED = ("manifest.json",)
_BLOCK = 1 << 20
_memo: dict[tuple[str, int, int, int, int], str] = {}

# config.json fields transformers sizes tensors from, with the largest value accepted. Real
# models sit far below these (a 262k vocabulary, 16k hidden, a few hundred layers).
CONFIG_LIMITS = {
    "vocab_size": 1 << 20,
    "hidden_size": 1 << 16,
    "intermediate_size": 1 << 18,
    "num_hidden_layers": 1 << 10,
    "num_attention_heads": 1 << 10,
    "num_key_value_heads": 1 << 10,
    "head_dim": 1 << 12,
    "max_position_embeddings": 1 << 22,
}


def file_digest(path: Path, cache: Path | None = None) -> str:
    """sha256 of a whole file, remembered by its stamp (`_stamp`) in memory and, when a cache
    folder is given, on disk."""
    real = os.path.realpath(path)
    st = os.stat(real)
    key = (real, *_stamp(st))
    if key in _memo:
        return _memo[key]
    record = _record_path(cache, real) if cache is not None else None
    digest = _read_record(record, st) if record is not None else None
    if digest is None:
        h = hashlib.sha256()
        with open(real, "rb") as f:
            while block := f.read(_BLOCK):
                h.update(block)
        digest = h.hexdigest()
        if record is not None:
            _write_record(record, st, digest)
    _memo[key] = digest
    return digest


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    """What must be unchanged for a remembered hash to hold: inode, size, mtime and ctime (which
    no user call can set back)."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _record_path(cache: Path, real: str) -> Path:
    return cache / "digests" / f"{hashlib.sha256(real.encode()).hexdigest()[:32]}.json"


def _read_record(record: Path, st: os.stat_result) -> str | None:
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        if data["stamp"] == list(_stamp(st)):
            digest = data["sha256"]
            return digest if isinstance(digest, str) and len(digest) == 64 else None
    except (OSError, ValueError, KeyError, TypeError):
        pass  # a missing or damaged record: hash the file again
    return None


def _write_record(record: Path, st: os.stat_result, digest: str) -> None:
    # Best effort: a read-only cache only costs a re-hash on the next load.
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=record.parent, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"stamp": list(_stamp(st)), "sha256": digest}, f)
        os.replace(tmp, record)
    except OSError:
        pass


def weights_digest(folder: Path, cache: Path | None = None) -> str:
    """sha256 over the names and contents of the folder's model files (top level, as
    transformers reads them)."""
    h = hashlib.sha256()
    for p in sorted(Path(folder).iterdir()):
        if p.name in UNFINGERPRINTED or p.name.startswith(".") or not p.is_file():
            continue
        if p.suffix in FINGERPRINTED:
            h.update(f"{p.name}\0{file_digest(p, cache)}\n".encode())
    return h.hexdigest()


def state_digest(model: torch.nn.Module) -> str:
    """sha256 of a model's parameters and buffers, for pairs built in memory (no folder)."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\n".encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def hub_revision(folder: Path) -> str | None:
    """The commit of a hub snapshot (.../snapshots/<commit>), else None."""
    folder = Path(folder)
    return folder.name if folder.parent.name == "snapshots" else None


def check_config(folder: Path) -> None:
    """ModelLoadError naming the field (never its value) unless config.json is a JSON object
    whose size fields are whole numbers within CONFIG_LIMITS."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"{folder} has no config.json") from None
    except (OSError, ValueError):
        raise ModelLoadError(f"{folder}: config.json is not readable JSON") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{folder}: config.json must hold a JSON object")
    sections = [config] + [v for v in config.values() if isinstance(v, dict)]
    for section in sections:  # multimodal configs nest a text_config
        for name, high in CONFIG_LIMITS.items():
            if name not in section or section[name] is None:
                continue
            value = section[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ModelLoadError(
                    f"{folder}: config.json's {name!r} must be a whole number in [1, {high}]"
                )


def check_loading_info(
    info: dict[str, Any], folder: object, allowed_missing: Collection[str] = frozenset()
) -> None:
    """Refuse a checkpoint that lacks tensors (or has them in the wrong shape)."""
    missing = sorted(set(info.get("missing_keys") or ()) - set(allowed_missing))
    shapes = info.get("mismatched_keys") or ()
    mismatched = sorted(k[0] if isinstance(k, tuple) else k for k in shapes)
    if missing or mismatched:
        bad = missing or mismatched
        what = "lacks" if missing else "has wrongly shaped"
        raise ModelLoadError(
            f"the checkpoint in {folder} {what} {len(bad)} tensor(s) the model needs "
            f"(e.g. {', '.join(bad[:3])}); refusing to fill them with random values"
        )
