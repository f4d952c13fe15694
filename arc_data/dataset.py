"""Reader for an arc-aug build: memory-mapped splits, group-packed training batches, test batches.

Layout read (DESIGN.md, "Data"): ``<dir>/{train,test}/dataset.json`` and ``all__{inputs,labels,
puzzle_identifiers,puzzle_indices,group_indices}.npy``. A *group* is an original puzzle followed by
its augmented variants; a *puzzle* owns a run of consecutive *examples* (rows of inputs/labels).

Batches are dicts of CPU tensors, one rank's slice of a global batch:

- ``inputs``             int32 [local_batch, seq_len]  tokens (PAD=0 where a test batch is padded)
- ``labels``             int64 [local_batch, seq_len]  tokens, the build's ignore id (PAD) -> -100
- ``puzzle_identifiers`` int32 [local_batch]           row of the puzzle-embedding table, 0 = blank

Training (`TrainBatches`). Time is cut into *iterations* of ``epochs_per_iteration`` epochs (HRM
evaluates between iterations). Every epoch is a permutation of the groups; each position in it is a
*slot* holding one random puzzle of that group with all its examples in random order. The slots of
an iteration form one stream that is cut into global batches of exactly ``global_batch_size``
examples: a slot that does not fit is truncated and its rest dropped, so every batch begins at the
start of a slot, and the incomplete batch at the end of an iteration is dropped (as HRM does).
All randomness of an epoch comes from (seed, epoch) alone, so every rank computes the same global
batch and takes the contiguous rows ``[rank * local, (rank + 1) * local)``; the global batches do
not depend on the world size at all. The position is (epoch, slot) of the next batch's first
slot, which is all that is needed to resume exactly.

Test split (`EvalBatches`): all examples in order, global batches, each rank its slice, the last
global batch padded (inputs PAD, labels -100, puzzle_identifiers blank) so that every rank yields
the same number of equally shaped batches.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pydantic
import torch

IGNORE_LABEL = -100  # label value the loss skips (PyTorch's cross-entropy default ignore_index)
SET_NAME = "all"     # the one subset an arc-aug build holds
STATE_FORMAT = 1     # version of TrainBatches.state_dict()

Batch = dict[str, torch.Tensor]


class DatasetError(ValueError):
    """A build on disk is missing a file or is inconsistent; the message names the file."""


class NotABuild(DatasetError):
    """The folder holds no such split: not a build, or a build that is not there (moved, or a path
    recorded on another machine), which a caller that took the path from a record can say."""


class DatasetMetadata(pydantic.BaseModel):
    """The content of ``<split>/dataset.json`` (same fields as the original HRM builder writes)."""

    model_config = pydantic.ConfigDict(extra="ignore", frozen=True)

    seq_len: int
    vocab_size: int
    pad_id: int
    ignore_label_id: Optional[int]  # label value mapped to IGNORE_LABEL; None: map nothing
    blank_identifier_id: int
    num_puzzle_identifiers: int
    total_groups: int
    mean_puzzle_examples: float
    sets: list[str]


@dataclass(frozen=True)
class PuzzleSplit:
    """One validated split: inputs/labels memory-mapped, the small index arrays in memory."""

    directory: Path
    metadata: DatasetMetadata
    inputs: np.ndarray              # uint8 [examples, seq_len], memory-mapped
    labels: np.ndarray              # uint8 [examples, seq_len], memory-mapped
    puzzle_identifiers: np.ndarray  # int32 [puzzles]
    puzzle_indices: np.ndarray      # int32 [puzzles + 1], example offsets
    group_indices: np.ndarray       # int32 [groups + 1], puzzle offsets

    @property
    def num_examples(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def num_puzzles(self) -> int:
        return int(self.puzzle_identifiers.shape[0])

    @property
    def num_groups(self) -> int:
        return int(self.group_indices.shape[0] - 1)

    def puzzles_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """Puzzle index of each example row (side="right" skips puzzles that have no examples)."""
        return np.searchsorted(self.puzzle_indices, rows, side="right") - 1


# ---------------------------------------------------------------------------------------------
# Loading and validation


def load_split(dataset_dir: str | Path, split: str) -> PuzzleSplit:
    """Open ``<dataset_dir>/<split>``, check every file against the layout, memory-map the data.

    Raises DatasetError naming the offending file when something is missing or inconsistent.
    """
    directory = Path(dataset_dir) / split
    if not directory.is_dir():
        raise NotABuild(f"{directory}: split directory not found (is {dataset_dir} a build?)")
    metadata = _load_metadata(directory / "dataset.json")
    if metadata.sets != [SET_NAME]:
        raise DatasetError(f"{directory / 'dataset.json'}: sets is {metadata.sets}, "
                           f"this reader reads builds with the single set [{SET_NAME!r}]")
    if metadata.blank_identifier_id != 0:
        # padding rows carry it; evaluation and the predictions contract know them by identifier 0
        raise DatasetError(f"{directory / 'dataset.json'}: blank_identifier_id is {metadata.blank_identifier_id}, "
                           f"this reader reads builds whose blank identifier is 0 (as every HRM builder writes)")

    def array(field: str, mmap: bool) -> tuple[Path, np.ndarray]:
        path = directory / f"{SET_NAME}__{field}.npy"
        if not path.is_file():
            raise DatasetError(f"{path}: file not found")
        try:
            return path, np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except Exception as error:  # a truncated or foreign file: say which one
            raise DatasetError(f"{path}: not a readable .npy file ({error})") from error

    inputs_path, inputs = array("inputs", mmap=True)
    labels_path, labels = array("labels", mmap=True)
    identifiers_path, puzzle_identifiers = array("puzzle_identifiers", mmap=False)
    puzzle_indices_path, puzzle_indices = array("puzzle_indices", mmap=False)
    group_indices_path, group_indices = array("group_indices", mmap=False)

    for path, values in [(inputs_path, inputs), (labels_path, labels)]:
        _expect(path, values, np.uint8, ndim=2)
        if values.shape[1] != metadata.seq_len:
            raise DatasetError(f"{path}: rows have {values.shape[1]} tokens, dataset.json says "
                               f"seq_len {metadata.seq_len}")
    if labels.shape != inputs.shape:
        raise DatasetError(f"{labels_path}: shape {labels.shape} differs from inputs "
                           f"{inputs.shape}")
    if not 0 <= metadata.pad_id < metadata.vocab_size:
        # padded test rows carry it as an input token
        raise DatasetError(f"{directory / 'dataset.json'}: pad_id {metadata.pad_id} lies outside "
                           f"[0, vocab_size={metadata.vocab_size})")
    # A token past the vocabulary would fail only in the model, hours in at a late batch: an
    # IndexError in the embedding that names no file, or a device-side assert on CUDA.
    _expect_tokens(inputs_path, inputs, metadata.vocab_size, allowed=None)
    _expect_tokens(labels_path, labels, metadata.vocab_size, allowed=metadata.ignore_label_id)
    for path, values in [(identifiers_path, puzzle_identifiers),
                         (puzzle_indices_path, puzzle_indices),
                         (group_indices_path, group_indices)]:
        _expect(path, values, np.int32, ndim=1)

    num_puzzles = puzzle_identifiers.shape[0]
    _expect_offsets(puzzle_indices_path, puzzle_indices, "puzzle", num_puzzles,
                    "example", inputs.shape[0], allow_empty=True)
    # A group without puzzles would leave its training slot nothing to draw from.
    _expect_offsets(group_indices_path, group_indices, "group", group_indices.shape[0] - 1,
                    "puzzle", num_puzzles, allow_empty=False)
    if group_indices.shape[0] - 1 != metadata.total_groups:
        raise DatasetError(f"{group_indices_path}: {group_indices.shape[0] - 1} groups, "
                           f"dataset.json says total_groups {metadata.total_groups}")
    if num_puzzles and (puzzle_identifiers.min() < 0
                        or puzzle_identifiers.max() >= metadata.num_puzzle_identifiers):
        raise DatasetError(f"{identifiers_path}: identifiers must lie in "
                           f"[0, num_puzzle_identifiers={metadata.num_puzzle_identifiers})")
    if num_puzzles and (puzzle_identifiers == metadata.blank_identifier_id).any():
        # The blank identifier marks padding rows; a real puzzle carrying it would be lost.
        raise DatasetError(f"{identifiers_path}: a puzzle has the blank identifier "
                           f"{metadata.blank_identifier_id}")
    return PuzzleSplit(directory, metadata, inputs, labels, puzzle_identifiers,
                       puzzle_indices, group_indices)


def load_identifiers(dataset_dir: str | Path) -> list[str]:
    """``identifiers.json``: the puzzle name of every identifier, index 0 = "<blank>"."""
    path = Path(dataset_dir) / "identifiers.json"
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        names = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DatasetError(f"{path}: invalid JSON ({error})") from error
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise DatasetError(f"{path}: expected a non-empty list of puzzle names")
    return names


def _load_metadata(path: Path) -> DatasetMetadata:
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        raw = path.read_bytes()
    except OSError as error:
        # no read permission (a build copied by another user), a disk error: named as an unreadable
        # .npy is, not a bare PermissionError that escapes the trainer's and predict.py's refusals
        raise DatasetError(f"{path}: cannot read it ({error.strerror or error})") from error
    try:
        # bytes: a file that is not UTF-8 is refused as invalid JSON, not by a bare UnicodeDecodeError
        return DatasetMetadata.model_validate_json(raw)
    except pydantic.ValidationError as error:
        raise DatasetError(f"{path}: {_metadata_problems(error)}") from error


def _metadata_problems(error: pydantic.ValidationError) -> str:
    """One line (pretrain.py and predict.py print it as it is): pydantic's own text takes several
    lines per field, with URLs."""
    problems = []
    for e in error.errors():
        if e["type"] == "json_invalid":
            problems.append(f"not valid JSON ({e['msg'].removeprefix('Invalid JSON: ')})")
        elif not e["loc"]:
            problems.append(f"expected a JSON object, got {type(e['input']).__name__}")
        else:
            got = "" if e["type"] == "missing" else f" (got {e['input']!r})"
            problems.append(f"{'.'.join(map(str, e['loc']))}: {e['msg']}{got}")
    return "invalid metadata: " + "; ".join(problems)


def _expect(path: Path, values: np.ndarray, dtype: type, ndim: int) -> None:
    if values.dtype != dtype or values.ndim != ndim:
        raise DatasetError(f"{path}: expected {np.dtype(dtype)} with {ndim} dimension(s), "
                           f"found {values.dtype} with shape {values.shape}")


def _expect_tokens(path: Path, values: np.ndarray, vocab_size: int, allowed: Optional[int],
                   chunk_rows: int = 1 << 16) -> None:
    """Every token of ``values`` (uint8 [examples, seq_len]) lies in [0, vocab_size), or equals
    ``allowed`` (the labels' ignore id, which the reader maps to -100). One pass over the memory
    map in chunks of ~60 MB: about 0.05 s per GB once the file is in the page cache, a read of the
    whole file from disk otherwise (training reads every row each epoch anyway)."""
    for start in range(0, values.shape[0], chunk_rows):
        chunk = values[start:start + chunk_rows]
        if chunk.size == 0 or chunk.max() < vocab_size:
            continue
        bad = chunk >= vocab_size
        if allowed is not None:
            bad &= chunk != allowed
        if bad.any():
            row, column = (int(i) for i in np.argwhere(bad)[0])
            other = "" if allowed is None else f" (or the ignore label {allowed})"
            raise DatasetError(f"{path}: row {start + row} holds token {chunk[row, column]} at position "
                               f"{column}, outside [0, vocab_size={vocab_size}){other} of dataset.json")


def _expect_offsets(path: Path, offsets: np.ndarray, owner: str, owners: int,
                    item: str, items: int, allow_empty: bool) -> None:
    """Offsets of ``owners`` runs over ``items`` items: [0, ..., items], each run non-empty unless
    allowed."""
    if offsets.shape[0] == 0:
        raise DatasetError(f"{path}: empty, expected {owner}s + 1 offsets starting at 0")
    if offsets.shape[0] != owners + 1:
        raise DatasetError(f"{path}: expected {owners + 1} offsets ({owner}s + 1), "
                           f"found {offsets.shape[0]}")
    if offsets[0] != 0:
        raise DatasetError(f"{path}: first offset is {offsets[0]}, expected 0")
    steps = np.diff(offsets)
    if (steps < 0).any() or (not allow_empty and (steps == 0).any()):
        bad = int(np.argmax(steps < 0)) if (steps < 0).any() else int(np.argmax(steps == 0))
        kind = "non-decreasing" if allow_empty else "strictly increasing"
        raise DatasetError(f"{path}: offsets must be {kind}; {owner} {bad} spans "
                           f"[{offsets[bad]}, {offsets[bad + 1]})")
    if offsets[-1] != items:
        raise DatasetError(f"{path}: last offset is {offsets[-1]}, but there are {items} {item}s")


# ---------------------------------------------------------------------------------------------
# Shared batch assembly


def _check_sharding(global_batch_size: int, rank: int, world_size: int) -> int:
    if global_batch_size <= 0 or world_size <= 0:
        raise ValueError(f"global_batch_size ({global_batch_size}) and world_size ({world_size}) "
                         f"must be positive")
    if global_batch_size % world_size:
        raise ValueError(f"global_batch_size {global_batch_size} is not a multiple of "
                         f"world_size {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside [0, {world_size})")
    return global_batch_size // world_size


def _make_batch(data: PuzzleSplit, rows: np.ndarray, puzzles: np.ndarray, batch_size: int) -> Batch:
    """Read ``rows`` from the memory maps and pad to ``batch_size`` rows (PAD, -100, blank)."""
    meta = data.metadata
    padding = batch_size - rows.shape[0]
    inputs = np.full((batch_size, meta.seq_len), meta.pad_id, dtype=np.int32)
    labels = np.full((batch_size, meta.seq_len), IGNORE_LABEL, dtype=np.int64)
    identifiers = np.full(batch_size, meta.blank_identifier_id, dtype=np.int32)
    if padding < batch_size:
        real = slice(0, batch_size - padding)
        inputs[real] = data.inputs[rows]
        raw_labels = data.labels[rows]
        labels[real] = raw_labels
        if meta.ignore_label_id is not None:
            labels[real][raw_labels == meta.ignore_label_id] = IGNORE_LABEL
        identifiers[real] = data.puzzle_identifiers[puzzles]
    return {"inputs": torch.from_numpy(inputs), "labels": torch.from_numpy(labels),
            "puzzle_identifiers": torch.from_numpy(identifiers)}


# ---------------------------------------------------------------------------------------------
# Training split


@dataclass(frozen=True)
class _EpochPlan:
    """Every slot of one epoch, flattened to its examples in batch order."""

    slot_offsets: np.ndarray     # int64 [slots + 1]; slot s: example_rows[offsets[s]:offsets[s+1]]
    example_rows: np.ndarray     # int64: row of each example, each slot's examples in random order
    example_puzzles: np.ndarray  # int64: puzzle index of each example

    @property
    def num_slots(self) -> int:
        return self.slot_offsets.shape[0] - 1


def _plan_epoch(data: PuzzleSplit, seed: int, epoch: int) -> _EpochPlan:
    """Draw the slots of ``epoch``: group order, one puzzle per group, example order per slot.

    The draws use the raw output of a PCG64 stream seeded by (seed, epoch) only; NumPy keeps raw
    bit-generator streams fixed across versions (unlike Generator methods such as permutation), so
    a saved position stays valid after a NumPy upgrade.
    """
    bits = np.random.PCG64(np.random.SeedSequence([seed, epoch]))
    num_groups = data.num_groups
    # A random permutation: sort by random keys (a stable sort makes even a 2^-64 tie determinate).
    group_order = np.argsort(bits.random_raw(num_groups), kind="stable")
    first_puzzle = data.group_indices[group_order].astype(np.int64)
    group_sizes = data.group_indices[group_order + 1] - first_puzzle
    # Uniform choice in [0, size): multiply 32 random bits by the size, keep the high 32 bits.
    draws = bits.random_raw(num_groups) >> np.uint64(32)
    choices = (draws * group_sizes.astype(np.uint64)) >> np.uint64(32)
    slot_puzzles = first_puzzle + choices.astype(np.int64)

    first_row = data.puzzle_indices[slot_puzzles].astype(np.int64)
    slot_sizes = data.puzzle_indices[slot_puzzles + 1] - first_row
    slot_offsets = np.zeros(num_groups + 1, dtype=np.int64)
    np.cumsum(slot_sizes, out=slot_offsets[1:])
    slot_of_example = np.repeat(np.arange(num_groups), slot_sizes)
    position_in_slot = np.arange(slot_offsets[-1]) - slot_offsets[slot_of_example]
    rows_in_order = first_row[slot_of_example] + position_in_slot
    # Shuffle within each slot: sort by slot first (already sorted), random key second.
    shuffle = np.lexsort((bits.random_raw(int(slot_offsets[-1])), slot_of_example))
    return _EpochPlan(slot_offsets, rows_in_order[shuffle], slot_puzzles[slot_of_example])


class TrainBatches:
    """Training batches of one rank, packed by group, with an exactly resumable position.

    Use::

        train = TrainBatches(load_split(path, "train"), global_batch_size=768, seed=0,
                             rank=rank, world_size=world, epochs_per_iteration=eval_interval)
        while train.iteration < epochs // eval_interval:
            for batch in train.iteration_batches():
                ...                                             # checkpoint train.state_dict()
            ...                                                 # evaluate

    ``state_dict()`` taken while a batch is in use points just past it: a reader restored from it
    yields exactly the batches an uninterrupted reader yields next, under any world size.
    """

    def __init__(self, data: PuzzleSplit, *, global_batch_size: int, seed: int, rank: int = 0,
                 world_size: int = 1, epochs_per_iteration: int = 1):
        self.local_batch_size = _check_sharding(global_batch_size, rank, world_size)
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        if epochs_per_iteration < 1:
            raise ValueError(f"epochs_per_iteration must be at least 1, got {epochs_per_iteration}")
        if data.num_groups == 0:
            raise DatasetError(f"{data.directory}: no groups to train on")
        self.data = data
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epochs_per_iteration = epochs_per_iteration
        # Position: the next batch starts at slot `_slot` of epoch `_epoch`.
        self._epoch = 0
        self._slot = 0
        self._batch_in_iteration = 0
        self._cached_plan: tuple[int, _EpochPlan] | None = None

    # -- position ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """Epoch in which the next batch begins."""
        return self._epoch

    @property
    def iteration(self) -> int:
        """Iteration of the next batch; equals the number of finished iterations at a boundary."""
        return self._epoch // self.epochs_per_iteration

    @property
    def batch_in_iteration(self) -> int:
        """Batches of the current iteration already yielded."""
        return self._batch_in_iteration

    def state_dict(self) -> dict[str, int]:
        """Plain ints (JSON- and torch.save-friendly): the position and what it depends on."""
        return {"format": STATE_FORMAT, "epoch": self._epoch, "slot": self._slot,
                "batch_in_iteration": self._batch_in_iteration, **self._fingerprint()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a position saved by ``state_dict()``; refuses one made for other data or
        settings (the world size and rank may differ: global batches do not depend on them)."""
        expected = {"format", "epoch", "slot", "batch_in_iteration", *self._fingerprint()}
        missing = expected - set(state)
        if missing:
            raise ValueError(f"reader state lacks {sorted(missing)}")
        if state["format"] != STATE_FORMAT:
            raise ValueError(f"reader state format {state['format']}, expected {STATE_FORMAT}")
        mismatched = {key: (state[key], value) for key, value in self._fingerprint().items()
                      if state[key] != value}
        if mismatched:
            details = ", ".join(f"{key}: saved {saved}, now {now}"
                                for key, (saved, now) in mismatched.items())
            raise ValueError(f"reader state was saved for other data or settings ({details})")
        epoch, slot = int(state["epoch"]), int(state["slot"])
        if epoch < 0 or not 0 <= slot < self.data.num_groups or state["batch_in_iteration"] < 0:
            raise ValueError(f"reader state position out of range (epoch {epoch}, slot {slot})")
        self._epoch, self._slot = epoch, slot
        self._batch_in_iteration = int(state["batch_in_iteration"])

    def _fingerprint(self) -> dict[str, int]:
        return {"seed": self.seed, "global_batch_size": self.global_batch_size,
                "epochs_per_iteration": self.epochs_per_iteration,
                "num_groups": self.data.num_groups, "num_puzzles": self.data.num_puzzles,
                "num_examples": self.data.num_examples}

    # -- iteration --------------------------------------------------------------------------

    def iteration_batches(self) -> Iterator[Batch]:
        """Yield this rank's slice of each remaining global batch of the current iteration, then
        move the position to the start of the next iteration."""
        first, last = self.rank * self.local_batch_size, (self.rank + 1) * self.local_batch_size
        for rows, puzzles in self._global_batches():
            yield _make_batch(self.data, rows[first:last], puzzles[first:last],
                              self.local_batch_size)

    def _plan(self, epoch: int) -> _EpochPlan:
        if self._cached_plan is None or self._cached_plan[0] != epoch:
            self._cached_plan = (epoch, _plan_epoch(self.data, self.seed, epoch))
        return self._cached_plan[1]

    def _global_batches(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(rows, puzzle indices) of every remaining global batch of the current iteration.

        The position is committed before each yield, so it always names the next batch. The batch
        after each one is drawn before it is yielded: when none follows (the rest of the iteration
        would be the dropped incomplete batch), the position moves to the next iteration at once,
        so a consumer that stops after the iteration's last batch (the trainer at max_steps) sees
        the iteration as finished, as one that reads on does.
        """
        end_epoch = (self.iteration + 1) * self.epochs_per_iteration
        batch = self._batch_at(self._epoch, self._slot, end_epoch)
        while batch is not None:
            rows, puzzles, epoch, slot = batch
            following = self._batch_at(epoch, slot, end_epoch) if epoch < end_epoch else None
            if following is None:
                self._epoch, self._slot, self._batch_in_iteration = end_epoch, 0, 0
            else:
                self._epoch, self._slot = epoch, slot
                self._batch_in_iteration += 1
            yield rows, puzzles
            batch = following
        # nothing (more) to draw: also a position saved inside the dropped tail by an older reader
        self._epoch, self._slot, self._batch_in_iteration = end_epoch, 0, 0

    def _batch_at(self, epoch: int, slot: int, end_epoch: int
                  ) -> tuple[np.ndarray, np.ndarray, int, int] | None:
        """(rows, puzzles, epoch, slot after it) of the global batch that starts at slot ``slot``
        of ``epoch``, or None when the iteration ending before ``end_epoch`` cannot fill it."""
        row_parts, puzzle_parts, missing = [], [], self.global_batch_size
        while missing > 0 and epoch < end_epoch:
            plan = self._plan(epoch)
            begin = plan.slot_offsets[slot]
            end = min(begin + missing, plan.slot_offsets[-1])
            row_parts.append(plan.example_rows[begin:end])
            puzzle_parts.append(plan.example_puzzles[begin:end])
            missing -= end - begin
            if end > begin:
                # The next batch starts at the slot after the one holding the last example
                # taken; whatever that slot had left over is dropped (HRM's truncation).
                slot = int(np.searchsorted(plan.slot_offsets, end - 1, side="right"))
            if missing > 0 or slot >= plan.num_slots:  # this epoch is used up
                epoch, slot = epoch + 1, 0
        if missing > 0:  # the iteration ran out: the incomplete batch is dropped
            return None
        return np.concatenate(row_parts), np.concatenate(puzzle_parts), epoch, slot


# ---------------------------------------------------------------------------------------------
# Test split


class EvalBatches:
    """The test split in order, in global batches; each rank yields its padded slice.

    Every rank yields ``len(self)`` batches of ``local_batch_size`` rows; rows past the end of the
    split are padding (inputs PAD, labels -100, puzzle_identifiers blank = 0). A global batch larger
    than the split is cut to the split (rounded up to the world size): the rest would be padding
    alone, and an eval_batch_size far above the split would run out of memory at the first
    evaluation, after the training before it.
    """

    def __init__(self, data: PuzzleSplit, *, global_batch_size: int, rank: int = 0,
                 world_size: int = 1):
        _check_sharding(global_batch_size, rank, world_size)
        whole_split = max(-(-data.num_examples // world_size), 1) * world_size
        global_batch_size = min(global_batch_size, whole_split)
        self.local_batch_size = global_batch_size // world_size
        self.data = data
        self.global_batch_size = global_batch_size
        self.rank = rank
        self.world_size = world_size

    def __len__(self) -> int:
        return -(-self.data.num_examples // self.global_batch_size)

    def __iter__(self) -> Iterator[Batch]:
        total = self.data.num_examples
        for start in range(0, total, self.global_batch_size):
            first = min(start + self.rank * self.local_batch_size, total)
            last = min(first + self.local_batch_size, total)
            rows = np.arange(first, last)
            puzzles = self.data.puzzles_of_rows(rows)
            yield _make_batch(self.data, rows, puzzles, self.local_batch_size)
