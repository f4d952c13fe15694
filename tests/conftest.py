"""Shared fixtures: a small real ARC build (16 official tasks, 4 augmentations) and a micro model."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARC1 = ROOT.parent / "shared" / "data" / "ARC-AGI-1"

# Small enough for a CPU test step in tens of milliseconds, with every part of the model present.
MICRO_ARCH = dict(name="micro", hidden_size=32, num_heads=2, expansion=2, H_layers=1, L_layers=1, H_cycles=2,
                  L_cycles=2, halt_max_steps=2, halt_exploration_prob=0.1, puzzle_emb_ndim=32,
                  scaling={"rule": "deeploop"})


def build_small(out: Path, n_train: int = 8, n_eval: int = 8, num_aug: int = 4) -> Path:
    from arc_data.build import BuildConfig, build
    src = out.parent / f"{out.name}-src"
    for subset, n in (("training", n_train), ("evaluation", n_eval)):
        (src / subset).mkdir(parents=True)
        for f in sorted((ARC1 / subset).glob("*.json"))[:n]:
            shutil.copy(f, src / subset / f.name)
    build(BuildConfig(source_dir=str(src), num_aug=num_aug, output_dir=str(out)), progress=False)
    return out


@pytest.fixture(scope="session")
def small_build(tmp_path_factory) -> Path:
    if not ARC1.is_dir():
        pytest.skip("needs ../shared/data/ARC-AGI-1")
    return build_small(tmp_path_factory.mktemp("data") / "arc-small")
