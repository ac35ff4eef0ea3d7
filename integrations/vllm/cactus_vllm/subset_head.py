"""The lab's subset-head draft as a vLLM model: a Llama whose head scores a fixed subset of
token ids and gives every other id probability 0 (cactus_core/engine/runtime/subset_head.py).

The folder `export.py` writes for it holds the draft's layers, the verifier's embedding
(the head's rows are taken from it, as in the lab) and the subset's ids as the tensor
`cactus_head_token_ids`; its config names this architecture and the subset's size
(`cactus_head_size`). The plugin registers it with vLLM's ModelRegistry, so the folder
loads as a speculative draft: `speculative_config={"method": "draft_model", "model":
<folder>, "draft_sample_method": "probabilistic", ...}`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from vllm.config import VllmConfig
from vllm.model_executor.models.llama import LlamaForCausalLM

from cactus_core.engine.runtime.subset_head import VocabSubsetHead
from cactus_vllm.draft_format import ARCHITECTURE, HEAD_IDS, HEAD_SIZE


class CactusSubsetHeadLlamaForCausalLM(LlamaForCausalLM):
    """vLLM's Llama with the lab's `VocabSubsetHead` in place of its full-vocabulary head."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        size = getattr(vllm_config.model_config.hf_config, HEAD_SIZE, None)
        if not size:
            raise ValueError(f"{ARCHITECTURE} needs {HEAD_SIZE!r} in its config.json")
        self.register_buffer(HEAD_IDS, torch.zeros(int(size), dtype=torch.long), persistent=False)
        self.subset_head: VocabSubsetHead | None = None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        found = False

        def others() -> Iterable[tuple[str, torch.Tensor]]:
            nonlocal found
            for name, tensor in weights:
                if name == HEAD_IDS:
                    getattr(self, HEAD_IDS).copy_(tensor)
                    found = True
                else:
                    yield name, tensor

        loaded = super().load_weights(others())
        if not found:
            raise ValueError(f"the draft's weights lack {HEAD_IDS!r}")
        embedding = self.model.embed_tokens.weight
        self.subset_head = VocabSubsetHead(embedding, getattr(self, HEAD_IDS))
        # The head's weight is a copy of embedding rows, made here rather than read from the file.
        return loaded | {f"subset_head.{name}" for name, _ in self.subset_head.named_parameters()}

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Logits [N, V] over the whole vocabulary: the subset scored, FILL elsewhere."""
        if self.subset_head is None:
            raise RuntimeError(f"{ARCHITECTURE}: compute_logits before load_weights")
        return self.subset_head(hidden_states)

    def compute_logits_local(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.compute_logits(hidden_states)
