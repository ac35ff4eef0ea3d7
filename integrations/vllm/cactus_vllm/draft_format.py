"""How the subset-head draft is stored for vLLM: written by `export.py` (the lab's side),
read by `subset_head.py` (vLLM's side)."""

ARCHITECTURE = "CactusSubsetHeadLlamaForCausalLM"  # config.json "architectures"
HEAD_SIZE = "cactus_head_size"  # config.json: how many token ids the head scores
HEAD_IDS = "cactus_head_token_ids"  # the weights file's tensor of those ids (int64)
