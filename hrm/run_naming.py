"""A run's name: `<arch>-<time stamp>` by default (one stamp for a sweep's jobs), its project and
run folder, and whether a resumed start continues its run under the name it started with."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

from hrm.distributed import DistInfo, broadcast_object
from hrm.pretrain_config import PretrainConfig
from hrm.run_folders import project_of, run_folder


_sweep_stamp: str | None = None   # the time stamp shared by a sweep's default run names (see run_names)
sweep_started: datetime | None = None   # the sweep's start as its record's folder names it (pretrain.py)


def default_stamp(info: DistInfo, sweep: bool) -> str:
    """The time stamp of a default run name: now, by rank 0's clock. A sweep's jobs (one process
    runs them one after the other) share one, so that one sweep's runs sort together and read as one
    experiment (`hrm_v1-20261130-101500-lr=0.001`, `...-lr=0.003`): the time in the name of the
    sweep's record, `checkpoints/multirun/2026-11-30_10-15-00/`, when rank 0 knows it
    (`sweep_started`), so the two are found from each other; else the first job's start."""
    global _sweep_stamp
    if sweep and _sweep_stamp is not None:
        return _sweep_stamp
    when = sweep_started if sweep and sweep_started is not None else datetime.now()
    stamp = broadcast_object(f"{when:%Y%m%d-%H%M%S}", info)
    if sweep:
        _sweep_stamp = stamp
    return stamp


def run_names(config: PretrainConfig, info: DistInfo, tag: str = "") -> tuple[str, str, Path]:
    """(project, run, run folder). The default run name is `<arch>-<time stamp>` (rank 0's clock).
    `tag` tells apart the runs of one sweep (pretrain.py's multirun: the swept values): it ends the
    run name (`<run>-<tag>`), and a given checkpoint_path gets it as a subfolder."""
    run = config.run_name or f"{config.arch.name}-{default_stamp(info, sweep=bool(tag))}"
    return (project_of(config.project_name, config.data_path), run + (f"-{tag}" if tag else ""),
            run_folder(config.project_name, run, config.checkpoint_path, config.data_path, tag))


def continues_its_run(run_name: str | None, run_dir: Path, checkpoint: Path) -> bool:
    """Whether a start that resumes `checkpoint` and writes to `run_dir` continues that run under
    the name (and project) it started with: no run_name given, and the checkpoint is in the folder
    it writes to (resume=<its folder>, or checkpoint_path= that folder). W&B then continues the
    same run. hrm.train.Trainer._resume and hrm.resume_settings decide it here alike."""
    return not run_name and Path(checkpoint).parent.resolve() == Path(run_dir).resolve()
