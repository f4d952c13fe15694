"""Find and read prediction files (contract: DESIGN.md, Predictions).

The trainer writes ``checkpoints/<project>/<run>/predictions/step_<step>/rank_<r>.npz`` and an
``info.json`` beside them: ``{"data_path", "step", "world_size", "checkpoint"}``.
"""
from __future__ import annotations

import glob
import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.encoding import SEQ_LEN
from evaluate.errors import EvaluationInputError
from evaluate.npz_reader import open_npz
from hrm.step_names import step_number

ARRAYS = {"puzzle_identifiers": np.int32, "inputs": np.uint8, "preds": np.uint8, "q_halt_logits": np.float32}
# at any depth: checkpoints/<project>/<run>/ by default, deeper with checkpoint_path=checkpoints/a/b/c
INFO_GLOB = "**/predictions/step_*/info.json"


@dataclass
class PredictionSet:
    files: list[Path]
    info: dict | None         # info.json of their folder, when there is one
    source: str               # what was asked for, for the report


def newest_predictions(checkpoints: Path) -> Path:
    """The predictions folder under ``checkpoints`` whose info.json was written last."""
    infos = sorted(Path(checkpoints).glob(INFO_GLOB), key=lambda p: p.stat().st_mtime)
    if not infos:
        raise EvaluationInputError(f"no predictions found under {checkpoints}/ (looked for "
                                   f"{checkpoints}/{INFO_GLOB}); pass --predictions")
    return infos[-1].parent


def read_info(folder: Path) -> dict | None:
    path = Path(folder) / "info.json"
    if not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        # refused even with --data given: its world_size guards against a missing rank file
        raise EvaluationInputError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(info, dict):
        raise EvaluationInputError(f"{path} must hold a JSON object, got {type(info).__name__}")
    # the fields vote.py uses, checked here so a wrong type is named instead of failing later
    if not isinstance(info.get("data_path"), (str, type(None))):
        raise EvaluationInputError(f"{path}: data_path must be a string, got {info['data_path']!r}")
    world_size = info.get("world_size")
    if world_size is not None and (type(world_size) is not int or world_size < 1):
        raise EvaluationInputError(f"{path}: world_size must be a positive whole number, got {world_size!r}")
    return info


def resolve_predictions(spec: str | None, checkpoints: Path = Path("checkpoints")) -> PredictionSet:
    """``spec`` is a file, a folder of rank files with its info.json, a glob, or None for the newest
    under checkpoints/."""
    if spec is None:
        folder = newest_predictions(checkpoints)
        return _folder(folder, str(folder))
    path = Path(spec)
    if path.is_dir():
        return _folder(path, spec)
    if path.is_file():
        if path.suffix == ".pt" and (path.parent / "model.pt").is_file():   # 'missing array(s) ...' said less
            raise EvaluationInputError(f"--predictions {spec} is a file of a checkpoint, not predictions"
                                       f"{_newest_step_hint(path.parent)}")
        return PredictionSet([path], read_info(path.parent), spec)
    # a folder's info.json describes its rank files; `step_N/*` means those files, so it is skipped
    files = sorted(Path(p) for p in glob.glob(spec) if Path(p).is_file() and Path(p).name != "info.json")
    if not files:
        # `run/predictions/step_*` (an ensemble of steps meant) matches folders, not their files:
        # "no matching files" alone would read as a wrong path
        folders = sorted(p for p in glob.glob(spec) if Path(p).is_dir())
        if folders:
            shown = ", ".join(folders[:3]) + (f" and {len(folders) - 3} more" if len(folders) > 3 else "")
            raise EvaluationInputError(f"--predictions {spec} matches only folders ({shown}): pass one folder, or "
                                       f"--predictions '{spec.rstrip('/')}/*.npz' --data BUILD to vote the files of "
                                       f"all of them together")
        raise EvaluationInputError(f"--predictions {spec}: no such file, folder, or matching files")
    parents = {f.parent for f in files}
    return PredictionSet(files, read_info(parents.pop()) if len(parents) == 1 else None, spec)


def _folder(folder: Path, source: str) -> PredictionSet:
    # not hidden files: `.rank_<r>.tmp.npz` is a write that never finished (hrm/evaluation.py)
    files = sorted(f for f in folder.glob("*.npz") if not f.name.startswith("."))
    if not files:
        raise EvaluationInputError(f"no .npz prediction files in {folder}{_newest_step_hint(folder)}")
    info = read_info(folder)
    if info is None:
        # info.json is written last and removed first on a rewrite (hrm/evaluation.py): without it the
        # evaluation did not finish, and its rank files may be of two evaluations, which no count shows
        raise EvaluationInputError(f"{folder} has no info.json: the evaluation that wrote it did not finish, so its "
                                   f"files may be incomplete or of two evaluations; run it again, or pass "
                                   f"--predictions '{folder}/*.npz' with --data to vote on them anyway")
    world_size = info.get("world_size")
    # a folder is one evaluation: a missing rank would silently drop tasks from the score
    if isinstance(world_size, int) and world_size != len(files):
        raise EvaluationInputError(f"{folder}/info.json says world_size {world_size} but the folder holds "
                                   f"{len(files)} .npz files")
    return PredictionSet(files, info, source)


def _newest_step_hint(folder: Path) -> str:
    """For a run folder (or its predictions/) passed as --predictions: the newest step_<N>
    predictions inside it, which is what was meant; for a checkpoint folder, its predictions."""
    if (folder / "model.pt").is_file():
        # a checkpoint's step folder (run/step_N), mistaken for its predictions (run/predictions/step_N)
        beside = folder.parent / "predictions" / folder.name
        if (beside / "info.json").is_file():
            return f" ({folder} is a checkpoint; its predictions: --predictions {beside})"
        return f" ({folder} is a checkpoint; python evaluate/predict.py checkpoint={folder} writes its predictions)"
    steps = [p.parent for pattern in ("step_*/info.json", "predictions/step_*/info.json")
             for p in folder.glob(pattern) if step_number(p.parent) is not None]
    if not steps:
        return ""
    newest = max(steps, key=step_number)
    return f" (a run's predictions are in its predictions/step_<N>/ folders; the newest: --predictions {newest})"


class PredictionFile:
    """The four contract arrays of one file, checked for presence, shape and dtype, read on demand."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            arrays = open_npz(self.path)
        except (OSError, ValueError, zipfile.BadZipFile, zlib.error) as e:
            # zlib.error: a compressed member whose first bytes (its .npy header) do not inflate
            raise EvaluationInputError(f"{path}: not a readable .npz file ({e})") from None
        missing = [k for k in ARRAYS if k not in arrays]
        if missing:
            raise EvaluationInputError(f"{path}: missing array(s) {', '.join(missing)} "
                                       f"(has {', '.join(arrays) or 'none'}; contract: {', '.join(ARRAYS)})")
        self.arrays = arrays
        ids = arrays["puzzle_identifiers"]
        if len(ids.shape) != 1:
            raise EvaluationInputError(f"{path}: puzzle_identifiers must be 1-D, got shape {ids.shape}")
        self.rows = ids.shape[0]
        for key in ("inputs", "preds", "q_halt_logits"):
            expected = (self.rows, SEQ_LEN) if key != "q_halt_logits" else (self.rows,)
            if arrays[key].shape != expected:
                raise EvaluationInputError(f"{path}: array {key!r} has shape {arrays[key].shape}, expected "
                                           f"{expected} ({self.rows} rows, as puzzle_identifiers)")
        for key, array in arrays.items():
            if key in ARRAYS and not _castable(array.dtype, np.dtype(ARRAYS[key])):
                raise EvaluationInputError(f"{path}: array {key!r} has dtype {array.dtype}, "
                                           f"expected {np.dtype(ARRAYS[key])}")

    def read(self, key: str, start: int = 0, stop: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``start:stop`` of an array in its contract dtype (into ``out`` when given)."""
        array, target = self.arrays[key], np.dtype(ARRAYS[key])
        try:
            if array.dtype == target:
                return array.read(start, stop, out)
            value = array.read(start, stop)
        except (EOFError, OSError, zlib.error) as e:
            # a damaged file (a compressed member that does not inflate, a member cut short) is
            # named like every other refusal, not a traceback
            raise EvaluationInputError(f"{self.path}: array {key!r} cannot be read ({e})") from None
        # e.g. int64 argmax tokens: accepted when every value fits the contract dtype
        if target.kind in "iu" and value.size:
            info = np.iinfo(target)
            if value.min() < info.min or value.max() > info.max:
                raise EvaluationInputError(f"{self.path}: array {key!r} ({value.dtype}) holds values "
                                           f"outside the range of {target}")
        if out is None:
            return value.astype(target)
        out[...] = value
        return out


def _castable(source: np.dtype, target: np.dtype) -> bool:
    return (source.kind in "iu" and target.kind in "iu") or (source.kind in "iuf" and target.kind == "f")
