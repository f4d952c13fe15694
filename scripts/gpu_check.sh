#!/usr/bin/env bash
# GPU check (one H200 or any CUDA GPU), installing nothing from the network. By default the short
# check: a few hundred bf16 + torch.compile training steps of hrm_v1 and of hrm_deeploop on a small
# build (tokens/s, MFU, peak memory), and a 2-process torchrun run when two GPUs are there. FULL=1
# adds the checks a new GPU machine (or a change to CUDA paths) deserves. Phases, in this order, each
# bounded by a timeout and run even when an earlier one failed (a one-shot GPU lease should bring
# back all it can); [full] marks the FULL=1 ones:
#   v1             bench_train.py hrm_v1: the training loop, bf16 + torch.compile
#   deeploop       bench_train.py hrm_deeploop, as v1
#   torchrun       2 processes of pretrain.py, only with two GPUs (NCCL wants one GPU per rank)
#   model     [full] bench_model.py hrm_v1: the model-only training step, eager bf16 (issue 3)
#   tests     [full] tests/test_gpu.py (CUDA step = CPU step, SDPA vs a float64 reference, bf16,
#                    torch.compile vs eager for the training step and the evaluation segment) and
#                    flash-attn vs SDPA (skips without flash_attn)
#   adam      [full] fused AdamATan2 against our fallback; built in the background from the start,
#                    when the adam-atan2 source archive came in $WHEELS and nvcc is there
#   smoke     [full] pretrain.py on CUDA (hrm_tiny): train, evaluate, checkpoint, resume; then vote
# Results are JSON lines on stdout; with $OUT set (a device tool's output folder) the log goes there
# too. The exit status is 1 when any phase failed, and the last line names them.
#
#   bash scripts/gpu_check.sh
#   WHEELS=.gpu-wheels STEPS=300 BATCH=384 bash scripts/gpu_check.sh
#   FULL=1 BUDGET=540 bash scripts/gpu_check.sh     # stop starting phases when 540 s are spent
#   ONLY="deeploop torchrun" bash scripts/gpu_check.sh    # what a budget skipped, in a second go
#
# Time (estimates, not yet measured): hrm_v1 is ~0.55 GFLOP per token, so a batch of 96 is ~48
# TFLOP per step, ~0.2 s at 25% MFU on an H200; 200 steps and one torch.compile (~1-2 min; tracing
# hrm_v1's step alone took ~50 s on a 2-core VM) per config, hrm_deeploop's mostly from the compile
# cache that hrm_v1's filled (alpha is a graph input): ~3 minutes by default, ~8 with FULL=1.
# Memory (also an estimate, eager bf16): ~2.2 GB of saved activations per 96 rows per
# gradient-visible block visit, 8 visits: ~17 GB at batch 96, ~140 GB at 768 (an H200 holds 141 GB).
# The JSON reports the peak.
#
# REHEARSE=1 runs every phase on the CPU at toy sizes, on a 4-task build of its own (2 per subset) (~40 s, no GPU
# needed; tests/test_gpu_check.py does), so that a change to this script is checked before it
# spends GPU time.
#
# A GPU machine without network access or this project's other dependencies: run
# `bash scripts/prepare_gpu_check.sh` on a connected machine first (it writes data/gpu-check and
# .gpu-wheels/), copy both beside the code, and pass WHEELS=.gpu-wheels.
set -uo pipefail
if [ $# -gt 0 ]; then   # its settings are environment variables: `--help` (or any argument) starts nothing
    case $1 in
        -h|--help) sed -n '2,/^set -uo pipefail/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        *) echo "gpu_check.sh: takes no arguments (settings are environment variables: FULL, BUDGET, ONLY, WHEELS, ...; --help)" >&2; exit 2 ;;
    esac
fi
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOGS=${OUT:-$(mktemp -d)}
RUN=${RUN:-checkpoints/gpu-check}
if [ -n "${REHEARSE:-}" ]; then
    # toy sizes, the build too: the CPU evaluates every test row of it in the smoke run
    STEPS=${STEPS:-1} BATCH=${BATCH:-2} DATA=${DATA:-data/gpu-check-rehearse} BUILD_TASKS=2 BUILD_AUG=2
    DEVICE=cpu V1=hrm_tiny DEEPLOOP=hrm_tiny COMPILE= SMOKE_BATCH=8 SMOKE_STEPS=2 WARMUP=1
    MODEL_BENCH=(--config cpu-bench --steps 1 --warmup 0 --batch 1)
    SMOKE_ARCH="arch.hidden_size=16 arch.num_heads=1 arch.puzzle_emb_ndim=16 arch.halt_max_steps=2"   # sooner
else
    # BATCH: one GPU's share of the published 768 on 8 GPUs
    STEPS=${STEPS:-200} BATCH=${BATCH:-96} DATA=${DATA:-data/gpu-check} BUILD_TASKS=32 BUILD_AUG=64
    DEVICE=cuda V1=hrm_v1 DEEPLOOP=hrm_deeploop COMPILE=--compile SMOKE_BATCH=64 SMOKE_STEPS=20 WARMUP=5
    MODEL_BENCH=(--config hrm_v1 --steps 6 --warmup 2 --batch "$BATCH")
    SMOKE_ARCH=
fi
export WANDB_MODE=disabled PYTHONUNBUFFERED=1 PATH="$PATH:/usr/local/cuda/bin"
if [ -n "${OUT:-}" ]; then
    exec > >(tee -a "$OUT/gpu_check.log") 2>&1
fi

failed=()
skipped=()
BUDGET=${BUDGET:-0}   # seconds for the whole check (0: no limit); a phase gets what is left of it
FULL=${FULL:-}        # non-empty: the [full] phases too
ONLY=${ONLY:-}        # space-separated phase keys to run instead: v1 deeploop torchrun model tests adam smoke
# BUDGET=540s would fail every "[ -gt ]" test with a bash warning and run with no limit at all
if ! [[ $BUDGET =~ ^[0-9]+$ ]]; then
    echo "{\"setup\": \"BUDGET: '$BUDGET' is not a whole number of seconds (0: no limit)\"}"
    exit 2
fi
PHASES="v1 deeploop torchrun model tests adam smoke"
# A mistyped key would run nothing in its place and end "failed: []": a one-shot lease spent on nothing.
read -ra only_keys <<< "$ONLY"   # (not a bare $ONLY: a "*" would expand to file names)
for key in ${only_keys[@]+"${only_keys[@]}"}; do
    if [[ " $PHASES " != *" $key "* ]]; then
        echo "{\"setup\": \"ONLY: no phase '$key' (the phases: $PHASES)\"}"
        exit 2
    fi
done
wanted() {            # wanted KEY: is this phase to run?
    if [ -n "$ONLY" ]; then
        [[ " $ONLY " == *" $1 "* ]]
    else
        [ -n "$FULL" ] || [[ " model tests adam smoke " != *" $1 "* ]]
    fi
}
# phase KEY NAME SECONDS COMMAND...: run COMMAND under a time limit (cut to the budget left), note a
# failure, go on. A phase not wanted is passed over; one with under 60 s of budget left is skipped
# and named in the summary.
phase() {
    local key=$1 name=$2 limit=$3
    shift 3
    wanted "$key" || return 0
    if [ "$BUDGET" -gt 0 ]; then
        local left=$((BUDGET - SECONDS))
        if [ $left -lt 60 ]; then
            echo "{\"phase\": \"$name\", \"skipped\": \"budget: ${left} s left\"}"
            [[ " ${skipped[*]} " == *" $key "* ]] || skipped+=("$key")
            return 0
        fi
        [ $left -lt "$limit" ] && limit=$left
    fi
    echo "{\"phase\": \"$name\", \"elapsed_s\": $SECONDS}"
    # the benchmarks time fewer steps rather than be killed with nothing printed (bench_train.py)
    BENCH_TIME_LIMIT=$((limit - 20)) timeout --kill-after 10 "$limit" "$@"
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "{\"phase\": \"$name\", \"failed\": $rc$([ $rc -eq 124 ] && echo ', "timed_out": true')}"
        failed+=("$name")
    fi
}

# Setup: without these nothing below can run. Only what is missing is installed (pip takes seconds
# even when all is there), from $WHEELS, into a folder of its own on PYTHONPATH (which every phase's
# processes inherit): the GPU machine's Python environment may be read-only, and is left as it was.
# (Not under $OUT: a device tool would bring it back.) The fused optimizer's build goes there too.
# Not carried by $WHEELS: numba (evaluation and voting; its llvmlite alone is 60 MB; the H200 image
# has it) and Python itself: said at once, where the first phase to need them would fail instead.
$PY - <<'PY' || exit 1
import importlib.util, json, sys
problems = []
if sys.version_info < (3, 11):
    problems.append(f"Python {sys.version.split()[0]} runs here; the project needs 3.11 or newer")
if importlib.util.find_spec("numba") is None:
    problems.append("numba is missing (evaluation and voting need it; prepare_gpu_check.sh's wheels do not carry it)")
if problems:
    print(json.dumps({"setup": "; ".join(problems)}))
    sys.exit(1)
PY
SITE=${SITE:-$(mktemp -d)/site-packages}
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
MISSING=$($PY - $( (wanted tests || wanted adam) && echo pytest) <<'PY'
import importlib.util
import sys
wanted = {"hydra": "hydra-core", "pydantic": "pydantic", "yaml": "pyyaml", "tqdm": "tqdm"}
if sys.argv[1:] == ["pytest"]:     # only the tests and adam phases run pytest
    wanted["pytest"] = "pytest"
print(" ".join(package for module, package in wanted.items() if importlib.util.find_spec(module) is None))
PY
)
if [ -n "$MISSING" ]; then
    [ -n "${WHEELS:-}" ] || { echo "{\"setup\": \"missing: $MISSING; pass WHEELS= (scripts/prepare_gpu_check.sh)\"}"; exit 1; }
    $PY -m pip install -q --no-index --find-links "$WHEELS" --target "$SITE" $MISSING || exit 1
    echo "{\"setup\": \"installed $MISSING into $SITE\"}"
fi
[ -n "${REHEARSE:-}" ] || $PY - <<'PY' || exit 1
import torch
assert torch.cuda.is_available(), "no CUDA device"
p = torch.cuda.get_device_properties(0)
print(f'{{"torch": "{torch.__version__}", "gpu": "{p.name}", "gpus": {torch.cuda.device_count()}, '
      f'"memory_gib": {p.total_memory / 2**30:.1f}, "sms": {p.multi_processor_count}}}')
PY
# (as prepare_gpu_check.sh makes it; one made with other settings is refused, not measured on)
source scripts/gpu_check_build.sh
gpu_check_build "$DATA" $BUILD_TASKS $BUILD_AUG || exit 1

# The fused AdamATan2 kernel builds on the CPUs while the GPU phases run.
ADAM_SDIST=$(ls "${WHEELS:-/nonexistent}"/adam_atan2-*.tar.gz 2>/dev/null | head -n 1)
ADAM_PID=
# Built already? Looked for before torch is imported (~2 s): only a backend that is there (a torch
# extension) needs torch to load.
ADAM_BUILT='import importlib.util, sys; importlib.util.find_spec("adam_atan2_backend") or sys.exit(1); import torch, adam_atan2_backend'
if [ -n "$ADAM_SDIST" ] && wanted adam && command -v nvcc >/dev/null && ! $PY -c "$ADAM_BUILT" 2>/dev/null; then
    echo "{\"adam_atan2_build\": \"started\", \"elapsed_s\": $SECONDS}"
    # --use-pep517: the archive's setup.py asks for setuptools_scm, which pip before 25.3 would try to
    # download (legacy setup_requires) on a machine with no network; the PEP 517 path does not
    (MAX_JOBS=4 timeout 400 $PY -m pip install --no-index --no-build-isolation --use-pep517 --no-deps --target "$SITE" "$ADAM_SDIST" \
        > "$LOGS/adam_atan2_build.log" 2>&1; echo "{\"adam_atan2_build_rc\": $?, \"elapsed_s\": $SECONDS}") &
    ADAM_PID=$!
fi

# The short check's phases first, the figures of the README's GPU row: on a one-shot lease a budget
# that runs out skips the [full] extras, not them (hrm_deeploop compiles mostly from the cache
# hrm_v1's filled).
phase v1 "bench_train hrm_v1" 300 $PY scripts/bench_train.py --config $V1 --device $DEVICE --data "$DATA" \
    --batch "$BATCH" --steps "$STEPS" --warmup $WARMUP $COMPILE

phase deeploop "bench_train hrm_deeploop" 300 $PY scripts/bench_train.py --config $DEEPLOOP --device $DEVICE --data "$DATA" \
    --batch "$BATCH" --steps "$STEPS" --warmup $WARMUP $COMPILE

if ! wanted torchrun; then
    :
elif [ -n "${REHEARSE:-}" ]; then
    echo '{"phase": "torchrun 2 processes", "skipped": "a rehearsal runs no NCCL (it needs one GPU per rank)"}'
elif [ "$($PY -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    rm -rf checkpoints/gpu-check-2proc
    phase torchrun "torchrun 2 processes" 300 $PY -m torch.distributed.run --nproc-per-node 2 pretrain.py \
        arch=hrm_deeploop data_path="$DATA" global_batch_size=64 epochs=1 eval_interval=1 max_steps=20 \
        checkpoint_path=checkpoints/gpu-check-2proc eval_batch_size=256
else
    echo '{"phase": "torchrun 2 processes", "skipped": "fewer than two GPUs (NCCL needs one GPU per rank)"}'
fi

phase model "bench_model hrm_v1" 150 $PY scripts/bench_model.py "${MODEL_BENCH[@]}"

phase tests "gpu tests" 300 $PY -m pytest -q -rs tests/test_gpu.py tests/test_model_layers.py::test_flash_and_sdpa_agree_on_gpu

if [ -n "$ADAM_PID" ]; then
    # Wait for the build only while the budget leaves 3 minutes for what follows; the fused test
    # skips when the package is not there.
    while kill -0 "$ADAM_PID" 2>/dev/null && { [ "$BUDGET" -eq 0 ] || [ $((BUDGET - SECONDS)) -gt 180 ]; }; do
        sleep 2
    done
    if kill -0 "$ADAM_PID" 2>/dev/null; then
        echo '{"adam_atan2_build": "still running: not waited for (budget)"}'
    else
        tail -n 5 "$LOGS/adam_atan2_build.log"
    fi
fi
phase adam "fused AdamATan2 test" 120 $PY -m pytest -q -rs tests/test_model_optim.py::test_fused_kernel_matches_fallback_on_gpu

# Train, evaluate, checkpoint and resume on CUDA, then vote: the pieces the benchmarks skip.
# Eager (compile=false): the benchmarks already cover torch.compile, and its wait is long.
! wanted smoke || rm -rf "$RUN"
SMOKE="arch=hrm_tiny $SMOKE_ARCH data_path=$DATA global_batch_size=$SMOKE_BATCH epochs=1000 eval_interval=1000 compile=false
       device=$DEVICE checkpoint_path=$RUN"
phase smoke "pretrain smoke" 120 $PY pretrain.py $SMOKE max_steps=$SMOKE_STEPS
# the resumed part also measures the visit alignment (hrm/diagnostics.py) on CUDA in bf16, once
phase smoke "pretrain resume" 120 $PY pretrain.py $SMOKE max_steps=$((SMOKE_STEPS * 3 / 2)) resume=latest \
    diagnostics_interval=$((SMOKE_STEPS * 3 / 2)) diagnostics_rows=4
phase smoke "vote" 120 $PY evaluate/vote.py --predictions "$RUN/predictions/$(cat "$RUN/latest" 2>/dev/null)" --data "$DATA" --K 1 2 10

names=$(printf '"%s", ' "${failed[@]}")
[ ${#failed[@]} -eq 0 ] && names=
left=$(printf '%s ' "${skipped[@]}")
echo "{\"phase\": \"done\", \"elapsed_s\": $SECONDS, \"failed\": [${names%, }], \"skipped_for_budget\": \"${left% }\"}"
[ ${#failed[@]} -eq 0 ]
