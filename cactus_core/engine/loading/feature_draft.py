"""A feature-conditioned draft (EAGLE-1 style, Li et al., ICML 2024) for a Llama verifier.

The draft does not read tokens alone: at position t it reads the verifier's top-layer feature
f_t (the last decoder layer's output BEFORE the final norm) together with the embedding of the
token x_{t+1} that follows, and predicts the feature f_{t+1}:

    x_t      = fc([e(x_{t+1}) * embed_scale, f_t * feature_scale]) / feature_scale   [B, T, D]
    f^_{t+1} = LlamaDecoderLayer(x_t)   (attention over the draft's own earlier positions;
                                         a stack of them when config.num_hidden_layers > 1)
    logits   = verifier.lm_head(verifier.norm(f^_{t+1}))     (the distribution of x_{t+2})

A multi-depth draft (EAGLE-3 style, Li et al., 2025) also reads the outputs of some earlier
verifier layers (`feature_layers`, e.g. a low and a middle one): at the verifier-fed positions
f_t is then the fusion fuse([f_t^(l1) * s_l1, .., f_t * feature_scale]) / feature_scale of
those layers and the top one, a (n + 1) D -> D linear map that starts as "take the top
feature", so a warm-started multi-depth draft begins exactly as the draft it grew from. Its
own drafted positions read its predicted feature directly, as a one-depth draft's do.

The logits come from the verifier's own final norm and LM head, so a good feature prediction
is a good token prediction. For k > 1 drafted tokens the draft feeds back its own predicted
features (f^ in place of f), which is why it is trained unrolled (`forward_unrolled`).

The fixed input scales keep both halves of the fc input at unit RMS (a feature's RMS is ~30,
an embedding's ~0.14 for SmolLM2), so that an identity-initialised fc and Adam's per-weight
step sizes treat the two halves alike; they are constants stored in config.json.

Only the draft's own weights are stored (fc + its decoder layer(s), and the ids of a
vocabulary-subset head); the embedding, the final norm and the LM-head rows are the
verifier's, taken at load time. A subset head scores S ids and gives every other id
probability 0 (logit FILL), so the draft never proposes them; speculative sampling stays
exact (the verifier's residual still emits them).

Decoding protocol (batch rows share positions; no padding inside the draft):
    prefill: features f_0..f_{P-1} of the prompt, next_ids x_1..x_P (x_P: the first sampled
        token), start_pos 0 -> the last row of logits gives draft token d_1.
    drafting: forward(f^ [B,1,D], d_j [B,1], cache, start_pos=cache.length) -> d_{j+1}.
    after verification: cache.crop(position of the first drafted entry), then forward the
        verifier's real features of the accepted positions with their next tokens.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from cactus_core.engine.loading.deployment import ModelLoadError
from cactus_core.engine.loading.feature_draft_config import (
    check_head_ids,
    check_weights,
    read_config,
)
from cactus_core.engine.runtime.fast_head import linear_scores
from cactus_core.engine.runtime.transformers_names import (
    LlamaConfig,
    LlamaDecoderLayer,
    LlamaRotaryEmbedding,
    PreTrainedModel,
    apply_rotary_pos_emb,
)

FORMAT = "cactus-feature-draft"
FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
HEAD_IDS_KEY = "head_token_ids"
# Logit of ids outside a subset head: finite, so p * log p stays 0 (not NaN) downstream, and
# exp(FILL - max) is exactly 0 (the same value as cactus_core's VocabSubsetHead).
FILL = -1e30


class DraftKVCache:
    """Keys and values of the draft's attention layers, appendable and croppable.

    keys[l], values[l]: layer l's [B, n_kv_heads, L, head_dim] (empty lists while empty);
    L = `length`, the number of positions the draft has read. Rolling back rejected drafted
    positions is `crop(length)`.
    """

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    @property
    def length(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def append(
        self, k: torch.Tensor, v: torch.Tensor, layer: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `layer`'s k, v [B, n_kv, T, hd] -> its keys and values [B, n_kv, L + T, hd]."""
        if layer == len(self.keys):
            self.keys.append(k)
            self.values.append(v)
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=2)
        return self.keys[layer], self.values[layer]

    def crop(self, length: int) -> None:
        """Keep the first `length` positions (drop the rejected drafted ones)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"crop({length}): the cache holds {self.length} positions")
        if length == 0:
            self.keys, self.values = [], []
        else:
            self.keys = [k[:, :, :length] for k in self.keys]
            self.values = [v[:, :, :length] for v in self.values]


class FeatureDraft(nn.Module):
    """fc (2D -> D) + Llama decoder layers, on the verifier's embedding, norm and head.

    Own parameters (saved): fc.weight [D, 2D], fc.bias [D], layer.* (the first
    LlamaDecoderLayer) and extra_layers.{i}.* (the others, config.num_hidden_layers - 1 of
    them; none in a one-layer draft, whose files predate the stack); a multi-depth draft's
    fuse.weight [D, (n + 1) D] (n = len(feature_layers)).
    Buffers taken from the verifier (not saved): norm_weight [D] (its final RMSNorm),
    head_weight [S, D] (its LM-head rows of the head ids, scored by `fast_head.linear_scores`:
    in float32 a single row goes through a transposed copy, faster on CPU), head_ids [S]
    (None for the full vocabulary). The input embedding is the verifier's module itself, kept
    outside the module tree so it is neither saved, trained, nor copied by .to(dtype).
    """

    # its buffers and the borrowed embedding, as the methods read them
    fuse_scales: torch.Tensor
    norm_weight: torch.Tensor
    head_ids: torch.Tensor | None
    head_weight: torch.Tensor
    embedding: nn.Embedding

    def __init__(
        self,
        config: LlamaConfig,
        embedding: nn.Embedding,
        norm_weight: torch.Tensor,
        head_weight: torch.Tensor,
        head_ids: torch.Tensor | None,
        embed_scale: float,
        feature_scale: float,
        feature_layers: list[int] | None = None,
        layer_scales: list[float] | None = None,
    ) -> None:
        super().__init__()
        d = config.hidden_size
        self.feature_layers = [int(i) for i in feature_layers or []]
        self.layer_scales = [float(x) for x in layer_scales or [1.0] * len(self.feature_layers)]
        if len(self.layer_scales) != len(self.feature_layers):
            raise ValueError("layer_scales needs one scale per feature layer")
        self.config = config
        self.vocab_size = embedding.weight.shape[0]
        self.embed_scale = float(embed_scale)
        self.feature_scale = float(feature_scale)
        self.rms_eps = float(config.rms_norm_eps)
        self.fc = nn.Linear(2 * d, d, bias=True)
        # Multi-depth only: the earlier layers' features and the top one -> one feature.
        self.fuse = (
            nn.Linear((len(self.feature_layers) + 1) * d, d, bias=False)
            if self.feature_layers
            else None
        )
        # Each block of the fuse's input scaled to unit RMS ([(n + 1) D]; empty without fuse).
        scales = torch.tensor([*self.layer_scales, self.feature_scale] if self.fuse else [])
        self.register_buffer("fuse_scales", scales.repeat_interleave(d), persistent=False)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.extra_layers = nn.ModuleList(
            LlamaDecoderLayer(config, layer_idx=i) for i in range(1, config.num_hidden_layers)
        )
        self.rotary = LlamaRotaryEmbedding(config)
        object.__setattr__(self, "embedding", embedding)
        self.register_buffer("norm_weight", norm_weight.detach().clone(), persistent=False)
        if head_ids is not None:
            head_ids = torch.as_tensor(head_ids, dtype=torch.long).flatten()
            if head_ids.unique().numel() != head_ids.numel():
                raise ValueError("head_ids has repeated ids")
            head_weight = head_weight[head_ids]
        self.register_buffer("head_ids", head_ids, persistent=False)  # [S] or None
        self.register_buffer("head_weight", head_weight.detach().contiguous(), persistent=False)

    # -------------------------------------------------------------------------------------
    # Construction, load, save

    @classmethod
    def from_verifier(
        cls,
        verifier: PreTrainedModel,
        head_ids: torch.Tensor | None = None,
        embed_scale: float = 1.0,
        feature_scale: float = 1.0,
        init_layer: int = -1,
        num_layers: int = 1,
        feature_layers: list[int] | None = None,
        layer_scales: list[float] | None = None,
    ) -> FeatureDraft:
        """A new draft: the decoder layer copied from the verifier's layer `init_layer` (the
        last by default, which already maps a top-layer-like residual to a top feature), and
        an fc that starts as "feature + half the embedding" (identity blocks). Layers after the
        first start as the same copy with their output projections zeroed: identities on the
        residual stream, so a draft grown from a trained shallower one starts as that one. A
        multi-depth draft's fuse starts as the top feature alone (zero blocks for the others)."""
        draft = cls._bare(
            verifier, head_ids, embed_scale, feature_scale, num_layers, feature_layers, layer_scales
        )
        state = verifier.model.layers[init_layer].state_dict()
        draft.layer.load_state_dict(state)
        d = draft.config.hidden_size
        with torch.no_grad():
            extra: LlamaDecoderLayer
            for extra in draft.extra_layers:
                extra.load_state_dict(state)
                for out in (extra.self_attn.o_proj, extra.mlp.down_proj):
                    for part in (out.weight, out.bias):
                        if part is not None:
                            part.zero_()
            eye = torch.eye(d)
            draft.fc.weight.copy_(torch.cat([0.5 * eye, eye], dim=1))
            draft.fc.bias.zero_()
            if draft.fuse is not None:
                draft.fuse.weight.zero_()
                draft.fuse.weight[:, -d:].copy_(eye)
        return draft

    @classmethod
    def tiny_for(
        cls,
        verifier: PreTrainedModel,
        head_size: int | None = None,
        seed: int = 0,
        num_layers: int = 1,
        feature_layers: list[int] | None = None,
    ) -> FeatureDraft:
        """Random weights (for tests): fc, fuse and the layers drawn from a seeded generator."""
        vocab = verifier.get_input_embeddings().weight.shape[0]
        gen = torch.Generator().manual_seed(seed)
        ids = None if head_size is None else torch.randperm(vocab, generator=gen)[:head_size]
        draft = cls._bare(verifier, ids, 1.0, 1.0, num_layers, feature_layers)
        with torch.no_grad():
            for name, p in draft.named_parameters():
                base = 1.0 if "norm" in name else 0.0  # RMSNorm weights near 1
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
        return draft

    @classmethod
    def _bare(
        cls,
        verifier: PreTrainedModel,
        head_ids: torch.Tensor | None,
        embed_scale: float,
        feature_scale: float,
        num_layers: int = 1,
        feature_layers: list[int] | None = None,
        layer_scales: list[float] | None = None,
    ) -> FeatureDraft:
        if num_layers < 1:
            raise ValueError(f"a feature draft needs at least one layer, got {num_layers}")
        _check_feature_layers(feature_layers or [], verifier.config.num_hidden_layers)
        cfg = LlamaConfig.from_dict(verifier.config.to_dict())
        cfg.num_hidden_layers = num_layers
        cfg.quantization_config = None
        cfg.layer_types = None
        head = verifier.get_output_embeddings().weight  # [V, D]
        draft = cls(
            cfg,
            verifier.get_input_embeddings(),
            verifier.model.norm.weight,
            head,
            head_ids,
            embed_scale,
            feature_scale,
            feature_layers,
            layer_scales,
        )
        return draft.to(dtype=head.dtype, device=head.device)

    @classmethod
    def load(
        cls, folder: Path, verifier: PreTrainedModel, dtype: torch.dtype | None = None
    ) -> FeatureDraft:
        """The draft saved in `folder`, on `verifier`'s embedding, norm and head; `dtype`
        defaults to the verifier's."""
        folder = Path(folder)
        # Every field is checked and the size bounded before anything is built
        # (feature_draft_config): a damaged folder is one ModelLoadError naming it.
        meta, cfg = read_config(folder, CONFIG_NAME, FORMAT, verifier)
        feature_layers = meta.get("feature_layers", [])
        try:
            _check_feature_layers(feature_layers, verifier.config.num_hidden_layers)
        except ValueError as err:
            raise ModelLoadError(f"{folder / CONFIG_NAME}: {err}") from None
        head = verifier.get_output_embeddings().weight

        def build(head_ids: torch.Tensor | None) -> FeatureDraft:
            return cls(
                cfg,
                verifier.get_input_embeddings(),
                verifier.model.norm.weight,
                head,
                head_ids,
                meta["embed_scale"],
                meta["feature_scale"],
                feature_layers,
                meta.get("layer_scales"),
            )

        weights = folder / WEIGHTS_NAME
        try:
            with torch.device("meta"):  # the tensors' names and shapes, with no memory behind
                expected = build(None).state_dict()
        except (KeyError, TypeError, ValueError) as err:  # a layer kind transformers refuses
            reason = " ".join(str(err).split())
            raise ModelLoadError(
                f"{folder / CONFIG_NAME}: llama cannot be built ({reason})"
            ) from None
        check_weights(weights, expected, HEAD_IDS_KEY, cfg.vocab_size)
        tensors = load_file(str(weights))
        head_ids = tensors.pop(HEAD_IDS_KEY, None)
        if head_ids is not None:
            check_head_ids(weights, head_ids, HEAD_IDS_KEY, cfg.vocab_size)
        try:
            draft = build(head_ids)
        except ValueError as err:  # repeated head ids
            raise ModelLoadError(f"{weights}: {err}") from None
        draft.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
        return draft.to(dtype=dtype or head.dtype, device=head.device).eval()

    def save(
        self, folder: Path, info: dict[str, Any] | None = None, dtype: torch.dtype = torch.float32
    ) -> None:
        """config.json + model.safetensors (own weights in `dtype`, head ids as int64)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().to(dtype).contiguous() for k, v in self.state_dict().items()}
        if self.head_ids is not None:
            tensors[HEAD_IDS_KEY] = self.head_ids.detach().cpu().contiguous()
        save_file(tensors, str(folder / WEIGHTS_NAME))
        # `info` first: the fields that describe these weights must not be overridden by it.
        meta = {
            **(info or {}),
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "architecture": (
                f"fuse({len(self.feature_layers) + 1}D->D) + " if self.feature_layers else ""
            )
            + f"fc(2D->D) + {len(self.layers)} LlamaDecoderLayer, verifier norm + LM head",
            "embed_scale": self.embed_scale,
            "feature_scale": self.feature_scale,
            "feature_layers": self.feature_layers,
            "layer_scales": self.layer_scales,
            "head_size": None if self.head_ids is None else int(self.head_ids.numel()),
            "weights_dtype": str(dtype).removeprefix("torch."),
            "llama": self.config.to_dict(),
        }
        (folder / CONFIG_NAME).write_text(json.dumps(meta, indent=1, default=str))

    # -------------------------------------------------------------------------------------
    # Pieces shared by decoding and unrolled training

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def layers(self) -> list[LlamaDecoderLayer]:
        return [self.layer, *self.extra_layers]

    @property
    def input_width(self) -> int:
        """Width of the verifier features this draft reads: (n + 1) D for n feature layers."""
        return (len(self.feature_layers) + 1) * int(self.config.hidden_size)

    def fused(self, features: torch.Tensor) -> torch.Tensor:
        """Verifier features [B, T, (n + 1) D] (the feature layers', then the top one) ->
        [B, T, D]; a one-depth draft's [B, T, D] pass through."""
        if self.fuse is None:
            return features
        fused: torch.Tensor = self.fuse(features.to(self.dtype) * self.fuse_scales)
        return fused / self.feature_scale

    def inputs(self, features: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        """features [B, T, D] (the draft's own predictions) or [B, T, input_width] (the
        verifier's), any float dtype; next_ids [B, T] -> layer input [B, T, D]."""
        width, d = features.shape[-1], self.config.hidden_size
        if width != d:
            if width != self.input_width:
                raise ValueError(
                    f"features {width} wide: this draft reads {self.input_width} (the verifier's "
                    f"layers {[*self.feature_layers, 'top']}) or {d} (its own predictions)"
                )
            features = self.fused(features)
        e = self.embedding(next_ids).to(self.dtype) * self.embed_scale  # [B, T, D]
        f = features.to(self.dtype) * self.feature_scale  # [B, T, D]
        x: torch.Tensor = self.fc(torch.cat([e, f], dim=-1))
        return x / self.feature_scale

    def qkv(
        self, x: torch.Tensor, positions: torch.Tensor, layer: LlamaDecoderLayer
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, D], positions [T] -> q [B, H, T, hd], k and v [B, H_kv, T, hd] (RoPE'd)."""
        attn = layer.self_attn
        b, t, _ = x.shape
        hd = attn.head_dim
        h = layer.input_layernorm(x)
        q = attn.q_proj(h).view(b, t, -1, hd).transpose(1, 2)
        k = attn.k_proj(h).view(b, t, -1, hd).transpose(1, 2)
        v = attn.v_proj(h).view(b, t, -1, hd).transpose(1, 2)
        cos, sin = self.rotary(x, positions[None])  # [1, T, hd] each
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v

    def finish(
        self, x: torch.Tensor, attn_out: torch.Tensor, layer: LlamaDecoderLayer
    ) -> torch.Tensor:
        """Residual stream x [B, T, D] + attention output [B, H, T, hd] -> layer output."""
        b, _, t, _ = attn_out.shape
        x = x + layer.self_attn.o_proj(attn_out.transpose(1, 2).reshape(b, t, -1))
        out: torch.Tensor = x + layer.mlp(layer.post_attention_layernorm(x))
        return out

    def norm(self, features: torch.Tensor) -> torch.Tensor:
        """The verifier's final RMSNorm (computed in float32, as transformers does)."""
        f = features.float()
        f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.rms_eps)
        return self.norm_weight * f.to(self.norm_weight.dtype)

    def subset_logits(self, features: torch.Tensor) -> torch.Tensor:
        """features [..., D] -> scores of the head's ids [..., S] (S = V for a full head)."""
        return linear_scores(self, self.head_weight, self.norm(features).to(self.head_weight.dtype))

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """features [..., D] -> full-vocabulary logits [..., V], FILL outside a subset head."""
        sub = self.subset_logits(features)  # [..., S]
        if self.head_ids is None:
            return sub
        fill = max(torch.finfo(sub.dtype).min, FILL)
        out = sub.new_full((*sub.shape[:-1], self.vocab_size), fill)  # [..., V]
        return out.index_copy_(-1, self.head_ids, sub)

    # -------------------------------------------------------------------------------------
    # Decoding

    def forward(
        self,
        features: torch.Tensor,
        next_ids: torch.Tensor,
        cache: DraftKVCache,
        start_pos: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Read T positions and predict the next feature at each.

        features [B, T, input_width] or [B, T, D]: f at positions start_pos .. start_pos +
            T - 1 (the verifier's, or the draft's own predictions while drafting, `inputs`);
            next_ids [B, T]: the token after each of those positions. The cache must hold
            exactly the positions before start_pos; it gets these T appended.
        Returns (logits [B, T, V] of the token two after each position, i.e. of x_{t+2}, and
            the predicted features f^_{t+1} [B, T, D] in the draft's dtype).
        """
        if cache.length != start_pos:
            raise ValueError(f"start_pos {start_pos} but the cache holds {cache.length} positions")
        new_features = self.predict(features, next_ids, cache)
        return self.logits(new_features), new_features

    def predict(
        self,
        features: torch.Tensor,
        next_ids: torch.Tensor,
        cache: DraftKVCache,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`forward` at start_pos = cache.length without the head: features [B, T, D] and
        next_ids [B, T] -> predicted features [B, T, D] (the T positions appended to the
        cache). Decoding needs logits at the last position only, and the head costs about as
        much per row as a layer (a 12k-row head on SmolLM2, one CPU thread), so reading a
        round's m + 1 positions through `forward` would pay for m head rows nobody reads.

        A draft tree's level passes its own `positions` [T] (by depth) and `mask` [T, start +
        T] (bool: which cached and new positions each new one sees, its ancestors)."""
        start, t = cache.length, features.shape[1]
        x = self.inputs(features, next_ids)  # [B, T, D]
        if positions is None:
            positions = torch.arange(start, start + t, device=x.device)
        if mask is None and t > 1:  # query i sees keys up to start + i
            mask = torch.ones(t, start + t, dtype=torch.bool, device=x.device).tril(start)
        for i, layer in enumerate(self.layers):
            q, k, v = self.qkv(x, positions, layer)  # [B, H, T, hd], [B, H_kv, T, hd] x 2
            keys, values = cache.append(k, v, i)  # [B, H_kv, start + T, hd]
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=layer.self_attn.scaling, enable_gqa=True
            )  # [B, H, T, hd]
            x = self.finish(x, out, layer)
        return x

    # -------------------------------------------------------------------------------------
    # Training: every position drafts `depth` tokens at once ("training-time test", EAGLE-3)

    def forward_unrolled(
        self, features: torch.Tensor, tokens: torch.Tensor, depth: int
    ) -> list[torch.Tensor]:
        """What decoding would predict at draft steps 1..depth from every position at once.

        features [B, T, input_width]: the verifier's f_0 .. f_{T-1}; tokens [B, T + depth]: x_0 ..
        x_{T+depth-1} (right padding is fine: attention is causal).
        Chain i starts after the verifier has read position i. Its step d (1-based) reads,
        at position i + d - 1, the token x_{i+d} and the feature f_i (d = 1) or its own step
        d - 1 prediction, and attends to the verifier-fed positions 0..i plus its own steps
        2..d, exactly as the cache would hold them in decoding.
        Returns `depth` tensors [B, T, D]: element d - 1, row i = predicted f_{i+d}.
        """
        t = features.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=features.device).tril()  # [T, T]
        # Per layer: keys and values [B, H, T, hd] of step 1 (the verifier-fed positions),
        # then of each later step (every chain's own entry at that step).
        keys: list[list[torch.Tensor]] = [[] for _ in self.layers]
        values: list[list[torch.Tensor]] = [[] for _ in self.layers]
        outs: list[torch.Tensor] = []
        feats = features
        for d in range(1, depth + 1):
            x = self.inputs(feats, tokens[:, d : d + t])  # [B, T, D]
            positions = torch.arange(d - 1, d - 1 + t, device=x.device)
            for i, layer in enumerate(self.layers):
                attn = layer.self_attn
                rep = attn.num_key_value_groups
                q, k, v = self.qkv(x, positions, layer)
                keys[i].append(k.repeat_interleave(rep, dim=1))  # [B, H, T, hd]
                values[i].append(v.repeat_interleave(rep, dim=1))
                k1, *chain_k = keys[i]
                v1, *chain_v = values[i]
                main = (q @ k1.transpose(-1, -2)) * attn.scaling  # [B, H, T, T]
                main = main.masked_fill(~causal, float("-inf"))
                # Each chain's own later steps: one score per chain and step, [B, H, T, d - 1].
                diag = [(q * kc).sum(-1, keepdim=True) * attn.scaling for kc in chain_k]
                probs = torch.softmax(torch.cat([main, *diag], dim=-1).float(), dim=-1)
                probs = probs.to(q.dtype)
                out = probs[..., :t] @ v1  # [B, H, T, hd]
                for j, vc in enumerate(chain_v):
                    out = out + probs[..., t + j : t + j + 1] * vc
                x = self.finish(x, out, layer)
            feats = x
            outs.append(feats)
        return outs


def _check_feature_layers(layers: list[int], verifier_layers: int) -> None:
    # Ascending and distinct: the decoder captures them in the order the verifier runs them.
    if list(layers) != sorted(set(layers)):
        raise ValueError(f"feature_layers {layers}: list distinct layers in ascending order")
    if any(not 0 <= i < verifier_layers - 1 for i in layers):
        raise ValueError(
            f"feature_layers {layers}: a verifier with {verifier_layers} layers has earlier "
            f"layers 0 .. {verifier_layers - 2} (its last one gives the top feature)"
        )


def rms(x: torch.Tensor) -> float:
    """Root mean square of a tensor (used to pick embed_scale / feature_scale)."""
    return math.sqrt(x.float().pow(2).mean().item())
