"""The `step_<N>` names of a run's checkpoint folders and their predictions folders.

Without torch: vote.py reads predictions folders, scripts/p_sweep.py run folders, and loading torch
takes seconds.
"""
from __future__ import annotations

from pathlib import Path


def step_number(step_dir: Path) -> int | None:
    """N of a `step_<N>` folder or file, None for any other name (`step_7.bak`, `step_best`,
    `step_`). ASCII digits only: str.isdigit() also takes `²`, which int() refuses."""
    digits = step_dir.name.removeprefix("step_")
    if digits == step_dir.name or not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits)


def checkpoint_step(checkpoint: Path) -> int:
    """N of a checkpoint list_checkpoints found: `step_<N>`, or an unrenamed `.step_<N>.tmp`."""
    return step_number(Path(checkpoint.name.removeprefix(".").removesuffix(".tmp")))


def unrenamed_saves(run_dir: str | Path) -> list[Path]:
    """The `.step_<N>.tmp/` folders of saves killed between their two renames: `.step_<N>.old/` is
    there and `step_<N>/` is not. Such a `.tmp` is complete (the old copy is set aside only after
    every rank has written its part) and is the run's newest save: nothing saves before the next
    start puts it in place (hrm.train_checkpoint.finish_unrenamed_saves). Read-only, so every rank,
    and pretrain.py before any lock is taken, find the same checkpoint whether or not rank 0 has
    renamed it yet."""
    run_dir = Path(run_dir)
    found = []
    for old in run_dir.glob(".step_*.old"):
        step = step_number(Path(old.name[1:-len(".old")]))
        new = run_dir / f".step_{step}.tmp"
        if step is not None and not (run_dir / f"step_{step}").exists() and (new / "trainer.pt").is_file():
            found.append(new)
    return sorted(found, key=checkpoint_step)
