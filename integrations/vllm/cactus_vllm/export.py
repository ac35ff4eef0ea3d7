"""Folders vLLM can load for the lab's embedded pair, from the lab's own files (no hub).

Run it with the lab's Python (it needs transformers and the GGUF wheel, which the vLLM
environment does not have):

    PYTHONPATH=integrations/vllm .venv/bin/python -m cactus_vllm.export

and it prints {"verifier": <folder>, "draft": <folder>} as JSON (with `--shell`, as
`export VERIFIER=… DRAFT=…` lines: `eval "$(… --shell)"` sets both in a shell):

- verifier: the lab's float32 safetensors conversion of the embedded SmolLM2-135M-Instruct
  GGUF (~/.cache/cactus-lab/converted/..., made by `load_pair` or here), an ordinary Llama
  folder with its tokenizer and chat template;
- draft: the embedded 3-layer draft (cactus_core/assets/draft) as the subset-head
  architecture this plugin registers (`subset_head.py`): its layers, the verifier's
  embedding, the head's token ids and the verifier's tokenizer. Written once per version of
  its inputs, under the lab's cache folder (CACTUS_CACHE_DIR moves it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import shutil
import sys
import uuid
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from cactus_core.engine.loading.load_args import resolve_cache_dir
from cactus_core.engine.loading.models import (
    DRAFT_DIR,
    DRAFT_HEAD_IDS_KEY,
    DRAFT_WEIGHTS,
    convert_gguf_cached,
    embedded_gguf_path,
)
from cactus_vllm.draft_format import ARCHITECTURE, HEAD_IDS, HEAD_SIZE

EMBEDDING = "model.embed_tokens.weight"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
    "special_tokens_map.json",
)


def export_embedded(cache: Path | None = None) -> dict[str, str]:
    """The verifier's and the draft's folders (made when missing)."""
    cache = resolve_cache_dir(cache)
    verifier = convert_gguf_cached(embedded_gguf_path(), cache)
    return {"verifier": str(verifier), "draft": str(export_draft(verifier, cache / "vllm"))}


def export_draft(verifier: Path, root: Path) -> Path:
    """The draft folder under root, named by a hash of everything it is made from."""
    meta = json.loads((DRAFT_DIR / "config.json").read_text())
    inputs = [
        DRAFT_DIR / "config.json",
        DRAFT_DIR / DRAFT_WEIGHTS,
        DRAFT_DIR / meta[DRAFT_HEAD_IDS_KEY],
        verifier / "manifest.json",
    ]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in inputs[:1] + inputs[3:]))
    for p in inputs[1:3]:
        digest.update(hashlib.sha256(p.read_bytes()).digest())
    final = root / f"draft-{digest.hexdigest()[:16]}"
    if (final / "config.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        _write_draft(tmp, meta, verifier)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write_draft(out: Path, meta: dict, verifier: Path) -> None:
    tensors = load_file(str(DRAFT_DIR / DRAFT_WEIGHTS))
    ids = load_file(str(DRAFT_DIR / meta[DRAFT_HEAD_IDS_KEY]))["token_ids"].long()
    embedding = load_file(str(verifier / "model.safetensors"))[EMBEDDING]
    if tuple(embedding.shape) != (meta["vocab_size"], meta["hidden_size"]):
        raise ValueError(f"the verifier's embedding is {tuple(embedding.shape)}, not the draft's")
    tensors = {**tensors, EMBEDDING: embedding.float().contiguous(), HEAD_IDS: ids.contiguous()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {k: v for k, v in meta.items() if not k.startswith("cactus_")}
    config.update(
        {
            "architectures": [ARCHITECTURE],
            HEAD_SIZE: int(ids.numel()),
            "dtype": "float32",
            "tie_word_embeddings": True,
        }
    )
    (out / "config.json").write_text(json.dumps(config, indent=1))
    for name in TOKENIZER_FILES:
        if (verifier / name).is_file():
            shutil.copy2(verifier / name, out / name)
    if not torch.equal(load_file(str(out / "model.safetensors"))[HEAD_IDS], ids):
        raise OSError(f"{out}: the written head ids do not read back")


def shell_lines(folders: dict[str, str]) -> str:
    """`export VERIFIER=…` and `export DRAFT=…`, quoted for a POSIX shell's `eval`."""
    return "\n".join(f"export {name.upper()}={shlex.quote(path)}" for name, path in folders.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", default=None, help="the lab's cache folder")
    parser.add_argument(
        "--shell",
        action="store_true",
        help="print `export VERIFIER=… DRAFT=…` lines for a shell's eval instead of JSON",
    )
    args = parser.parse_args(argv)
    folders = export_embedded(Path(args.cache_dir) if args.cache_dir else None)
    print(shell_lines(folders) if args.shell else json.dumps(folders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
