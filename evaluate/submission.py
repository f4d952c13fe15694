"""The ARC Prize submission: ``{task: [{"attempt_1": grid, "attempt_2": grid}, ...]}``, one entry per
test input in the task's order, attempts = the two best-ranked answers.

The format requires both attempts for every test input, so a test input with one answer repeats it,
and one without predictions gets ``[[0]]`` twice (it scores zero either way). Empty answers (a
prediction with no colour cell crops to 0x0) can never be right and are not valid grids there, so
they never take an attempt.
"""
from __future__ import annotations

from itertools import islice

from evaluate.voting import Votes

NO_ANSWER = [[0]]


def build_submission(votes: Votes) -> dict[str, list[dict]]:
    split, c = votes.split, votes.candidates
    submission = {}
    for k, task in enumerate(split.tasks):
        entries = []
        for p in range(int(split.task_pair_start[k]), int(split.task_pair_start[k + 1])):
            ranked = range(int(c.pair_start[p]), int(c.pair_start[p + 1]))
            answers = (grid for grid in map(votes.grid, ranked) if grid.size)
            attempts = [grid.tolist() for grid in islice(answers, 2)]
            attempts += [attempts[0] if attempts else NO_ANSWER] * (2 - len(attempts))
            entries.append({"attempt_1": attempts[0], "attempt_2": attempts[1]})
        submission[task] = entries
    return submission
