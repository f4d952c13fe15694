"""The vote (DESIGN.md, Voting): from prediction files and a build to ranked answers per test input.

Plan on the identifiers alone (small), so that every consistency error but one is raised before the
large arrays are read; then stream predictions and inputs in chunks through a numba kernel that
checks each input against its task's test inputs (the one late error) and turns each prediction into
its un-augmented grid and hash; pack the grids end to end; then group and rank.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_data.encoding import SEQ_LEN
from evaluate.build_reader import EvaluationSplit
from evaluate.errors import EvaluationInputError
from evaluate.grouping import Candidates, group_candidates
from evaluate.kernels import (INPUT_MISMATCH, NOT_COLOUR, TOKEN_MAP_SIZE, canonicalise_rows, inverse_token_maps,
                              matches_truth, pack_rows)
from evaluate.name_parsing import decode_augmentations, name_table, tasks_match
from evaluate.predictions import PredictionFile


@dataclass
class Votes:
    split: EvaluationSplit
    candidates: Candidates
    correct: np.ndarray        # bool [G]: answer equals the ground truth
    pool: np.ndarray           # uint8: every prediction's grid, un-augmented, packed end to end
    start: np.ndarray          # int64 [rows]: where row i's grid starts in the pool
    shape: np.ndarray          # uint8 [rows, 2]
    rows: int                  # prediction rows read, padding included
    padding_rows: int

    def grid(self, g: int) -> np.ndarray:
        """The grid of answer ``g`` in the original (un-augmented) frame."""
        r = self.candidates.representative[g]
        rows, cols = int(self.shape[r, 0]), int(self.shape[r, 1])
        return self.pool[self.start[r]:self.start[r] + rows * cols].reshape(rows, cols).copy()


@dataclass
class IdentifierPlan:
    """Per identifier: its task index (-1 unused), dihedral id, and the original colour of each token."""
    task: np.ndarray           # int32 [identifiers]
    t: np.ndarray              # uint8 [identifiers]
    token_map: np.ndarray      # uint8 [identifiers, 13]: token -> colour before the colour map


def _first_row(files: list[PredictionFile], ids_per_file: list[np.ndarray], bad: np.ndarray):
    """The first (file, row, identifier) whose identifier is in ``bad``, for error messages."""
    for f, ids in zip(files, ids_per_file):
        hits = np.flatnonzero(np.isin(ids, bad))
        if hits.size:
            return f.path, int(hits[0]), int(ids[hits[0]])
    raise AssertionError("bad identifiers must come from some file")


def plan_identifiers(files: list[PredictionFile], ids_per_file: list[np.ndarray], split: EvaluationSplit) -> IdentifierPlan:
    """Check every identifier against the build and decode the augmentation of each one used."""
    names = split.identifiers
    where = f"the build {split.data_dir}"
    used_mask = np.zeros(len(names), dtype=bool)
    for f, ids in zip(files, ids_per_file):
        out = np.flatnonzero((ids < 0) | (ids >= len(names)))
        if out.size:
            raise EvaluationInputError(
                f"{f.path}: row {out[0]} has identifier {ids[out[0]]}, outside 0..{len(names) - 1} "
                f"(identifiers.json of {where}); {out.size} such rows: the predictions and the build "
                f"do not belong together")
        used_mask[ids] = True
    used_mask[0] = False
    used = np.flatnonzero(used_mask)
    task = split.ident_task[used]
    if (task < 0).any():
        path, row, ident = _first_row(files, ids_per_file, used[task < 0])
        raise EvaluationInputError(
            f"{path}: row {row} has identifier {ident} ({names[ident]!r}), which is not a puzzle of the "
            f"test split of {where} ({int((task < 0).sum())} such identifiers): the predictions and the "
            f"build do not belong together")
    starts, ends = names.starts[used], names.ends[used]
    t, maps, task_ends = decode_augmentations(names.buf, starts, ends)
    wrong = np.flatnonzero(~tasks_match(names.buf, starts, task_ends, task, *name_table(split.tasks)))
    if wrong.size:
        ident = int(used[wrong[0]])
        raise EvaluationInputError(
            f"puzzle {names[ident]!r} (identifier {ident}) is not a version of task "
            f"{split.tasks[task[wrong[0]]]!r}, the group it sits in in {where}")
    plan = IdentifierPlan(task=np.full(len(names), -1, np.int32), t=np.zeros(len(names), np.uint8),
                          token_map=np.full((len(names), TOKEN_MAP_SIZE), NOT_COLOUR, np.uint8))
    plan.task[used], plan.t[used], plan.token_map[used] = task, t, inverse_token_maps(maps)
    return plan


CHUNK = 16384     # rows read at a time: 3 x 15 MB of buffers instead of two 350 MB arrays


def vote(paths: list[Path], split: EvaluationSplit) -> Votes:
    files = [PredictionFile(p) for p in paths]
    ids_per_file = [f.read("puzzle_identifiers") for f in files]
    plan = plan_identifiers(files, ids_per_file, split)
    total = sum(f.rows for f in files)
    # np.empty reserves without touching: only the ~quarter the packed grids fill becomes resident
    pool = np.empty(total * SEQ_LEN, np.uint8)
    start = np.zeros(total, np.int64)
    pair_of_row = np.empty(total, np.int32)
    shape = np.empty((total, 2), np.uint8)
    h1, h2 = np.empty(total, np.uint64), np.empty(total, np.uint64)
    confidence = np.empty(total, np.float64)
    chunk = min(CHUNK, max((f.rows for f in files), default=0))
    preds, inputs = np.empty((chunk, SEQ_LEN), np.uint8), np.empty((chunk, SEQ_LEN), np.uint8)
    # rows of 904 bytes keep every canonical row 8-byte aligned for the hash's word reads
    canon = np.empty((chunk, SEQ_LEN + 4), np.uint8)
    offset, filled = 0, 0
    for f, ids in zip(files, ids_per_file):
        for lo in range(0, f.rows, CHUNK):
            hi = min(f.rows, lo + CHUNK)
            rows = slice(offset + lo, offset + hi)
            canonicalise_rows(f.read("preds", lo, hi, out=preds[:hi - lo]),
                              f.read("inputs", lo, hi, out=inputs[:hi - lo]), ids[lo:hi],
                              plan.task, plan.t, plan.token_map, split.task_pair_start,
                              split.pair_inputs, split.pair_input_shape, canon, pair_of_row[rows],
                              shape[rows], h1[rows], h2[rows])
            sizes = shape[rows, 0].astype(np.int64) * shape[rows, 1]
            start[rows] = filled + np.cumsum(sizes) - sizes
            pack_rows(canon[:hi - lo], shape[rows], pool, start[rows])
            filled += int(sizes.sum())
        mismatched = np.flatnonzero(pair_of_row[offset:offset + f.rows] == INPUT_MISMATCH)
        if mismatched.size:
            row = int(mismatched[0])
            ident = int(ids[row])
            raise EvaluationInputError(
                f"{f.path}: row {row} ({split.identifiers[ident]!r}): its input, with the augmentation "
                f"undone, is none of the test inputs of task {split.tasks[plan.task[ident]]!r} in "
                f"{split.data_dir} ({mismatched.size} such rows in this file): the predictions and the "
                f"build do not belong together")
        # sigmoid via tanh: no overflow for large negative logits
        q = f.read("q_halt_logits").astype(np.float64)
        confidence[offset:offset + f.rows] = 0.5 * (1.0 + np.tanh(0.5 * q))
        offset += f.rows
    candidates = group_candidates(pair_of_row, h1, h2, pool, start, shape, confidence, split.num_pairs)
    correct = matches_truth(candidates.representative, candidates.pair, pool, start, shape,
                            split.truth, split.truth_shape)
    return Votes(split=split, candidates=candidates, correct=correct, pool=pool,
                 start=start, shape=shape, rows=total,
                 padding_rows=int(sum((ids == 0).sum() for ids in ids_per_file)))
