"""Group predictions into candidate answers per test input and rank them (count, then confidence).

Rows are sorted by (test pair, 128-bit hash); a run of equal keys is one answer, confirmed cell by
cell: rows whose grids differ despite equal hashes (never seen, but a hash is not a proof) are split
into separate answers, so the vote is exact whatever the hash does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from evaluate.kernels import same_grid


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


@numba.njit(cache=True)
def _exact_labels(order, run_start, canon, shape):
    """Label each sorted row with the index of the distinct grid it holds within its run.

    Almost every run holds one grid (label 0 throughout); the loop over representatives only grows
    when two different grids shared a hash.
    """
    labels = np.zeros(len(order), dtype=np.int64)
    collided = False
    reps = np.empty(len(order), dtype=np.int64)
    for r in range(len(run_start) - 1):
        lo, hi = run_start[r], run_start[r + 1]
        n_reps = 1
        reps[0] = order[lo]
        for k in range(lo + 1, hi):
            row = order[k]
            found = -1
            for q in range(n_reps):
                rep = reps[q]
                if same_grid(canon[row], shape[row, 0], shape[row, 1],
                         canon[rep], shape[rep, 0], shape[rep, 1]):
                    found = q
                    break
            if found < 0:
                reps[n_reps] = row
                found = n_reps
                n_reps += 1
                collided = True
            labels[k] = found
    return labels, collided


def _run_starts(*sorted_keys: np.ndarray) -> np.ndarray:
    """Start offsets of the runs of equal key tuples in sorted arrays, plus the end."""
    n = len(sorted_keys[0])
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
    for key in sorted_keys:
        change[1:] |= key[1:] != key[:-1]
    return np.append(np.flatnonzero(change), n)


def group_candidates(pair_of_row: np.ndarray, h1: np.ndarray, h2: np.ndarray, canon: np.ndarray,
                     shape: np.ndarray, confidence: np.ndarray, num_pairs: int) -> Candidates:
    """Count the votes for each distinct answer of each test pair and rank the answers.

    ``pair_of_row < 0`` marks rows that do not vote (padding). Ranking: more votes first, then higher
    mean confidence; remaining ties go by hash, so the result does not depend on the row order.
    """
    rows = np.flatnonzero(pair_of_row >= 0)
    order = rows[np.lexsort((h2[rows], h1[rows], pair_of_row[rows]))]
    sorted_pair, sorted_h1, sorted_h2 = pair_of_row[order], h1[order], h2[order]
    starts = _run_starts(sorted_pair, sorted_h1, sorted_h2)
    labels, collided = _exact_labels(order, starts, canon, shape)
    if collided:
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
