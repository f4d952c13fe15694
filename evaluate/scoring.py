"""pass@K from ranked answers: the paper protocol (a task counts when all its test inputs are solved)
and the ARC Prize per-test-pair credit (solved fraction of a task's test inputs, averaged over tasks).

Every task of the build's test split is in the denominator; one without predictions scores zero.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluate.voting import Votes

DEFAULT_K = (1, 2, 10, 100, 1000)


@dataclass
class PairStats:
    """Per test pair (arrays of length P)."""
    votes: np.ndarray               # predictions for this test input
    candidates: np.ndarray          # distinct answers among them
    correct_rank: np.ndarray        # 0-based rank of the right answer, -1 when no prediction had it
    correct_votes: np.ndarray
    correct_confidence: np.ndarray  # NaN when no prediction had the right answer
    best_wrong_votes: np.ndarray    # votes of the most-voted wrong answer (0 if none)

    @property
    def margin(self) -> np.ndarray:
        """(votes for the right answer - votes for the best wrong one) / votes, in [-1, 1].

        +1: every prediction right; -1: every prediction the same wrong answer; NaN: no predictions.
        """
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.votes > 0, (self.correct_votes - self.best_wrong_votes) / self.votes, np.nan)


def pair_stats(votes: Votes) -> PairStats:
    c, p = votes.candidates, votes.split.num_pairs
    rank = c.rank_in_pair()
    right, wrong = np.flatnonzero(votes.correct), np.flatnonzero(~votes.correct)
    stats = PairStats(votes=np.bincount(c.pair, weights=c.votes, minlength=p).astype(np.int64),
                      candidates=np.diff(c.pair_start), correct_rank=np.full(p, -1, np.int64),
                      correct_votes=np.zeros(p, np.int64), correct_confidence=np.full(p, np.nan),
                      best_wrong_votes=np.zeros(p, np.int64))
    stats.correct_rank[c.pair[right]] = rank[right]
    stats.correct_votes[c.pair[right]] = c.votes[right]
    stats.correct_confidence[c.pair[right]] = c.confidence[right]
    np.maximum.at(stats.best_wrong_votes, c.pair[wrong], c.votes[wrong])
    return stats


def pass_at_k(stats: PairStats, task_pair_start: np.ndarray, ks) -> dict[int, dict]:
    """For each K: task fraction (paper), pair fraction (ARC Prize), and the counts behind them."""
    num_tasks = len(task_pair_start) - 1
    pairs_per_task = np.diff(task_pair_start)
    task_of_pair = np.repeat(np.arange(num_tasks), pairs_per_task)
    result = {}
    for k in ks:
        solved = (stats.correct_rank >= 0) & (stats.correct_rank < k)
        solved_per_task = np.bincount(task_of_pair, weights=solved, minlength=num_tasks)
        with np.errstate(invalid="ignore"):
            pair_credit = np.where(pairs_per_task > 0, solved_per_task / np.maximum(pairs_per_task, 1), 0.0)
        tasks_solved = int(((solved_per_task == pairs_per_task) & (pairs_per_task > 0)).sum())
        result[k] = {"task": tasks_solved / num_tasks if num_tasks else 0.0,
                     "pair": float(pair_credit.mean()) if num_tasks else 0.0,
                     "tasks_solved": tasks_solved, "pairs_solved": int(solved.sum())}
    return result
