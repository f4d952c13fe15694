"""Benchmark the full arc-aug-1000 build (ARC-AGI-1 + ConceptARC, 1000 augmentations).

Runs `build_arc.py` in a fresh process and prints one JSON line:
{"seconds": wall time, "peak_rss_mb": the build process's peak RSS, "train_examples": ..., "digest": ...}

  python scripts/bench_build.py --extra-dir ../shared/data/ConceptARC/corpus [--num-aug 1000] [--keep --output-dir DIR]
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
    p.add_argument("--output-dir", help="a new folder for the build, removed afterwards unless --keep "
                                        "(default: a temporary folder under data/)")
    p.add_argument("--keep", action="store_true", help="keep the build (in --output-dir)")
    args = p.parse_args()
    if args.keep and not args.output_dir:
        # it would be kept in a temporary folder of a random name, said nowhere
        p.error("--keep needs --output-dir: the folder to keep the build in")
    # the builds run from the repository root: the paths as meant from here
    args.extra_dir = [str(Path(d).resolve()) for d in args.extra_dir]
    args.output_dir = str(Path(args.output_dir).resolve()) if args.output_dir else None
    if args.output_dir and Path(args.output_dir).exists():
        # it is built with --overwrite and removed afterwards: never someone's build (data/arc-aug-1000)
        p.error(f"--output-dir {args.output_dir} exists; the benchmark replaces and then removes its folder, so "
                f"name a new one")

    out = Path(args.output_dir) if args.output_dir else Path(tempfile.mkdtemp(
        prefix="bench-build-", dir=ROOT / "data" if (ROOT / "data").is_dir() else None)) / "arc-aug"

    def command(num_aug: int, output: Path) -> list[str]:
        cmd = [sys.executable, str(ROOT / "build_arc.py"), "--num-aug", str(num_aug), "--output-dir", str(output),
               "--overwrite", "--quiet"]
        return cmd + [arg for d in args.extra_dir for arg in ("--extra-dir", d)]

    def failed(proc: subprocess.CompletedProcess) -> None:
        """build_arc.py's own reason (a bad --extra-dir, a full disk), with its exit status, and no
        temporary build left behind; not a traceback of the subprocess call."""
        if not args.output_dir:
            shutil.rmtree(out.parent, ignore_errors=True)
        reason = proc.stderr.strip() or f"build_arc.py exited with status {proc.returncode}"
        print(f"bench_build.py: {reason}", file=sys.stderr)
        sys.exit(proc.returncode)

    # compile (or load from numba's cache) outside the timed run, as a user's second build would;
    # this small run's RSS is far below the full build's, so it does not mask the peak below. In a
    # folder of its own: never beside a given --output-dir, where a `warmup` folder may be the user's
    with tempfile.TemporaryDirectory(prefix="bench-build-warmup-") as warm:
        proc = subprocess.run(command(0, Path(warm) / "build"), cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        failed(proc)
    cmd = command(args.num_aug, out)

    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        failed(proc)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    manifest = json.loads((out / "manifest.json").read_text())
    train_examples = np.load(out / "train" / "all__inputs.npy", mmap_mode="r").shape[0]
    print(json.dumps({"seconds": round(seconds, 2), "peak_rss_mb": round(peak_rss_mb, 1),
                      "train_examples": train_examples, "digest": manifest["digest"]}))
    if not args.keep:
        shutil.rmtree(out.parent if not args.output_dir else out)


if __name__ == "__main__":
    main()
