"""Throughput of the data reader on a build: can it feed the GPUs?

Prints one JSON line per world size for the training reader (`TrainBatches`, timed on the last
rank: first-batch latency, batches/s and rows/s of its share of the global batch) and one for the
evaluation reader (`EvalBatches`: rank 0's full pass over the test split at the largest world
size). The published recipe needs 768 rows per optimizer step in total, 96 per rank on 8 GPUs.

  python scripts/bench_reader.py --data data/arc-aug-1000
  python scripts/bench_reader.py --data data/arc-aug-1000 --world 1 8 --seconds 5
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arc_data.dataset import EvalBatches, TrainBatches, load_split  # noqa: E402


def peak_rss_mb() -> float:
    # file pages of the memory-mapped arrays count here too; the OS shares them between ranks
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def bench_train(train, batch: int, world: int, epochs_per_iteration: int, seconds: float) -> dict:
    rank = world - 1  # the last rank: its slice starts furthest into the global batch
    reader = TrainBatches(train, global_batch_size=batch, seed=0, rank=rank, world_size=world,
                          epochs_per_iteration=epochs_per_iteration)
    start = time.perf_counter()
    batches = reader.iteration_batches()
    try:
        rows = len(next(batches)["inputs"])
    except StopIteration:   # the reader drops a last partial batch: a small build's iteration may hold none
        raise ValueError(f"an iteration of {epochs_per_iteration} epoch(s) of this build holds fewer rows than one "
                         f"global batch of {batch}: raise --epochs-per-iteration or lower --batch") from None
    first = time.perf_counter() - start
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        try:
            next(batches)
        except StopIteration:   # a tiny build's iteration can end within the timed window
            batches = reader.iteration_batches()
            continue
        count += 1
    elapsed = time.perf_counter() - start
    return {"reader": "train", "global_batch": batch, "world_size": world, "rank": rank, "rows_per_batch": rows,
            "first_batch_s": round(first, 4), "batches_per_s": round(count / elapsed, 1),
            "rows_per_s": round(count * rows / elapsed), "peak_rss_mb": peak_rss_mb()}


def bench_eval(test, batch: int, world: int) -> dict:
    start = time.perf_counter()
    count = rows = 0
    for b in EvalBatches(test, global_batch_size=batch, rank=0, world_size=world):
        count += 1
        rows += len(b["inputs"])
    elapsed = time.perf_counter() - start
    return {"reader": "eval", "global_batch": batch, "world_size": world, "rank": 0, "batches": count, "rows": rows,
            "seconds": round(elapsed, 3), "rows_per_s": round(rows / elapsed) if elapsed > 0 else None,
            "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="a build_arc.py output folder")
    p.add_argument("--batch", type=int, default=768, help="global batch (default: the published 768)")
    p.add_argument("--world", type=int, nargs="+", default=[1, 8], help="world sizes to time (default 1 8)")
    p.add_argument("--epochs-per-iteration", type=int, default=10000,
                   help="the reader's iteration (= eval_interval; default the published 10000)")
    p.add_argument("--seconds", type=float, default=5.0, help="timed seconds per world size")
    args = p.parse_args()
    # the reader's own checks would end in a traceback
    if args.batch < 1 or args.epochs_per_iteration < 1 or min(args.world) < 1:
        p.error(f"--batch, --epochs-per-iteration and --world must be at least 1, got {args.batch}, "
                f"{args.epochs_per_iteration} and {min(args.world)}")
    if not args.seconds > 0:   # (nan too) no batch would be timed: every rate would read 0
        p.error(f"--seconds must be more than 0, got {args.seconds}")
    bad = [w for w in args.world if args.batch % w]
    if bad:
        p.error(f"--batch {args.batch} is not divisible by --world {bad[0]}")
    try:
        train, test = load_split(args.data, "train"), load_split(args.data, "test")
    except (FileNotFoundError, ValueError) as e:
        p.error(f"--data {args.data}: {e}")
    for world in args.world:
        try:
            result = bench_train(train, args.batch, world, args.epochs_per_iteration, args.seconds)
        except ValueError as e:
            p.error(f"--data {args.data}: {e}")
        print(json.dumps(result), flush=True)
    print(json.dumps(bench_eval(test, args.batch, max(args.world))), flush=True)


if __name__ == "__main__":
    main()
