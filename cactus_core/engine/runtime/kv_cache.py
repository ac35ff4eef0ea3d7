"""A KV cache for several sequences that advance by different amounts each round.

Speculative decoding appends k draft tokens (or k + 1 verifier tokens) per round and then
keeps only the accepted ones, and in a batch every row accepts a different number. Instead of
shuffling tensors, rejected slots stay in the cache as holes: a per-row validity mask hides them
from attention, and explicit position ids keep RoPE counting only real tokens. Columns that are
holes in every row are cropped from the end, so a single sequence never has holes and runs
without any mask at all (the lean path the live demo uses).

All bookkeeping that decides shapes (lengths, how much to crop) lives on the host as plain ints,
because the decoder reads the accepted counts once per round anyway; the tensors the model sees
are built on the model's device.
"""

from __future__ import annotations

import torch

from cactus_core.engine.runtime.fast_head import head_logits
from cactus_core.engine.runtime.transformers_names import DynamicCache, PreTrainedModel

# Entries of one prefill piece's attention mask (rows × piece width × keys): 2^23 floats are
# 32 MiB, and the attention scores of the piece are of the same order per head.
MASK_BUDGET = 1 << 23
PIECE_MIN = 16  # narrower pieces cost more in per-forward overhead than they save


class SequenceCache:
    """KV cache of one model for a batch of sequences, with per-row holes.

    `valid[b][j]` says whether column j of row b holds a real token; `lengths[b]` counts them and
    is therefore the position id of row b's next token.
    """

    def __init__(self, model: PreTrainedModel, vocab_size: int) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.device = model.device
        # Models whose causal-LM head is a plain linear layer on the base model's output run the
        # base model and apply the head only to the columns whose logits are wanted (the prefill
        # needs none, a draft step one); others (soft-capped or scaled logits) use the full model.
        config = model.config
        special = any(
            getattr(config, name, None) not in (None, 1.0)
            for name in ("final_logit_softcapping", "logit_scale", "logits_scaling")
        )
        self.base = None if special else model.base_model
        self.head = None if special else model.get_output_embeddings()
        self.cache = DynamicCache()
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=self.device)  # [B, S]
        self.valid_host: list[list[bool]] = []
        self.lengths: list[int] = []
        self.holes = False
        self._tree_start = 0  # the context's width before the latest `step_tree`

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        return len(self.valid_host[0]) if self.valid_host else 0

    @torch.inference_mode()
    def prefill(self, prefixes: list[list[int]]) -> None:
        """Encode each row's prefix (no logits are needed: the last token is fed by `step`).

        Rows are right-padded to a common width; padding columns become holes. A padded batch
        is encoded in pieces of columns so that its memory stays bounded (MASK_BUDGET).
        """
        self.cache = DynamicCache()
        width = max(len(p) for p in prefixes)
        self.valid_host = [[] for _ in prefixes]
        self.lengths = [0] * len(prefixes)
        self.holes = False
        self.valid = torch.zeros(len(prefixes), 0, dtype=torch.bool, device=self.device)
        if width == 0:
            return
        ids = torch.tensor(
            [p + [0] * (width - len(p)) for p in prefixes], dtype=torch.long, device=self.device
        )
        valid_host = [[True] * len(p) + [False] * (width - len(p)) for p in prefixes]
        # A batch with padding attends through a dense [B, 1, w, S] mask (and scores of that
        # size): one forward over all of a long prefix would need rows × width² of each. Pieces
        # of columns keep every piece's mask within MASK_BUDGET entries; one sequence without
        # padding uses the model's own causal path and needs no pieces.
        piece = width
        if len(prefixes) > 1 or not all(all(r) for r in valid_host):
            piece = max(PIECE_MIN, MASK_BUDGET // (len(prefixes) * width))
        for start in range(0, width, piece):
            cols = slice(start, min(start + piece, width))
            new_valid_host = [r[cols] for r in valid_host]
            new_valid = torch.tensor(new_valid_host, dtype=torch.bool, device=self.device)
            self._forward(ids[:, cols], new_valid, new_valid_host, 0)

    @torch.inference_mode()
    def step(
        self,
        input_ids: torch.Tensor,
        new_valid_host: list[list[bool]] | None = None,
        num_logits: int = 1,
    ) -> torch.Tensor:
        """Append input_ids [B, w] (holes where new_valid_host is False) and return the logits of
        the last num_logits columns, [B, num_logits, V] float32."""
        w = input_ids.shape[1]
        if new_valid_host is None:
            new_valid_host = [[True] * w for _ in range(self.batch_size)]
            new_valid = None
        else:
            new_valid = torch.tensor(new_valid_host, dtype=torch.bool, device=self.device)
        return self._forward(input_ids, new_valid, new_valid_host, num_logits)

    @property
    def lean(self) -> bool:
        """Whether the head can be applied separately (`step_hidden` and `logits`)."""
        return self.base is not None

    @torch.inference_mode()
    def step_hidden(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Append input_ids [B, w] (no holes) and return the base model's hidden states of the
        new columns, [B, w, H]; `logits` turns any of them into logits. Needs `lean`."""
        if self.base is None:
            raise ValueError("step_hidden needs a model whose head is a plain linear layer")
        w = input_ids.shape[1]
        return self._forward(input_ids, None, [[True] * w] * self.batch_size, 0, hidden=True)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, m, H] from `step_hidden` -> logits [B, m, V] float32."""
        if self.head is None:
            raise ValueError("logits needs a model whose head is a plain linear layer")
        return head_logits(self.head, hidden)[..., : self.vocab_size].float()

    def _model_pass(
        self,
        input_ids: torch.Tensor,
        mask: torch.Tensor | None,
        positions: torch.Tensor | None,
        num_logits: int,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One forward of input_ids [B, w] through the cache: the hidden states [B, w, H] (with
        `lean`, else None) and the raw logits of the last num_logits columns (None for none
        with `lean`)."""
        w = input_ids.shape[1]
        kw = {"attention_mask": mask, "position_ids": positions, "cache": self.cache}
        if self.base is not None and self.head is not None:
            states = self.base(input_ids=input_ids, use_cache=True, **kw).last_hidden_state
            logits = head_logits(self.head, states[:, w - num_logits :]) if num_logits else None
            return states, logits
        out = self.model(
            input_ids=input_ids, use_cache=True, logits_to_keep=max(num_logits, 1), **kw
        )
        return None, out.logits[:, w - num_logits :]

    def _forward(
        self,
        input_ids: torch.Tensor,
        new_valid: torch.Tensor | None,
        new_valid_host: list[list[bool]],
        num_logits: int,
        hidden: bool = False,
    ) -> torch.Tensor:
        b, w = input_ids.shape
        self.holes = self.holes or not all(all(r) for r in new_valid_host)
        if new_valid is None:
            new_valid = torch.ones(b, w, dtype=torch.bool, device=self.device)
        if b == 1 and not self.holes:
            # One sequence, no holes: the model's own causal mask and positions are exact.
            mask = positions = None
        else:
            positions = self._positions(new_valid_host)
            mask = self._mask(new_valid)
        states, logits = self._model_pass(input_ids, mask, positions, num_logits)
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        for row, new in enumerate(new_valid_host):
            self.valid_host[row].extend(new)
            self.lengths[row] += sum(new)
        if hidden and states is not None:  # `step_hidden` checked `lean`
            return states
        if logits is None:
            return torch.zeros(b, 0, self.vocab_size, device=self.device)
        return logits[..., : self.vocab_size].float()

    def _positions(self, new_valid_host: list[list[bool]]) -> torch.Tensor:
        rows = []
        for start, new in zip(self.lengths, new_valid_host, strict=True):
            pos, row = start, []
            for ok in new:
                # A hole gets its neighbour's position; it is masked, so the value is irrelevant.
                row.append(pos if ok else max(pos - 1, 0))
                pos += ok
            rows.append(row)
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def _mask(self, new_valid: torch.Tensor) -> torch.Tensor:
        # [B, 1, w, S + w] additive mask: 0 where attending, dtype-min elsewhere. A float mask
        # keeps rows that see nothing (a hole's own query) finite, where a boolean one gives NaN.
        w = new_valid.shape[1]
        s = self.valid.shape[1]
        keys = torch.cat([self.valid, new_valid], dim=1)  # [B, S + w]
        col = torch.arange(s + w, device=self.device)
        row = torch.arange(w, device=self.device)[:, None] + s
        allowed = keys[:, None, None, :] & (col[None, :] <= row)[None, None]
        dtype = self.model.dtype
        zero = torch.zeros((), dtype=dtype, device=self.device)
        neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=self.device)
        return torch.where(allowed, zero, neg)

    @torch.inference_mode()
    def step_tree(self, input_ids: torch.Tensor, parents: list[int]) -> torch.Tensor:
        """One sequence: append the w tokens of a tree, input_ids [1, w] in topological order,
        and return the logits of every column, [1, w, V] float32.

        parents[j]: the column of this call that token j follows, or -1 for a token that
        follows the cached context. Each token attends to the context and to its ancestors
        and itself (a tree attention mask) and takes the position of its depth (position ids
        length + depth), so every root-to-node path is read exactly as a chain of those tokens
        would be (`tests/test_tree_decoding.py`). `keep_path` then keeps one path."""
        if self.batch_size != 1 or self.holes:
            raise ValueError("step_tree takes one sequence without holes")
        w = input_ids.shape[1]
        depth: list[int] = []
        for j, parent in enumerate(parents):
            if not -1 <= parent < j:
                raise ValueError(f"parents[{j}] = {parent}: a parent comes before its child")
            depth.append(0 if parent < 0 else depth[parent] + 1)
        ancestor = torch.eye(w, dtype=torch.bool)  # [w, w]: row j sees column i
        for j, parent in enumerate(parents):
            if parent >= 0:
                ancestor[j] |= ancestor[parent]
        s = self.width
        allowed = torch.cat([torch.ones(w, s, dtype=torch.bool), ancestor], 1).to(self.device)
        dtype = self.model.dtype
        mask = torch.zeros((1, 1, w, s + w), dtype=dtype, device=self.device)
        mask.masked_fill_(~allowed[None, None], torch.finfo(dtype).min)
        positions = torch.tensor([[self.lengths[0] + d for d in depth]], device=self.device)
        self._tree_start = s
        _, logits = self._model_pass(input_ids, mask, positions, w)
        assert logits is not None  # w > 0 columns asked for
        self.valid = torch.cat(
            [self.valid, torch.ones(1, w, dtype=torch.bool, device=self.device)], 1
        )
        self.valid_host[0].extend([True] * w)
        self.lengths[0] += w
        return logits[..., : self.vocab_size].float()

    def keep_path(self, columns: list[int]) -> None:
        """After `step_tree`: keep the context and these columns of the tree call (a root-to-
        node path, in order), drop the rest; the cache then holds what a chain of the path's
        tokens would have left."""
        keep = list(range(self._tree_start)) + [self._tree_start + c for c in columns]
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(-2, index)
            layer.values = layer.values.index_select(-2, index)
        self.valid_host = [[True] * len(keep)]
        self.valid = torch.ones(1, len(keep), dtype=torch.bool, device=self.device)
        self.lengths = [len(keep)]

    def keep(self, lengths: list[int]) -> None:
        """Roll back: row b keeps its first lengths[b] real tokens (its most recent ones are
        dropped); columns that are holes in every row are cropped from the end."""
        for row, (want, have) in enumerate(zip(lengths, self.lengths, strict=True)):
            if want > have:
                raise ValueError(f"row {row}: cannot keep {want} tokens, the cache has {have}")
            drop = have - want
            cols = self.valid_host[row]
            j = len(cols) - 1
            while drop > 0:
                if cols[j]:
                    cols[j] = False
                    drop -= 1
                j -= 1
            self.lengths[row] = want
        last = max(max((j for j, ok in enumerate(r) if ok), default=-1) for r in self.valid_host)
        crop = self.width - (last + 1)
        if crop > 0:
            self.cache.crop(-crop)
            self.valid_host = [r[: last + 1] for r in self.valid_host]
        self.holes = not all(all(r) for r in self.valid_host)
        self.valid = torch.tensor(self.valid_host, dtype=torch.bool, device=self.device).reshape(
            self.batch_size, -1
        )

    def select(self, rows: list[int]) -> None:
        """Keep only these batch rows (finished sequences leave the batch)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        if self.width > 0:
            self.cache.batch_select_indices(index)
        self.valid = self.valid[index]
        self.valid_host = [self.valid_host[r] for r in rows]
        self.lengths = [self.lengths[r] for r in rows]
        self.holes = not all(all(r) for r in self.valid_host)
