"""The `step_<N>` names of a run's checkpoint folders and their predictions folders.

Without torch: vote.py reads predictions folders, and loading torch takes seconds.
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
