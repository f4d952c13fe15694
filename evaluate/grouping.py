"""Group predictions into candidate answers per test input and rank them (count, then confidence).

Rows are sorted by one 64-bit key mixing the test pair into the answer's hash, then by confidence
(two keys, where pair, h1 and h2 would take three); a run of equal keys is one answer, confirmed
pair and cell by cell: rows that differ despite equal keys (never seen, but a hash is not a proof)
are split into separate answers, so the vote is exact whatever the hash does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from evaluate.kernels import same_packed

_PAIR_MIX = np.uint64(0x9E3779B97F4A7C15)   # odd: distinct pairs with equal h1 get distinct keys


@dataclass
class Candidates:
    """Distinct answers, sorted by test pair, then rank (best first) within the pair."""
    pair: np.ndarray            # int64 [G]  test pair of each answer
    votes: np.ndarray           # int64 [G]  predictions that gave it
    confidence: np.ndarray      # float64 [G] mean sigmoid(q_halt) over those predictions
    representative: np.ndarray  # int64 [G]  a row whose canonical grid is this answer
    pair_start: np.ndarray      # int64 [P+1] answers of pair p are [pair_start[p], pair_start[p+1])

    def rank_in_pair(self) -> np.ndarray:
        """0-based rank of every answer within its test pair."""
        return np.arange(len(self.pair)) - self.pair_start[self.pair]


@numba.njit(cache=True, parallel=True)
def _runs_uniform(order, run_start, pair, pool, start, shape):
    """Whether every row of each run holds the same (pair, grid) as the run's first row."""
    ok = np.ones(len(run_start) - 1, dtype=np.bool_)
    for r in numba.prange(len(run_start) - 1):
        first = order[run_start[r]]
        for k in range(run_start[r] + 1, run_start[r + 1]):
            row = order[k]
            if pair[row] != pair[first] or not same_packed(pool, start, shape, row, first):
                ok[r] = False
                break
    return ok


@numba.njit(cache=True)
def _split_runs(order, run_start, bad_runs, pair, pool, start, shape, labels):
    """Label the rows of the given runs with the index of the distinct (pair, grid) they hold."""
    reps = np.empty(len(order), dtype=np.int64)
    for r in bad_runs:
        n_reps = 0
        for k in range(run_start[r], run_start[r + 1]):
            row = order[k]
            found = -1
            for q in range(n_reps):
                if pair[row] == pair[reps[q]] and same_packed(pool, start, shape, row, reps[q]):
                    found = q
                    break
            if found < 0:
                reps[n_reps] = row
                found = n_reps
                n_reps += 1
            labels[k] = found


def _run_starts(*sorted_keys: np.ndarray) -> np.ndarray:
    """Start offsets of the runs of equal key tuples in sorted arrays, plus the end."""
    n = len(sorted_keys[0])
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
    for key in sorted_keys:
        change[1:] |= key[1:] != key[:-1]
    return np.append(np.flatnonzero(change), n)


def group_candidates(pair_of_row: np.ndarray, h1: np.ndarray, h2: np.ndarray, pool: np.ndarray,
                     start: np.ndarray, shape: np.ndarray, confidence: np.ndarray, num_pairs: int) -> Candidates:
    """Count the votes for each distinct answer of each test pair and rank the answers.

    ``pair_of_row < 0`` marks rows that do not vote (padding). Ranking: more votes first, then higher
    mean confidence; remaining ties go by hash, so the result does not depend on the row order.
    """
    rows = np.flatnonzero(pair_of_row >= 0)
    key = h1[rows] ^ (pair_of_row[rows].astype(np.uint64) * _PAIR_MIX)
    # confidence second: an answer's confidences are then summed in one order whatever the order of
    # the rows, so that equal sets give equal means (an exact tie, for the hash to break) where a
    # sum in row order could differ in its last bit and rank by the row order after all
    by_key = np.lexsort((confidence[rows], key))
    order = rows[by_key]
    starts = _run_starts(key[by_key])
    uniform = _runs_uniform(order, starts, pair_of_row, pool, start, shape)
    if not uniform.all():
        labels = np.zeros(len(order), dtype=np.int64)
        _split_runs(order, starts, np.flatnonzero(~uniform), pair_of_row, pool, start, shape, labels)
        run_id = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
        regroup = np.lexsort((labels, run_id))
        order = order[regroup]
        starts = _run_starts(run_id, labels[regroup])
    firsts = starts[:-1]
    votes = np.diff(starts)
    conf_sum = np.add.reduceat(confidence[order], firsts) if len(order) else np.zeros(0)
    rep = order[firsts]
    pair = pair_of_row[rep].astype(np.int64)
    mean_conf = conf_sum / np.maximum(votes, 1)
    ranked = np.lexsort((h2[rep], h1[rep], -mean_conf, -votes, pair))
    pair = pair[ranked]
    return Candidates(pair=pair, votes=votes[ranked].astype(np.int64), confidence=mean_conf[ranked],
                      representative=rep[ranked].astype(np.int64),
                      pair_start=np.searchsorted(pair, np.arange(num_pairs + 1)).astype(np.int64))
