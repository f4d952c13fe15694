"""The vote (DESIGN.md, Voting): from prediction files and a build to ranked answers per test input.

Plan on the identifiers alone (small), so that every consistency error is raised before the large
arrays are read; then, file by file, crop / undo / hash every row in a numba kernel, keeping only the
canonical grids; then group and rank.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.augment import parse_augmentation_names
from arc_data.encoding import SEQ_LEN
from evaluate.build_reader import TestSplit
from evaluate.errors import EvaluationInputError
from evaluate.grouping import Candidates, group_candidates
from evaluate.kernels import INPUT_MISMATCH, canonicalise_rows, matches_truth
from evaluate.predictions import read_arrays, read_identifiers


@dataclass
class Votes:
    split: TestSplit
    files: list[Path]
    candidates: Candidates
    correct: np.ndarray        # bool [G]: answer equals the ground truth
    canon: np.ndarray          # uint8 [rows, 900] canonical grids (rows of candidates.representative)
    shape: np.ndarray          # uint8 [rows, 2]
    rows: int                  # prediction rows read, padding included
    padding_rows: int

    def grid(self, g: int) -> np.ndarray:
        """The grid of answer ``g`` in the original (un-augmented) frame."""
        r = self.candidates.representative[g]
        rows, cols = int(self.shape[r, 0]), int(self.shape[r, 1])
        return self.canon[r, :rows * cols].reshape(rows, cols).copy()


@dataclass
class IdentifierPlan:
    """Per identifier: its task index (-1 unused), dihedral id and inverse colour map."""
    task: np.ndarray           # int32 [identifiers]
    t: np.ndarray              # uint8 [identifiers]
    inverse_map: np.ndarray    # uint8 [identifiers, 10]


def _first_row(files: list[Path], ids_per_file: list[np.ndarray], bad: np.ndarray) -> tuple[Path, int, int]:
    """The first (file, row, identifier) whose identifier is in ``bad``, for error messages."""
    for path, ids in zip(files, ids_per_file):
        hits = np.flatnonzero(np.isin(ids, bad))
        if hits.size:
            return path, int(hits[0]), int(ids[hits[0]])
    raise AssertionError("bad identifiers must come from some file")


def plan_identifiers(files: list[Path], ids_per_file: list[np.ndarray], split: TestSplit) -> IdentifierPlan:
    names = split.identifiers
    where = f"the build {split.data_dir}"
    for path, ids in zip(files, ids_per_file):
        out = np.flatnonzero((ids < 0) | (ids >= len(names)))
        if out.size:
            raise EvaluationInputError(
                f"{path}: row {out[0]} has identifier {ids[out[0]]}, outside 0..{len(names) - 1} "
                f"(identifiers.json of {where}); {out.size} such rows: the predictions and the build "
                f"do not belong together")
    used = np.unique(np.concatenate(ids_per_file)) if ids_per_file else np.zeros(0, np.int32)
    used = used[used != 0]
    not_test = used[~split.in_test_split[used]]
    if not_test.size:
        path, row, ident = _first_row(files, ids_per_file, not_test)
        raise EvaluationInputError(
            f"{path}: row {row} has identifier {ident} ({names[ident]!r}), which is not a puzzle of the "
            f"test split of {where} ({not_test.size} such identifiers): the predictions and the build "
            f"do not belong together")
    tasks, t, maps = parse_augmentation_names([names[i] for i in used.tolist()])
    task_index = {name: k for k, name in enumerate(split.tasks)}
    task = np.fromiter((task_index.get(name, -1) for name in tasks), dtype=np.int32, count=len(tasks))
    unknown = used[task < 0]
    if unknown.size:
        path, row, ident = _first_row(files, ids_per_file, unknown)
        raise EvaluationInputError(
            f"{path}: row {row} is puzzle {names[ident]!r}, whose task is not an original puzzle of the "
            f"test split of {where}")
    inverse = np.empty_like(maps)
    np.put_along_axis(inverse, maps.astype(np.int64), np.arange(10, dtype=np.uint8)[None, :], axis=1)
    plan = IdentifierPlan(task=np.full(len(names), -1, np.int32), t=np.zeros(len(names), np.uint8),
                          inverse_map=np.zeros((len(names), 10), np.uint8))
    plan.task[used], plan.t[used], plan.inverse_map[used] = task, t, inverse
    return plan


def vote(files: list[Path], split: TestSplit) -> Votes:
    ids_per_file = [read_identifiers(f) for f in files]
    plan = plan_identifiers(files, ids_per_file, split)
    total = sum(len(ids) for ids in ids_per_file)
    # one file: canonical grids overwrite its preds array; several: one array for all of them
    canon = np.empty((total, SEQ_LEN), np.uint8) if len(files) > 1 else None
    pair_of_row = np.empty(total, np.int32)
    shape = np.empty((total, 2), np.uint8)
    h1, h2 = np.empty(total, np.uint64), np.empty(total, np.uint64)
    confidence = np.empty(total, np.float64)
    offset = 0
    for path in files:
        arrays = read_arrays(path)
        n = len(arrays["puzzle_identifiers"])
        part = slice(offset, offset + n)
        preds = arrays["preds"] if arrays["preds"].flags.writeable else arrays["preds"].copy()
        target = preds if canon is None else canon[part]
        canonicalise_rows(preds, arrays["inputs"], arrays["puzzle_identifiers"], plan.task, plan.t,
                          plan.inverse_map, split.task_pair_start, split.pair_inputs, split.pair_input_shape,
                          target, pair_of_row[part], shape[part], h1[part], h2[part])
        mismatched = np.flatnonzero(pair_of_row[part] == INPUT_MISMATCH)
        if mismatched.size:
            row = int(mismatched[0])
            ident = int(arrays["puzzle_identifiers"][row])
            raise EvaluationInputError(
                f"{path}: row {row} ({split.identifiers[ident]!r}): its input, with the augmentation "
                f"undone, is none of the test inputs of task {split.tasks[plan.task[ident]]!r} in "
                f"{split.data_dir} ({mismatched.size} such rows in this file): the predictions and the "
                f"build do not belong together")
        # sigmoid via tanh: no overflow for large negative logits
        confidence[part] = 0.5 * (1.0 + np.tanh(0.5 * arrays["q_halt_logits"].astype(np.float64)))
        if canon is None:
            canon = preds
        del arrays, preds, target
        offset += n
    if canon is None:
        canon = np.zeros((0, SEQ_LEN), np.uint8)
    candidates = group_candidates(pair_of_row, h1, h2, canon, shape, confidence, split.num_pairs)
    correct = matches_truth(candidates.representative, candidates.pair, canon, shape,
                            split.truth, split.truth_shape)
    return Votes(split=split, files=list(files), candidates=candidates, correct=correct, canon=canon,
                 shape=shape, rows=total, padding_rows=int(sum((ids == 0).sum() for ids in ids_per_file)))
