#!/usr/bin/env bash
# The whole pipeline on a laptop CPU, in a few minutes: build a small real ARC set (16 ARC-AGI-1
# tasks, 8 augmentations each), train hrm_tiny for 300 steps, predict, vote, print pass@K.
#   bash scripts/quickstart.sh [extra pretrain.py overrides, e.g. max_steps=100]
set -euo pipefail
# --help would otherwise reach pretrain.py only after a rebuild and the removal of the last run,
# then fail on the missing checkpoint; say what the script does and touch nothing
for arg in "$@"; do
    if [[ $arg == -h || $arg == --help ]]; then
        sed -n '2,4s/^# \{0,1\}//p' "$0"
        exit 0
    fi
done
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
DATA=data/quickstart
RUN=checkpoints/quickstart/hrm_tiny

$PY build_arc.py --limit-tasks 8 --num-aug 8 --output-dir "$DATA" --overwrite --quiet
$PY build_arc.py --verify "$DATA"
rm -rf "$RUN"
# 16 groups, ~6 training steps per epoch at batch 8: 60 epochs cover the 300 steps
$PY pretrain.py arch=hrm_tiny data_path="$DATA" global_batch_size=8 epochs=60 eval_interval=60 \
    max_steps=300 lr=1e-3 lr_warmup_steps=20 checkpoint_path="$RUN" "$@"
STEP=$(cat "$RUN/latest")
$PY evaluate/vote.py --predictions "$RUN/predictions/$STEP" --data "$DATA" --K 1 2 10 --json "$RUN/vote.json"
