"""Read what the evaluator needs from a build directory (layout: DESIGN.md, Data).

Inputs and labels are read row by row: the vote only needs the rows of the original (non-augmented)
puzzles, about 419 of the 385,812 test examples.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.augment import parse_augmentation_name
from arc_data.encoding import COLOUR_OFFSET, MAX_GRID, SEQ_LEN, VOCAB_SIZE, crop
from evaluate.errors import EvaluationInputError
from evaluate.identifiers import Identifiers
from evaluate.npz_reader import NPY_HEADER_ERRORS, read_npy_header

SPLIT_ARRAYS = ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")


def load_identifiers(data_dir: Path) -> Identifiers:
    return Identifiers(Path(data_dir) / "identifiers.json")


def load_split(data_dir: Path, split: str) -> dict[str, np.ndarray]:
    """The five ``all__*.npy`` arrays of a split; inputs and labels as :class:`NpyRows`."""
    arrays = {}
    for key in SPLIT_ARRAYS:
        path = Path(data_dir) / split / f"all__{key}.npy"
        if not path.is_file():
            raise EvaluationInputError(f"{path} not found: the build in {data_dir} is incomplete")
        arrays[key] = NpyRows(path) if key in ("inputs", "labels") else load_small_array(path)
        # what the builder writes (int32 [n]); another type or shape fails later without a name
        if key not in ("inputs", "labels") and (arrays[key].ndim != 1 or arrays[key].dtype.kind not in "iu"):
            raise EvaluationInputError(f"{path}: expected a 1-D array of whole numbers (int32), got "
                                       f"{arrays[key].dtype} with shape {arrays[key].shape}; rebuild the data")
    for key in ("inputs", "labels"):
        if arrays[key].ndim != 2 or arrays[key].shape[1] != SEQ_LEN:
            raise EvaluationInputError(f"{data_dir}/{split}/all__{key}.npy has shape "
                                       f"{arrays[key].shape}, expected [examples, {SEQ_LEN}]")
    return arrays


def load_small_array(path: Path) -> np.ndarray:
    """np.load, with a file cut short or not a .npy at all refused by name (numpy's own messages,
    such as "cannot reshape array of size 3 into shape (5,)", name no file)."""
    try:
        return np.load(path)
    except (*NPY_HEADER_ERRORS, EOFError, OSError) as e:
        raise EvaluationInputError(f"{path}: not a complete .npy array ({e}); rebuild the data") from None


class NpyRows:
    """Single rows of a large .npy, read with seek+read.

    A memory map would do, but every row touched maps a whole block of the page cache into the
    process (its RSS): the ~800 scattered rows the vote needs showed up as 700 MB.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.shape, fortran, self.dtype, self.offset = _read_npy_header(self.path)
        if fortran or self.dtype != np.uint8:
            raise EvaluationInputError(f"{path}: expected a C-ordered uint8 array, got {self.dtype}")
        self.ndim = len(self.shape)
        # rows are read one at a time, later: a file cut short would show up there as an empty
        # row and a reshape error that names nothing, so its size is checked against the header now
        expected = self.offset + int(np.prod(self.shape)) * self.dtype.itemsize
        actual = os.path.getsize(self.path)
        if actual != expected:
            raise EvaluationInputError(
                f"{path} holds {actual} bytes, but its header ({list(self.shape)} {self.dtype}) needs {expected}: "
                f"the file is {'cut short' if actual < expected else 'longer than its array'}; rebuild the data")

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, row: int) -> np.ndarray:
        width = int(np.prod(self.shape[1:]))
        if not 0 <= row < self.shape[0]:
            raise IndexError(f"row {row} of {self.path} (shape {self.shape})")
        with open(self.path, "rb") as f:
            f.seek(self.offset + row * width)
            return np.frombuffer(f.read(width), dtype=np.uint8)


def _read_npy_header(path: Path) -> tuple[tuple, bool, np.dtype, int]:
    """(shape, fortran order, dtype, offset of the data) from a .npy header; a file too short to
    hold one, or not a .npy, is refused by name."""
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = read_npy_header(f)
            return shape, fortran, dtype, f.tell()
    except (ValueError, EOFError) as e:
        raise EvaluationInputError(f"{path}: not a complete .npy header ({e}); rebuild the data") from None


def decode_grid(tokens: np.ndarray) -> np.ndarray:
    """A grid from its token canvas wherever it was placed (the train split translates grids).

    The grid's top-left corner is the first row and column holding a colour token; from there the
    contract crop applies. Test-split grids sit at (0, 0), where this equals ``crop``.
    """
    canvas = np.asarray(tokens).reshape(MAX_GRID, MAX_GRID)
    colour = (canvas >= COLOUR_OFFSET) & (canvas < VOCAB_SIZE)
    if not colour.any():
        return np.zeros((0, 0), dtype=np.uint8)
    r = int(np.argmax(colour.any(axis=1)))
    c = int(np.argmax(colour.any(axis=0)))
    shifted = np.zeros_like(canvas)
    shifted[:MAX_GRID - r, :MAX_GRID - c] = canvas[r:, c:]
    return crop(shifted)


def puzzle_examples(split: dict[str, np.ndarray], identifier: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """All (input, output) grids of the puzzle with this identifier in a split (empty if absent)."""
    found = np.flatnonzero(split["puzzle_identifiers"] == identifier)
    pairs = []
    for p in found.tolist():
        lo, hi = int(split["puzzle_indices"][p]), int(split["puzzle_indices"][p + 1])
        pairs += [(decode_grid(split["inputs"][e]), decode_grid(split["labels"][e])) for e in range(lo, hi)]
    return pairs


def canonical(grid: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """A grid as the kernels' canonical row: cells row-major at the front of 900 bytes."""
    row = np.zeros(SEQ_LEN, dtype=np.uint8)
    row[:grid.size] = grid.reshape(-1)
    return row, grid.shape


@dataclass
class EvaluationSplit:
    """The evaluation tasks of a build: their test inputs and ground truth, in build order."""
    data_dir: Path
    identifiers: Identifiers
    tasks: list[str]                 # task names (the original puzzles of the test split)
    task_pair_start: np.ndarray      # int64 [T+1]: test pairs of task k are [start[k], start[k+1])
    pair_inputs: np.ndarray          # uint8 [P, 900] canonical original test inputs
    pair_input_shape: np.ndarray     # uint8 [P, 2]
    truth: np.ndarray                # uint8 [P, 900] canonical ground-truth outputs
    truth_shape: np.ndarray          # uint8 [P, 2]
    ident_task: np.ndarray           # int32 [identifiers]: task index of each test-split puzzle, else -1

    @property
    def num_pairs(self) -> int:
        return len(self.truth)


def check_indices(split_dir: Path, split: dict) -> None:
    """The split's index arrays must cut its rows in order: puzzle_indices from 0 to the number of
    rows (one more entry than puzzles), never decreasing; group_indices from 0 to the number of
    puzzles, increasing (a group starts with its original puzzle, as arc_data.dataset requires);
    inputs and labels as long as each other. A damaged or hand-edited build is refused here, naming
    the file, rather than failing on a row that is not there."""
    rows = len(split["inputs"])
    if len(split["labels"]) != rows:
        raise EvaluationInputError(f"{split_dir}/all__labels.npy has {len(split['labels'])} rows, all__inputs.npy "
                                   f"{rows}; rebuild the data")
    puzzles = len(split["puzzle_identifiers"])
    for name, end, entries, least, counted in (
            ("puzzle_indices", rows, puzzles + 1, 0, "rows of all__inputs.npy"),
            # an empty group would have its task named after the next group's puzzle (or past the last)
            ("group_indices", puzzles, None, 1, "puzzles of all__puzzle_identifiers.npy")):
        index = split[name]
        if len(index) < 1 or index[0] != 0 or index[-1] != end or np.any(np.diff(index) < least) \
                or (entries is not None and len(index) != entries):
            order = "increasing" if least else "without decreasing"
            raise EvaluationInputError(f"{split_dir}/all__{name}.npy does not cut the split's {end} {counted} in "
                                       f"order (it must run from 0 to {end} {order}, one entry more than "
                                       f"the parts it cuts); rebuild the data")


def load_test_split(data_dir: Path) -> EvaluationSplit:
    """Ground truth: the first puzzle of every test-split group is the original task."""
    data_dir = Path(data_dir)
    identifiers = load_identifiers(data_dir)
    split = load_split(data_dir, "test")
    puzzle_ids, puzzle_idx = split["puzzle_identifiers"], split["puzzle_indices"]
    group_idx = split["group_indices"]
    if len(puzzle_ids) and (puzzle_ids.min() < 1 or puzzle_ids.max() >= len(identifiers)):
        raise EvaluationInputError(f"{data_dir}/test/all__puzzle_identifiers.npy holds identifiers outside "
                                   f"1..{len(identifiers) - 1} (the size of identifiers.json)")
    check_indices(data_dir / "test", split)
    tasks, starts = [], [0]
    group_of_task = {}           # the report and submission are keyed by task name: one group each
    inputs, truths = [], []      # canonical (row, shape) per test pair
    for g in range(len(group_idx) - 1):
        p = int(group_idx[g])
        name = identifiers[int(puzzle_ids[p])]
        if parse_augmentation_name(name)[0] != name:
            raise EvaluationInputError(f"test group {g} of {data_dir} starts with {name!r}, an augmented "
                                       f"puzzle; the original must come first")
        if name in group_of_task:
            raise EvaluationInputError(f"{data_dir / 'test' / 'all__puzzle_identifiers.npy'}: task {name!r} begins "
                                       f"test groups {group_of_task[name]} and {g}; rebuild the data")
        group_of_task[name] = g
        for e in range(int(puzzle_idx[p]), int(puzzle_idx[p + 1])):
            inputs.append(canonical(crop(split["inputs"][e])))
            truths.append(canonical(crop(split["labels"][e])))
            # a prediction is matched to its test input by content: two equal inputs cannot be told apart
            for i in range(starts[-1], len(inputs) - 1):
                if inputs[i][1] == inputs[-1][1] and np.array_equal(inputs[i][0], inputs[-1][0]):
                    raise EvaluationInputError(
                        f"task {name!r} of {data_dir}: test inputs {i - starts[-1]} and {len(inputs) - 1 - starts[-1]} "
                        f"are the same grid, so a prediction cannot be assigned to one of them; voting needs "
                        f"distinct test inputs per task")
        tasks.append(name)
        starts.append(len(inputs))
    # every puzzle of a group is a version of the group's task
    ident_task = np.full(len(identifiers), -1, dtype=np.int32)
    ident_task[puzzle_ids] = np.repeat(np.arange(len(group_idx) - 1), np.diff(group_idx))
    return EvaluationSplit(data_dir=data_dir, identifiers=identifiers, tasks=tasks,
                     task_pair_start=np.asarray(starts, dtype=np.int64),
                     pair_inputs=_rows(inputs), pair_input_shape=_shapes(inputs),
                     truth=_rows(truths), truth_shape=_shapes(truths), ident_task=ident_task)


def _rows(items: list) -> np.ndarray:
    return np.stack([row for row, _ in items]) if items else np.zeros((0, SEQ_LEN), dtype=np.uint8)


def _shapes(items: list) -> np.ndarray:
    return np.array([shape for _, shape in items], dtype=np.uint8).reshape(-1, 2)
