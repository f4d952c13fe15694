"""Find and read prediction files (contract: DESIGN.md, Predictions).

The trainer writes ``checkpoints/<project>/<run>/predictions/step_<step>/rank_<r>.npz`` and an
``info.json`` beside them: ``{"data_path", "step", "world_size", "checkpoint"}``.
"""
from __future__ import annotations

import glob
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.encoding import SEQ_LEN
from evaluate.errors import EvaluationInputError

ARRAYS = {"puzzle_identifiers": np.int32, "inputs": np.uint8, "preds": np.uint8, "q_halt_logits": np.float32}
INFO_GLOB = "*/*/predictions/step_*/info.json"


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
    with open(path) as f:
        info = json.load(f)
    if not isinstance(info, dict):
        raise EvaluationInputError(f"{path} must hold a JSON object")
    return info


def resolve_predictions(spec: str | None, checkpoints: Path = Path("checkpoints")) -> PredictionSet:
    """``spec`` is a file, a folder of rank files, a glob, or None for the newest under checkpoints/."""
    if spec is None:
        folder = newest_predictions(checkpoints)
        return _folder(folder, str(folder))
    path = Path(spec)
    if path.is_dir():
        return _folder(path, spec)
    if path.is_file():
        return PredictionSet([path], read_info(path.parent), spec)
    files = sorted(Path(p) for p in glob.glob(spec) if Path(p).is_file())
    if not files:
        raise EvaluationInputError(f"--predictions {spec}: no such file, folder, or matching files")
    parents = {f.parent for f in files}
    return PredictionSet(files, read_info(parents.pop()) if len(parents) == 1 else None, spec)


def _folder(folder: Path, source: str) -> PredictionSet:
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise EvaluationInputError(f"no .npz prediction files in {folder}")
    info = read_info(folder)
    world_size = info.get("world_size") if info else None
    # a folder is one evaluation: a missing rank would silently drop tasks from the score
    if isinstance(world_size, int) and world_size != len(files):
        raise EvaluationInputError(f"{folder}/info.json says world_size {world_size} but the folder holds "
                                   f"{len(files)} .npz files")
    return PredictionSet(files, info, source)


def read_identifiers(path: Path) -> np.ndarray:
    """Just the identifiers of a prediction file (small), to plan the vote before the big arrays."""
    return _read(path, ("puzzle_identifiers",))["puzzle_identifiers"]


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The four contract arrays of one file, checked for presence, shape and dtype."""
    arrays = _read(path, tuple(ARRAYS))
    n = len(arrays["puzzle_identifiers"])
    for key in ("inputs", "preds", "q_halt_logits"):
        expected = (n, SEQ_LEN) if key != "q_halt_logits" else (n,)
        if arrays[key].shape != expected:
            raise EvaluationInputError(f"{path}: array {key!r} has shape {arrays[key].shape}, expected "
                                       f"{expected} ({n} rows, as puzzle_identifiers)")
    return arrays


def _read(path: Path, keys) -> dict[str, np.ndarray]:
    try:
        npz = np.load(path)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise EvaluationInputError(f"{path}: not a readable .npz file ({e})") from None
    with npz:
        missing = [k for k in keys if k not in npz.files]
        if missing:
            raise EvaluationInputError(f"{path}: missing array(s) {', '.join(missing)} "
                                       f"(has {', '.join(npz.files) or 'none'}; contract: {', '.join(ARRAYS)})")
        out = {}
        for key in keys:
            value = npz[key]
            if key == "puzzle_identifiers" and value.ndim != 1:
                raise EvaluationInputError(f"{path}: puzzle_identifiers must be 1-D, got shape {value.shape}")
            if value.dtype != ARRAYS[key]:
                value = _cast(path, key, value)
            out[key] = value
    return out


def _cast(path: Path, key: str, value: np.ndarray) -> np.ndarray:
    """Accept any integer (or float) array whose values fit the contract dtype, e.g. int64 argmax."""
    target = np.dtype(ARRAYS[key])
    if value.dtype.kind in "iu" and target.kind in "iu":
        info = np.iinfo(target)
        if value.size and (value.min() < info.min or value.max() > info.max):
            raise EvaluationInputError(f"{path}: array {key!r} ({value.dtype}) holds values outside "
                                       f"the range of {target}")
        return value.astype(target)
    if value.dtype.kind in "iuf" and target.kind == "f":
        return value.astype(target)
    raise EvaluationInputError(f"{path}: array {key!r} has dtype {value.dtype}, expected {target}")
