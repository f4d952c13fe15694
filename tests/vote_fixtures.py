"""Tiny builds and prediction files made by hand, in the contract layouts (DESIGN.md, Data and
Predictions), for the evaluator's tests. Grids are augmented with the reference helpers of
``arc_data.augment`` so the evaluator's inverse is checked against the forward transform."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from arc_data.augment import augment_grid, augmentation_name
from arc_data.encoding import SEQ_LEN, encode_grid

IDENTITY = np.arange(10, dtype=np.uint8)
TRAIN_OFFSET = (1, 2)   # demonstration pairs are translated in the train split, as the builder does


def g(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.uint8)


def cmap(digits: str) -> np.ndarray:
    return np.array([int(d) for d in digits], dtype=np.uint8)


def _write_split(out: Path, split: str, groups: list[list[tuple[str, list]]], ident: dict[str, int]):
    """``groups``: per group, a list of (puzzle name, [(input, output), ...])."""
    inputs, labels, puzzle_ids, puzzle_idx, group_idx = [], [], [], [0], [0]
    for group in groups:
        for name, pairs in group:
            for a, b in pairs:
                # the train split shares one offset per pair, as far as the larger grid allows
                r, c = ((min(TRAIN_OFFSET[0], 30 - max(a.shape[0], b.shape[0])),
                         min(TRAIN_OFFSET[1], 30 - max(a.shape[1], b.shape[1]))) if split == "train" else (0, 0))
                inputs.append(encode_grid(a, r, c))
                labels.append(encode_grid(b, r, c))
            puzzle_ids.append(ident[name])
            puzzle_idx.append(len(inputs))
        group_idx.append(len(puzzle_ids))
    d = out / split
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / "all__inputs.npy", np.array(inputs, dtype=np.uint8).reshape(-1, SEQ_LEN))
    np.save(d / "all__labels.npy", np.array(labels, dtype=np.uint8).reshape(-1, SEQ_LEN))
    np.save(d / "all__puzzle_identifiers.npy", np.array(puzzle_ids, dtype=np.int32))
    np.save(d / "all__puzzle_indices.npy", np.array(puzzle_idx, dtype=np.int32))
    np.save(d / "all__group_indices.npy", np.array(group_idx, dtype=np.int32))
    (d / "dataset.json").write_text(json.dumps({
        "seq_len": SEQ_LEN, "vocab_size": 12, "pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0,
        "num_puzzle_identifiers": len(ident) + 1, "total_groups": len(groups),
        "mean_puzzle_examples": len(inputs) / max(len(puzzle_ids), 1), "sets": ["all"]}))


def make_build(out: Path, tasks: dict[str, dict], augmentations: dict[str, list] | None = None,
               training_tasks: dict[str, dict] | None = None) -> Path:
    """Write a build: evaluation ``tasks`` ({name: {"train": pairs, "test": pairs}}) with their
    ``augmentations`` ({name: [(t, colour_map), ...]}), plus training tasks (train split only)."""
    out = Path(out)
    augmentations = augmentations or {}
    training_tasks = training_tasks or {}

    def versions(name, task, key):
        group = [(name, task[key])]
        for t, m in augmentations.get(name, []):
            group.append((augmentation_name(name, t, m),
                          [(augment_grid(a, t, m), augment_grid(b, t, m)) for a, b in task[key]]))
        return group

    train_groups = [[(n, t["train"] + t["test"])] for n, t in training_tasks.items()]
    train_groups += [versions(n, t, "train") for n, t in tasks.items()]
    test_groups = [versions(n, t, "test") for n, t in tasks.items()]
    ident: dict[str, int] = {}
    for groups in (train_groups, test_groups):
        for group in groups:
            for name, _ in group:
                ident.setdefault(name, len(ident) + 1)
    (out / "identifiers.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "identifiers.json").write_text(json.dumps(["<blank>"] + list(ident)))
    _write_split(out, "train", train_groups, ident)
    _write_split(out, "test", test_groups, ident)
    return out


class Predictions:
    """Rows of a prediction file, written in the contract layout by :meth:`save`."""

    def __init__(self, build: Path, tasks: dict[str, dict]):
        self.names = json.loads((Path(build) / "identifiers.json").read_text())
        self.tasks = tasks
        self.ids, self.inputs, self.preds, self.q = [], [], [], []

    def add(self, task: str, test_index: int, answer: np.ndarray, q: float = 0.0,
            t: int = 0, colour_map: np.ndarray = IDENTITY, count: int = 1) -> "Predictions":
        """``count`` predictions for a test input of ``task``, made on the augmented puzzle (t, map):
        ``answer`` is given in the original frame and augmented here, as the model would output it."""
        name = task if t == 0 and (colour_map == IDENTITY).all() else augmentation_name(task, t, colour_map)
        test_input = self.tasks[task]["test"][test_index][0]
        for _ in range(count):
            self.ids.append(self.names.index(name))
            self.inputs.append(encode_grid(augment_grid(test_input, t, colour_map)))
            self.preds.append(encode_grid(augment_grid(answer, t, colour_map)))
            self.q.append(q)
        return self

    def add_raw(self, ident: int, inputs: np.ndarray, preds: np.ndarray, q: float = 0.0) -> "Predictions":
        self.ids.append(ident)
        self.inputs.append(inputs)
        self.preds.append(preds)
        self.q.append(q)
        return self

    def arrays(self) -> dict[str, np.ndarray]:
        return {"puzzle_identifiers": np.array(self.ids, dtype=np.int32),
                "inputs": np.array(self.inputs, dtype=np.uint8).reshape(-1, SEQ_LEN),
                "preds": np.array(self.preds, dtype=np.uint8).reshape(-1, SEQ_LEN),
                "q_halt_logits": np.array(self.q, dtype=np.float32)}

    def save(self, path: Path, **overrides) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **{**self.arrays(), **overrides})
        return path


# Hand-made evaluation tasks for the tests: grids without symmetries, so that a wrongly undone
# transform can never look right.
ONE = {"train": [(g([[1, 0], [0, 0]]), g([[0, 1], [0, 0]]))],
       "test": [(g([[1, 2, 0], [0, 3, 0]]), g([[5, 6], [7, 8], [9, 1]]))]}
TWO = {"train": [(g([[2]]), g([[3]]))],
       "test": [(g([[4, 0, 0, 1]]), g([[1, 2], [3, 4]])),
                (g([[0, 5], [6, 0], [0, 0]]), g([[7, 0, 0], [0, 0, 8]]))]}
THREE = {"train": [(g([[3, 3]]), g([[4]]))], "test": [(g([[6], [7]]), g([[2, 2, 5]]))]}
FOUR = {"train": [(g([[5]]), g([[5, 5]]))], "test": [(g([[8, 9]]), g([[9], [8], [0]]))]}
WRONG = g([[1, 1], [1, 1]])
WRONG2 = g([[2, 3, 4]])
# dihedral id and colour map of each augmentation: every transform, every map moving colours
AUGS = [(0, cmap("0312456789")), (1, cmap("0234567891")), (2, cmap("0987654321")),
        (3, cmap("0918273645")), (4, cmap("0123456798")), (5, cmap("0567891234")),
        (6, cmap("0345678912")), (7, cmap("0192837465"))]
TASKS = {"task_one": ONE, "task_two": TWO, "task_three": THREE, "task_four": FOUR}


def truth(task, i=0):
    return TASKS[task]["test"][i][1]
