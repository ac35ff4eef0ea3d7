#!/usr/bin/env bash
# One round of feature-draft data: the prompt list in eight interleaved slices, alternating
# top-p 0.95 (even slices) and 1.0 (odd), one thread, with the outputs of verifier layers 2 and
# 15 recorded beside the top feature (the multi-depth draft reads all three). Resumable:
# finished shards are skipped.
#   bash training/gen_feature_rounds.sh OUT_DIR SEED PROMPT_SEED [SLICES] [PROMPT_SET]
# SLICES (default "0 1 2 3 4 5 6 7") orders or limits the slices; PROMPT_SET "extra" adds the
# extra prompt families (training.prompts.EXTRA_FAMILIES), "wide" takes the wide prompt list
# (training.prompts.wide_prompts) instead.
set -euo pipefail
out=$1 seed=$2 prompt_seed=$3 slices=${4:-"0 1 2 3 4 5 6 7"} prompt_set=${5:-}
flags=()
if [[ $prompt_set == extra ]]; then flags+=(--extra-prompts); fi
if [[ $prompt_set == wide ]]; then flags+=(--wide-prompts); fi
for w in $slices; do
  if (( w % 2 == 0 )); then top_p=0.95; else top_p=1.0; fi
  .venv/bin/python -m training.gen_features --out "$out" --batch 32 --max-new 192 \
    --top-p "$top_p" --seed "$seed" --prompt-seed "$prompt_seed" --threads 1 \
    --add-layers 2,15 --worker "$w" --workers 8 "${flags[@]}"
done
