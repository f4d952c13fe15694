#!/usr/bin/env bash
# GPU check (one H200 or any CUDA GPU; aims at well under 5 minutes), installing nothing from the
# network: bf16 + torch.compile training steps of hrm_v1 and hrm_deeploop on a small real build,
# reporting tokens/s, MFU and peak memory as JSON lines, the model-only step benchmark of hrm_v1
# (scripts/bench_model.py), then a 2-process torchrun smoke run when
# two GPUs are present, then the GPU-only tests (flash-attn vs SDPA, fused vs fallback AdamATan2;
# each skips when its package is not installed) when pytest is there.
#
#   bash scripts/gpu_check.sh
#   WHEELS=.gpu-wheels STEPS=300 BATCH=384 bash scripts/gpu_check.sh
#
# Budget (estimate, not yet measured): hrm_v1 is ~0.55 GFLOP per token, so a batch of 96 is ~48
# TFLOP per step, ~0.2 s at 25% MFU on an H200; 200 steps and one torch.compile (~1-2 min) per
# config keep the two configs within ~5 minutes. Each phase prints its wall time. Memory (also an
# estimate, eager bf16): ~2.2 GB of saved activations per 96 rows per gradient-visible block visit,
# 8 visits: ~17 GB at batch 96, ~140 GB at 768 (an H200 holds 141 GB). The JSON reports the peak.
#
# A GPU machine without network access or this project's other dependencies: run
# `bash scripts/prepare_gpu_check.sh` on a connected machine first (it writes data/gpu-check and
# .gpu-wheels/), copy both beside the code, and pass WHEELS=.gpu-wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STEPS=${STEPS:-200}
BATCH=${BATCH:-96}   # one GPU's share of the published 768 on 8 GPUs
DATA=${DATA:-data/gpu-check}
export WANDB_MODE=disabled PYTHONUNBUFFERED=1

if [ -n "${WHEELS:-}" ]; then
    $PY -m pip install -q --no-index --find-links "$WHEELS" hydra-core pydantic pyyaml tqdm pytest
fi
$PY - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device"
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} GPU(s)")
PY
[ -f "$DATA/manifest.json" ] || $PY build_arc.py --limit-tasks 32 --num-aug 64 --output-dir "$DATA" --overwrite --quiet

for arch in hrm_v1 hrm_deeploop; do
    echo "{\"phase\": \"bench_train $arch\", \"elapsed_s\": $SECONDS}"
    $PY scripts/bench_train.py --config "$arch" --data "$DATA" --batch "$BATCH" --steps "$STEPS" --warmup 5 --compile
done

# The model-only step benchmark (issue 3): hrm_v1, eager (no compile wait), the same batch.
echo "{\"phase\": \"bench_model hrm_v1\", \"elapsed_s\": $SECONDS}"
$PY scripts/bench_model.py --config hrm_v1 --steps 6 --warmup 2 --batch "$BATCH"

echo "{\"phase\": \"torchrun\", \"elapsed_s\": $SECONDS}"
if [ "$($PY -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    rm -rf checkpoints/gpu-check
    $PY -m torch.distributed.run --nproc-per-node 2 pretrain.py arch=hrm_deeploop data_path="$DATA" \
        global_batch_size=64 epochs=1 eval_interval=1 max_steps=20 checkpoint_path=checkpoints/gpu-check eval_batch_size=256
    echo '{"torchrun_2proc": "ok"}'
else
    echo '{"torchrun_2proc": "skipped: one GPU (NCCL needs one GPU per rank)"}'
fi

echo "{\"phase\": \"gpu tests\", \"elapsed_s\": $SECONDS}"
if $PY -c 'import pytest' 2>/dev/null; then
    $PY -m pytest -q -rs tests/test_model_layers.py::test_flash_and_sdpa_agree_on_gpu \
        tests/test_model_optim.py::test_fused_kernel_matches_fallback_on_gpu
else
    echo '{"gpu_tests": "skipped: pytest not installed"}'
fi
echo "{\"phase\": \"done\", \"elapsed_s\": $SECONDS}"
