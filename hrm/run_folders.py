"""Where a run's checkpoints are, found by path alone: the run folder a config names, its step
folders, the checkpoint `resume=` picks, and the hints that name what is there when it is not.

Without torch (as hrm.step_names): pretrain.py says a `resume=` or run-folder mistake before
anything loads torch, which takes seconds; predict.py and hrm.train_checkpoint use the same rules.
"""
from __future__ import annotations

from pathlib import Path

from hrm.pretrain_config import command_line_arg
from hrm.step_names import checkpoint_step, step_number, unrenamed_saves


def project_of(project_name: str | None, data_path: str) -> str:
    return project_name or f"{Path(data_path).name}-hrm"


def run_folder(project_name: str | None, run_name: str, checkpoint_path: str | None, data_path: str,
               tag: str = "") -> Path:
    """checkpoint_path (a sweep job's: <checkpoint_path>/<tag>), else
    checkpoints/<project_of(...)>/<run name>[-<tag>]."""
    if checkpoint_path:
        return Path(checkpoint_path) / tag if tag else Path(checkpoint_path)
    return Path("checkpoints") / project_of(project_name, data_path) / (f"{run_name}-{tag}" if tag else run_name)


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete step folders, oldest first, with any save killed before its last rename
    (unrenamed_saves: `.step_<N>.tmp`, in step N's place). Only `step_<N>` counts: a copy beside
    them (`step_7.bak`, `step_best`) is not one of the run's checkpoints (nor a crash of the sort)."""
    run_dir = Path(run_dir)
    found = [p for p in run_dir.glob("step_*")
             if step_number(p) is not None and p.is_dir() and (p / "trainer.pt").is_file()]
    return sorted(found + unrenamed_saves(run_dir), key=checkpoint_step)


def same_name_elsewhere(run_dir: Path, shown: int = 3) -> str:
    """A hint for `resume=latest` that found nothing: runs of the same name in the other projects
    beside this one (checkpoints/<project>/<run>). The project defaults to `<data folder>-hrm`, so
    pointing data_path at another build looks in another project."""
    others = sorted(p.parent for p in run_dir.parent.parent.glob(f"*/{run_dir.name}")
                    if p.parent != run_dir.parent and list_checkpoints(p))
    if not others:
        return ""
    listed = ", ".join(str(p / run_dir.name) for p in others[:shown]) + (" ..." if len(others) > shown else "")
    return (f"; a run of that name has checkpoints in another project: {listed} (pass its project_name=; "
            f"the project defaults to '<data folder>-hrm')")


def resolve_resume(resume: str, run_dir: str | Path | None, other_projects: bool = True) -> Path:
    """`resume=latest` (the newest checkpoint of the run folder), a step folder, or another run's
    folder (its newest checkpoint, as `latest` picks it there). `other_projects`: whether the run
    folder is checkpoints/<project>/<run>, so that a `latest` that finds nothing may name runs of the
    same name in other projects (not with checkpoint_path, where project_name changes nothing)."""
    if resume == "latest":
        if run_dir is None:
            # run_name alone names it: the project defaults to the build's ('<data folder>-hrm')
            raise ValueError("resume=latest needs the run's folder: set run_name (and project_name when the run's "
                             "project is not '<data folder>-hrm') or checkpoint_path")
        unrenamed = unrenamed_saves(run_dir)
        if unrenamed:   # the run's newest save, killed before it could rename itself and rewrite `latest`
            return unrenamed[-1]
        pointer = Path(run_dir) / "latest"
        if pointer.is_file() and (Path(run_dir) / pointer.read_text().strip() / "trainer.pt").is_file():
            return Path(run_dir) / pointer.read_text().strip()
        found = list_checkpoints(run_dir)
        if not found:
            elsewhere = same_name_elsewhere(Path(run_dir)) if other_projects else ""
            raise FileNotFoundError(f"resume=latest: no checkpoint under {run_dir}{elsewhere or runs_inside_hint(run_dir)}")
        # `latest` names a step that is not a checkpoint (its trainer.pt missing): the newest one
        # before it, not a later step of a line the run left (resumed from an earlier step of its
        # own folder), which the step numbers would take for the newest
        named = step_number(Path(pointer.read_text().strip())) if pointer.is_file() else None
        before = [c for c in found if named is not None and checkpoint_step(c) < named]
        return (before or found)[-1]
    path = Path(resume)
    if (path / "trainer.pt").is_file():
        return path
    if path.is_dir() and list_checkpoints(path):
        return resolve_resume("latest", path)
    if not path.exists():
        raise FileNotFoundError(f"resume={resume}: no such folder{missing_step_hint(path)}")
    raise FileNotFoundError(f"resume={resume}: neither a checkpoint folder (step_<N>/ with trainer.pt) nor a run "
                            f"folder holding one{runs_inside_hint(path)}")


def runs_inside_hint(folder: str | Path, option: str = "resume", does: str = "continues one", shown: int = 3) -> str:
    """'; it holds the run folders a, b (...): <option>=<a> <does>' for a folder whose subfolders
    are run folders (a project's runs; a sweep's jobs: <checkpoint_path>/<swept values>), else ''.
    For resuming (pretrain.py, option resume: a whole sweep continues as a sweep) and evaluating
    (predict.py, option checkpoint)."""
    folder = Path(folder)
    try:
        runs = sorted(sub for sub in folder.iterdir() if sub.is_dir() and list_checkpoints(sub))
    except OSError:
        return ""
    if not runs:
        return ""
    listed = ", ".join(r.name for r in runs[:shown]) + (f" and {len(runs) - shown} more" if len(runs) > shown else "")
    sweep = "; a sweep's command run again with resume=latest continues each of its jobs" if option == "resume" else ""
    return (f"; it holds the run folders {listed} (a project's, or a sweep's checkpoint_path): "
            f"{suggested(option, runs[0])} {does}{sweep}")


def suggested(option: str, path: Path) -> str:
    """`option=path` as the user types it: resume= is pretrain.py's, read by Hydra (a sweep's run
    folder holds `=`, which Hydra reads as syntax unless quoted); checkpoint= is predict.py's own."""
    return command_line_arg(option, path, hydra=option == "resume")


def missing_step_hint(path: str | Path, option: str = "resume", does: str = "continues from",
                      shown: int = 3) -> str:
    """'; the run folder <run> holds step_a, step_b: <option>=<run> <does> its newest' for a step
    folder that does not exist (removed by keep_checkpoints, or mistyped) in a run folder that holds
    checkpoints, else ''. A step folder's model.pt stands for the folder (predict.py takes either).
    For resuming (pretrain.py, option resume) and evaluating (predict.py, option checkpoint)."""
    path = Path(path)
    if path.name == "model.pt":
        path = path.parent
    if path.exists():   # the step folder is there (its model.pt is not): the run folder would choose it again
        return ""
    found = [c.name for c in list_checkpoints(path.parent)]
    if not found:
        return ""
    listed = ("..., " if len(found) > shown else "") + ", ".join(found[-shown:])
    return f"; the run folder {path.parent} holds {listed}: {suggested(option, path.parent)} {does} its newest"


def previous_checkpoint_hint(step_dir: str | Path, option: str = "resume",
                             does: str = "continues from") -> str:
    """'; <option>=<the step before> <does> the previous checkpoint' when the run folder holds a
    complete checkpoint before `step_dir`, else ''. For the error on a file of `step_dir` that cannot
    be read: resuming (pretrain.py, option resume) and evaluating (predict.py, option checkpoint)."""
    step_dir = Path(step_dir)
    found = [c.name for c in list_checkpoints(step_dir.parent)]
    earlier = found[:found.index(step_dir.name)] if step_dir.name in found else []
    return f"; {suggested(option, step_dir.parent / earlier[-1])} {does} the previous checkpoint" if earlier else ""
