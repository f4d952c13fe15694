"""Benchmark evaluate/vote.py on a full-size ARC-AGI-1 evaluation (issue 5, item 6).

    python scripts/bench_vote.py [--arc-dir DIR] [--rows 385812] [--ranks 1] [--compressed]
                                 [--runs 3] [--out DIR]

1. Generates (in a child process, so the vote's peak RSS is not the generator's) a build test split
   from the real test grids of the ARC-AGI-1 evaluation tasks: each task's original plus up to 1000
   augmentations, deduplicated like the builder (maps that agree on the task's colours count once),
   trimmed to --rows test examples; and predictions for every example with a realistic mix: per task
   a skill (a third of the tasks mostly right, a third rarely, a third never), wrong answers drawn
   from ten recurring mistakes per test input or unique noise (some of a wrong shape), q_halt higher
   for right answers, and 64 padding rows per rank file.
2. Runs ``vote.py --json --submission`` --runs+1 times, each in a fresh process (the first may compile
   the numba kernels into their cache, and is reported apart), measuring wall seconds and the
   process's own peak RSS (wait4).
3. Checks the reported pass@K against a plain Counter recount of the generated answers.

Prints one JSON line: rows, files, seconds (median of the runs after the first), min and max, CPU
seconds (user + system, median: robust on a shared machine where wall time includes waiting for a
core), peak RSS in MB, the first run, pass@K, and whether it matched the recount.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
NUM_AUG = 1000
KS = (1, 2, 10, 100, 1000)
PADDING_ROWS = 64
# beside the checkout, not in it: present only where the official files were put there
DEFAULT_ARC_DIR = REPO.parent / "shared/data/ARC-AGI-1/evaluation"


def load_tasks(arc_dir: Path) -> dict[str, dict]:
    tasks = {}
    for path in sorted(arc_dir.glob("*.json")):
        task = json.loads(path.read_text())
        tasks[path.stem] = {k: [(np.array(p["input"], np.uint8), np.array(p["output"], np.uint8))
                                for p in task[k]] for k in ("train", "test")}
    if not tasks:
        raise SystemExit(f"no task files in {arc_dir}")
    return tasks


def augmentations(task: dict, rng: np.random.RandomState) -> list[tuple[int, np.ndarray]]:
    """Up to NUM_AUG distinct (t, colour map) pairs, drawn as the builder draws them."""
    grids = [g for pair in task["train"] + task["test"] for g in pair]
    used = sorted(set(np.unique(np.concatenate([g.ravel() for g in grids])).tolist()) - {0})
    seen, kept = {(0, tuple(used))}, []
    for _ in range(5 * NUM_AUG):
        t = rng.randint(0, 8)
        cmap = np.concatenate([[0], rng.permutation(np.arange(1, 10))]).astype(np.uint8)
        key = (t, tuple(cmap[used].tolist()))
        if key not in seen:
            seen.add(key)
            kept.append((t, cmap))
        if len(kept) == NUM_AUG:
            break
    return kept


def trim(versions: dict[str, list], tasks: dict[str, dict], rows: int) -> None:
    """Drop augmentations from the tasks with the most, until the test split has ``rows`` examples
    (or only the original tasks are left: fewer rows than their test inputs cannot be had)."""
    total = sum((1 + len(v)) * len(tasks[n]["test"]) for n, v in versions.items())
    while total > rows and any(versions.values()):
        name = max(versions, key=lambda n: len(versions[n]))
        versions[name].pop()
        total -= len(tasks[name]["test"])


def noisy(grid: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """A wrong answer: 1-3 cells changed, or (one time in six) the last row missing."""
    if grid.shape[0] > 1 and rng.rand() < 1 / 6:
        return grid[:-1].copy()
    out = grid.copy()
    for _ in range(rng.randint(1, 4)):
        r, c = rng.randint(0, grid.shape[0]), rng.randint(0, grid.shape[1])
        out[r, c] = (out[r, c] + rng.randint(1, 10)) % 10
    return out


def generate(arc_dir: Path, out: Path, rows: int, ranks: int, compressed: bool, seed: int) -> None:
    sys.path.insert(0, str(REPO))
    from arc_data.augment import augment_grid, augmentation_name
    from arc_data.encoding import SEQ_LEN, encode_grid

    rng = np.random.RandomState(seed)
    tasks = load_tasks(arc_dir)
    versions = {name: augmentations(task, rng) for name, task in tasks.items()}
    trim(versions, tasks, rows)

    def random_map():
        return np.concatenate([[0], rng.permutation(np.arange(1, 10))]).astype(np.uint8)

    # the train split's names too (stand-ins for the 400 training tasks), so identifiers.json is full size
    names = ["<blank>"]
    for k in range(len(tasks)):
        names += [f"train{k:03d}"] + [augmentation_name(f"train{k:03d}", rng.randint(0, 8), random_map())
                                      for _ in range(NUM_AUG)]
    puzzles = []                                   # (task, t, colour map, puzzle name), group order
    for name in tasks:
        puzzles.append((name, 0, np.arange(10, dtype=np.uint8), name))
        puzzles += [(name, t, cmap, augmentation_name(name, t, cmap)) for t, cmap in versions[name]]
    first_id = len(names)
    names += [pname for *_, pname in puzzles]
    n = sum(len(tasks[name]["test"]) for name, *_ in puzzles)
    test_dir = out / "build" / "test"
    test_dir.mkdir(parents=True, exist_ok=True)
    (out / "build" / "identifiers.json").write_text(json.dumps(names))
    inputs = np.lib.format.open_memmap(test_dir / "all__inputs.npy", "w+", np.uint8, (n, SEQ_LEN))
    labels = np.lib.format.open_memmap(test_dir / "all__labels.npy", "w+", np.uint8, (n, SEQ_LEN))
    preds = np.empty((n, SEQ_LEN), np.uint8)
    q = np.empty(n, np.float32)
    row_ids = np.empty(n, np.int32)
    puzzle_idx, group_idx = [0], [0]
    skill = {}
    for name in tasks:
        kind = rng.randint(0, 3)
        skill[name] = rng.uniform(0.3, 0.95) if kind == 0 else rng.uniform(0.0, 0.03) if kind == 1 else 0.0
    mistakes = {(name, i): [noisy(b, rng) for _ in range(10)] for name, task in tasks.items()
                for i, (_, b) in enumerate(task["test"])}
    zipf = 1 / np.arange(1, 11)
    zipf /= zipf.sum()
    votes, conf = defaultdict(Counter), defaultdict(float)   # the recount, in the original frame
    row = 0
    for p, (name, t, cmap, _) in enumerate(puzzles):
        for i, (a, b) in enumerate(tasks[name]["test"]):
            draw = rng.rand()
            if draw < skill[name]:
                answer, right = b, True
            else:
                answer = mistakes[name, i][rng.choice(10, p=zipf)] if rng.rand() < 0.5 else noisy(b, rng)
                right = False
            inputs[row] = encode_grid(augment_grid(a, t, cmap))
            labels[row] = encode_grid(augment_grid(b, t, cmap))
            preds[row] = encode_grid(augment_grid(answer, t, cmap))
            q[row] = rng.normal(1.0 if right else -1.0, 1.5)
            row_ids[row] = first_id + p
            key = (answer.shape, answer.tobytes())
            votes[name, i][key] += 1
            conf[name, i, key] += 1 / (1 + np.exp(-np.float64(q[row])))
            row += 1
        puzzle_idx.append(row)
        if p + 1 == len(puzzles) or puzzles[p + 1][0] != name:
            group_idx.append(p + 1)
    inputs.flush()
    labels.flush()
    np.save(test_dir / "all__puzzle_identifiers.npy", np.arange(first_id, first_id + len(puzzles), dtype=np.int32))
    np.save(test_dir / "all__puzzle_indices.npy", np.array(puzzle_idx, np.int32))
    np.save(test_dir / "all__group_indices.npy", np.array(group_idx, np.int32))
    (test_dir / "dataset.json").write_text(json.dumps({
        "seq_len": SEQ_LEN, "vocab_size": 12, "pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0,
        "num_puzzle_identifiers": len(names), "total_groups": len(tasks),
        "mean_puzzle_examples": n / len(puzzles), "sets": ["all"]}))
    folder = out / "predictions"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("rank_*.npz"):   # left by an earlier run into this --out with more --ranks
        old.unlink()
    save = np.savez_compressed if compressed else np.savez
    for r, part in enumerate(np.array_split(np.arange(n), ranks)):
        save(folder / f"rank_{r}.npz",
             puzzle_identifiers=np.concatenate([row_ids[part], np.zeros(PADDING_ROWS, np.int32)]),
             inputs=np.concatenate([inputs[part], np.zeros((PADDING_ROWS, SEQ_LEN), np.uint8)]),
             preds=np.concatenate([preds[part], np.zeros((PADDING_ROWS, SEQ_LEN), np.uint8)]),
             q_halt_logits=np.concatenate([q[part], np.zeros(PADDING_ROWS, np.float32)]))
    (folder / "info.json").write_text(json.dumps({"data_path": str(out / "build"), "step": 0,
                                                  "world_size": ranks, "checkpoint": None}))
    expected = recount(tasks, votes, conf)
    (out / "expected.json").write_text(json.dumps({"rows": n, "pass_at_k": expected}))


def recount(tasks, votes, conf) -> dict[str, dict[str, float]]:
    """pass@K by the protocol with a Counter per test input: what vote.py must report."""
    ranks = {}
    for (name, i), counter in votes.items():
        ranked = sorted(counter, key=lambda k: (-counter[k], -conf[name, i, k] / counter[k]))
        b = tasks[name]["test"][i][1]
        right = (b.shape, b.tobytes())
        ranks[name, i] = ranked.index(right) if right in counter else None
    result = {}
    for k in KS:
        per_task = [[ranks.get((name, i)) is not None and ranks[name, i] < k for i in range(len(t["test"]))]
                    for name, t in tasks.items()]
        result[str(k)] = {"task": sum(all(s) for s in per_task) / len(tasks),
                          "pair": sum(sum(s) / len(s) for s in per_task) / len(tasks)}
    return result


def run_vote(out: Path) -> dict:
    """vote.py in a fresh process: wall seconds and that process's own peak RSS (from wait4)."""
    cmd = [sys.executable, str(REPO / "evaluate" / "vote.py"), "--predictions", str(out / "predictions"),
           "--json", str(out / "results.json"), "--submission", str(out / "submission.json")]
    with open(out / "vote.out", "wb") as stdout, open(out / "vote.err", "wb") as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"vote.py failed ({proc.returncode}):\n{(out / 'vote.err').read_text()}")
    return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024, "table": (out / "vote.out").read_text()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arc-dir", type=Path, default=DEFAULT_ARC_DIR,
                    help=f"the ARC-AGI-1 evaluation task files (default: {DEFAULT_ARC_DIR})")
    ap.add_argument("--rows", type=int, default=385_812, help="test rows (the real build has 385,812)")
    ap.add_argument("--ranks", type=int, default=1, help="prediction files (one per GPU rank)")
    ap.add_argument("--compressed", action="store_true", help="write the predictions with savez_compressed")
    ap.add_argument("--runs", type=int, default=3, help="timed runs after the first")
    ap.add_argument("--out", type=Path, help="keep the generated files here (default: a temporary folder)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rows < 1 or args.ranks < 1 or args.runs < 1:   # --runs 0: no timed run, no median (a traceback)
        ap.error(f"--rows, --ranks and --runs must be at least 1, got {args.rows}, {args.ranks} and {args.runs}")
    # checked before anything is written or spawned (the generator child would fail with a traceback)
    if not any(args.arc_dir.glob("*.json")):
        problem = "no task files (*.json) in" if args.arc_dir.is_dir() else "no such directory:"
        default = " (the default --arc-dir)" if args.arc_dir == DEFAULT_ARC_DIR else ""
        print(f"bench_vote.py: error: {problem} {args.arc_dir}{default}; pass --arc-dir DIR, a folder of the "
              f"ARC-AGI-1 evaluation task files (data/evaluation of the ARC-AGI repository)", file=sys.stderr)
        sys.exit(2)
    if args.generate_only:
        generate(args.arc_dir, args.out, args.rows, args.ranks, args.compressed, args.seed)
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        generator = subprocess.run([sys.executable, __file__, "--generate-only", "--out", str(out),
                                    "--arc-dir", str(args.arc_dir), "--rows", str(args.rows), "--ranks",
                                    str(args.ranks), "--seed", str(args.seed)]
                                   + (["--compressed"] if args.compressed else []))
        if generator.returncode != 0:   # its own message is on stderr already; not a bad input, so not 2
            print(f"bench_vote.py: error: generating the inputs failed (exit code {generator.returncode})",
                  file=sys.stderr)
            sys.exit(1)
        generated = time.perf_counter() - t0
        expected = json.loads((out / "expected.json").read_text())
        runs = [run_vote(out) for _ in range(args.runs + 1)]
        report = json.loads((out / "results.json").read_text())
        got = {k: {"task": v["task"], "pair": v["pair"]} for k, v in report["pass_at_k"].items()}
        match = all(abs(got[k][m] - expected["pass_at_k"][k][m]) < 1e-12 for k in got for m in ("task", "pair"))
        timed = [r["seconds"] for r in runs[1:]]
        print(runs[-1]["table"], file=sys.stderr)
        print(json.dumps({
            "rows": expected["rows"], "files": args.ranks, "compressed": args.compressed,
            "seconds": round(statistics.median(timed), 3), "seconds_min": round(min(timed), 3),
            "seconds_max": round(max(timed), 3),
            "cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in runs[1:]), 3),
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs[1:]), 1),
            "first_run_seconds": round(runs[0]["seconds"], 3), "first_run_peak_rss_mb": round(runs[0]["peak_rss_mb"], 1),
            "cpu_count": os.cpu_count(), "pass_at_k": got, "matches_recount": match,
            "generate_seconds": round(generated, 1)}))
        if not match:
            print(json.dumps({"expected": expected["pass_at_k"]}), file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
