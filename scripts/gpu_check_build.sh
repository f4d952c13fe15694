# Sourced by scripts/gpu_check.sh and scripts/prepare_gpu_check.sh (with $PY set): the build the GPU
# check trains on.
#
# gpu_check_build DIR TASKS AUG: build DIR (--limit-tasks TASKS --num-aug AUG) when it holds no
# build; reuse one only when its manifest records exactly those settings. A build made with others
# (an older prepare_gpu_check.sh, DATA pointed at another build) would silently change every figure
# measured on it (rows per epoch, evaluation time), so it is refused, naming both, and left as it is.
gpu_check_build() {
    local dir=$1 tasks=$2 aug=$3
    if [ ! -f "$dir/manifest.json" ]; then
        $PY build_arc.py --limit-tasks "$tasks" --num-aug "$aug" --output-dir "$dir" --overwrite --quiet
        return
    fi
    $PY - "$dir" "$tasks" "$aug" <<'PY'
import json, sys
folder, tasks, aug = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# what build_arc.py records for `--limit-tasks TASKS --num-aug AUG` and its defaults
wanted = {"dataset": "arc-agi-1", "num_aug": aug, "seed": 42, "listing_order": "sorted", "limit_tasks": tasks}
try:
    settings = json.loads(open(f"{folder}/manifest.json", "rb").read())["settings"]
    found = {key: settings.get(key) for key in wanted}
except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    found = f"unreadable ({type(e).__name__}: {e})"
if found != wanted:   # one JSON line, as gpu_check.sh reports everything
    print(json.dumps({"setup": f"{folder} holds a build made with other settings ({found}) than this check "
                               f"uses ({wanted}): its figures would not compare; remove it (it is built again) "
                               f"or set DATA to another folder"}))
    sys.exit(1)
PY
}
