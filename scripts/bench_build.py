"""Benchmark the full arc-aug-1000 build (ARC-AGI-1 + ConceptARC, 1000 augmentations).

Runs `build_arc.py` in a fresh process and prints one JSON line:
{"seconds": wall time, "peak_rss_mb": the build process's peak RSS, "train_examples": ..., "digest": ...}

  python scripts/bench_build.py --extra-dir ../shared/data/ConceptARC/corpus [--num-aug 1000] [--keep]
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--extra-dir", action="append", default=[], help="e.g. a ConceptARC checkout's corpus/")
    p.add_argument("--num-aug", type=int, default=1000)
    p.add_argument("--output-dir", help="default: a temporary folder under data/, removed afterwards")
    p.add_argument("--keep", action="store_true", help="keep the build")
    args = p.parse_args()

    out = Path(args.output_dir) if args.output_dir else Path(tempfile.mkdtemp(prefix="bench-build-", dir=ROOT / "data" if (ROOT / "data").is_dir() else None)) / "arc-aug"
    def command(num_aug: int, output: Path) -> list[str]:
        cmd = [sys.executable, str(ROOT / "build_arc.py"), "--num-aug", str(num_aug), "--output-dir", str(output),
               "--overwrite", "--quiet"]
        return cmd + [arg for d in args.extra_dir for arg in ("--extra-dir", d)]

    # compile (or load from numba's cache) outside the timed run, as a user's second build would;
    # this small run's RSS is far below the full build's, so it does not mask the peak below
    warm = out.parent / "warmup"
    subprocess.run(command(0, warm), check=True, cwd=ROOT, capture_output=True)
    shutil.rmtree(warm, ignore_errors=True)
    cmd = command(args.num_aug, out)

    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"build failed:\n{proc.stderr}")
    peak_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    manifest = json.loads((out / "manifest.json").read_text())
    train_examples = np.load(out / "train" / "all__inputs.npy", mmap_mode="r").shape[0]
    print(json.dumps({"seconds": round(seconds, 2), "peak_rss_mb": round(peak_rss_mb, 1),
                      "train_examples": train_examples, "digest": manifest["digest"]}))
    if not args.keep:
        shutil.rmtree(out.parent if not args.output_dir else out)


if __name__ == "__main__":
    main()
