"""What a picture of a task shows, gathered from a build and (optionally) from vote results.

A task's demonstration pairs are its puzzle's examples in the train split (for a training task,
its test pairs too: the builder puts both there); its test pairs are the puzzle's examples in the
test split. Vote results (``vote.py --json``) add, per test input, the best-ranked answers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evaluate.build_reader import load_identifiers, load_split, puzzle_examples
from evaluate.errors import EvaluationInputError


@dataclass
class Answer:
    grid: np.ndarray
    votes: int
    confidence: float
    correct: bool


@dataclass
class TestPair:
    input: np.ndarray
    truth: np.ndarray
    answers: list[Answer] = field(default_factory=list)
    rank: int | None = None          # 1-based rank of the right answer, when votes are known
    votes: int = 0


@dataclass
class TaskView:
    name: str
    demos: list[tuple[np.ndarray, np.ndarray]]
    tests: list[TestPair]
    summary: str = ""


class BuildTasks:
    """Tasks of one build, looked up by name (splits read once, rows read on demand)."""

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self.identifiers = load_identifiers(self.data_dir)
        self.splits = {s: load_split(self.data_dir, s) for s in ("train", "test")
                       if (self.data_dir / s).is_dir()}

    def task(self, name: str) -> TaskView:
        try:
            ident = self.identifiers.index(name)
        except KeyError:
            raise EvaluationInputError(f"no puzzle named {name!r} in {self.data_dir}/identifiers.json") from None
        demos = puzzle_examples(self.splits["train"], ident) if "train" in self.splits else []
        tests = puzzle_examples(self.splits["test"], ident) if "test" in self.splits else []
        if not demos and not tests:
            raise EvaluationInputError(f"puzzle {name!r} has no examples in {self.data_dir}")
        return TaskView(name=name, demos=demos, tests=[TestPair(a, b) for a, b in tests])


def answer_grid(rows: list) -> np.ndarray:
    """An answer of vote.py --json (a list of rows of colours, [] for an empty answer) as a grid."""
    if not rows:
        return np.zeros((0, 0), np.uint8)
    # checked before the cast to uint8: NumPy 1.x wraps 265 to 9 there, and 1.5 truncates on any
    grid = np.array(rows).reshape(len(rows), -1)
    if grid.dtype.kind not in "iu":
        raise ValueError(f"an answer holds {grid.dtype} values; ARC's colours are whole numbers 0-9")
    low, high = (grid.min(), grid.max()) if grid.size else (0, 0)
    if low < 0 or high > 9:
        raise ValueError(f"an answer holds colour {low if low < 0 else high}; ARC's are 0-9")
    return grid.astype(np.uint8)


def add_votes(view: TaskView, result: dict, top: int) -> TaskView:
    """Attach one task's entry of ``vote.py --json`` (its ``tasks[name]``): the ``top`` best answers."""
    pairs = result["pairs"]
    if len(pairs) != len(view.tests):
        raise EvaluationInputError(f"task {view.name!r}: the vote results have {len(pairs)} test inputs, "
                                   f"the build {len(view.tests)}: results and build do not belong together")
    for test, pair in zip(view.tests, pairs):
        test.rank, test.votes = pair["rank"], pair["votes"]
        test.answers = [Answer(answer_grid(a["grid"]), a["votes"], a["confidence"], a["correct"])
                        for a in pair["top"][:top]]
    solved = result.get("solved_at")
    margin = result.get("margin")
    # a task's margin is that of its worst test input: none when any test input has no predictions
    unvoted = [str(i + 1) for i, pair in enumerate(pairs) if not pair["votes"]]
    view.summary = (f"solved at K={solved}" if solved else "not solved") + \
        (f", margin {margin:+.2f}" if margin is not None else
         f", no predictions for test input {', '.join(unvoted)}" if 0 < len(unvoted) < len(pairs) else
         ", no predictions")
    return view


def by_margin(results: dict, count: int, best: bool) -> list[str]:
    """The ``count`` tasks with the largest (best) or smallest (worst) vote margin; tasks without
    predictions have no margin and are left out. Ties go by task name, best first; the worst are
    that order reversed, so that --best N and --worst M draw N + M tasks when there are that many
    (a small model's tasks often all share one margin: each then picked the same first names)."""
    scored = [(task["margin"], name) for name, task in results["tasks"].items() if task["margin"] is not None]
    scored.sort(key=lambda x: (-x[0], x[1]))
    ranked = [name for _, name in scored]
    return (ranked if best else ranked[::-1])[:count]
