"""The vote (DESIGN.md, Voting) against a deliberately naive re-implementation written from the spec
alone: brute-force crop over every top-left block, its own dihedral inverses (found by search), its
own name parsing, a dict of answers per test input. Random predictions mix right and wrong answers,
empty canvases, PAD/EOS holes, garbage, full 30x30 grids and padding rows, over two rank files."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from vote_fixtures import make_build

from evaluate.build_reader import load_test_split
from evaluate.kernels import crop_shape
from arc_data.encoding import crop
from evaluate.scoring import pair_stats, pass_at_k
from evaluate.submission import build_submission
from evaluate.voting import vote

_DIHEDRAL = [lambda a: a, lambda a: np.rot90(a, 1), lambda a: np.rot90(a, 2), lambda a: np.rot90(a, 3),
             lambda a: a[:, ::-1], lambda a: a[::-1, :], lambda a: a.T, lambda a: np.rot90(a, 1)[:, ::-1]]
_PROBE = np.arange(6).reshape(2, 3)
_INVERSE = [next(u for u in range(8) if np.array_equal(_DIHEDRAL[u](_DIHEDRAL[t](_PROBE)), _PROBE))
            for t in range(8)]


def _augment(grid, t, colour_map):
    return np.ascontiguousarray(_DIHEDRAL[t](colour_map[grid]))


def _encode(grid):
    canvas = np.zeros((30, 30), np.uint8)
    rows, cols = grid.shape
    canvas[:rows, :cols] = grid + 2
    if rows < 30:
        canvas[rows, :cols] = 1
    if cols < 30:
        canvas[:rows, cols] = 1
    return canvas.ravel()


def naive_crop(canvas):
    """Every top-left block [:r, :w] free of tokens outside 2..11; the largest, fewest rows on ties."""
    c = np.asarray(canvas).reshape(30, 30)
    bad = ((c < 2) | (c > 11)).astype(np.int64).cumsum(0).cumsum(1)
    r, w = np.meshgrid(np.arange(1, 31), np.arange(1, 31), indexing="ij")
    area = np.where(bad == 0, r * w, 0)
    best = int(np.argmax(area))                 # row-major scan: the first maximum has the fewest rows
    if area.flat[best] == 0:
        return np.zeros((0, 0), np.int64)
    return c[:r.flat[best], :w.flat[best]].astype(np.int64) - 2


def _parse(name):
    m = re.fullmatch(r"(.+)_t([0-7])_([0-9]{10})", name)
    if m and sorted(m[3]) == list("0123456789"):
        return m[1], int(m[2]), np.array([int(d) for d in m[3]])
    return name, 0, np.arange(10)


def _undo(grid, t, colour_map):
    inverse = np.empty(10, np.int64)
    inverse[colour_map] = np.arange(10)
    return inverse[_DIHEDRAL[_INVERSE[t]](grid)] if grid.size else grid


def test_crop_edge_cases_hand_worked():
    full = np.full((30, 30), 7, np.uint8)
    cases = {"empty": (np.zeros((30, 30), np.uint8), (0, 0)), "full": (full, (30, 30))}
    eos_row = full.copy()
    eos_row[0, 5] = 1                     # row 0 stops at 5 columns, so every row does: 30 x 5
    cases["EOS in the first row"] = (eos_row, (30, 5))
    eos_col = full.copy()
    eos_col[5, 0] = 1                     # row 5 has width 0: 5 x 30
    cases["EOS in the first column"] = (eos_col, (5, 30))
    hole = full.copy()
    hole[10, 10] = 0                      # 10 x 30 and 30 x 10 tie at 300: the fewer rows win
    cases["PAD hole"] = (hole, (10, 30))
    big_token = full.copy()
    big_token[29, 29] = 12                # not a colour token: 29 x 30 and 30 x 29 tie at 870 -> 29 rows
    cases["token 12"] = (big_token, (29, 30))
    for what, (canvas, shape) in cases.items():
        assert naive_crop(canvas).shape == shape, what
        assert crop(canvas.ravel()).shape == shape, what
        assert tuple(crop_shape(canvas.ravel())) == shape, what


@pytest.mark.parametrize("seed", [4])
def test_vote_equals_a_naive_vote(tmp_path, seed):
    rng = np.random.default_rng(seed)

    def random_grid():
        return rng.integers(0, 10, size=tuple(rng.integers(1, 6, size=2))).astype(np.uint8)

    tasks = {}
    for k in range(6):
        tests, wanted = [], int(rng.integers(1, 4))
        while len(tests) < wanted:
            a = random_grid()
            if not any(a.shape == b.shape and (a == b).all() for b, _ in tests):
                tests.append((a, random_grid()))
        tasks[f"task{k}"] = {"train": [(random_grid(), random_grid())], "test": tests}
    tasks["task5"]["test"][0] = (tasks["task5"]["test"][0][0], rng.integers(0, 10, (30, 30)).astype(np.uint8))
    augs = {name: [(int(rng.integers(0, 8)), np.concatenate([[0], rng.permutation(np.arange(1, 10))]).astype(np.uint8))
                   for _ in range(4)] for name in tasks}
    build = make_build(tmp_path / "build", tasks, augs)
    names = json.loads((build / "identifiers.json").read_text())

    rows = {"puzzle_identifiers": [], "inputs": [], "preds": [], "q_halt_logits": []}

    def add(ident, inputs, preds, q):
        for key, value in zip(rows, (ident, inputs, preds, q)):
            rows[key].append(value)

    wrong_pool = [random_grid() for _ in range(3)]
    for name, task in tasks.items():
        if name == "task4":
            continue                              # a task without predictions scores zero
        versions = [(name, 0, np.arange(10, dtype=np.uint8))]
        versions += [(f"{name}_t{t}_{''.join(map(str, m))}", t, m) for t, m in augs[name]]
        for a, b in task["test"]:
            for _ in range(int(rng.integers(3, 25))):
                vname, t, m = versions[int(rng.integers(0, len(versions)))]
                kind = int(rng.integers(0, 7))
                if kind <= 1:
                    pred = _encode(_augment(b, t, m))
                elif kind == 2:
                    pred = _encode(_augment(wrong_pool[int(rng.integers(0, 3))], t, m))
                elif kind == 3:
                    pred = np.zeros(900, np.uint8)
                elif kind == 4:                   # the right answer with a PAD or EOS hole near the corner
                    pred = _encode(_augment(b, t, m)).reshape(30, 30).copy()
                    pred[int(rng.integers(0, 3)), int(rng.integers(0, 3))] = rng.integers(0, 2)
                    pred = pred.ravel()
                elif kind == 5:
                    pred = rng.integers(0, 12, 900).astype(np.uint8)
                else:
                    pred = np.full(900, int(rng.integers(2, 12)), np.uint8)
                add(names.index(vname), _encode(_augment(a, t, m)), pred, float(rng.normal() * 3))
                if rng.random() < 0.2:            # padding: garbage that must not be read
                    add(0, rng.integers(0, 12, 900).astype(np.uint8), rng.integers(0, 12, 900).astype(np.uint8), 50.0)
    order = rng.permutation(len(rows["puzzle_identifiers"]))
    dtypes = {"puzzle_identifiers": np.int32, "inputs": np.uint8, "preds": np.uint8, "q_halt_logits": np.float32}
    arrays = {k: np.array(v, dtypes[k])[order] for k, v in rows.items()}
    half = len(order) // 2
    np.savez(tmp_path / "rank_0.npz", **{k: v[:half] for k, v in arrays.items()})
    np.savez(tmp_path / "rank_1.npz", **{k: v[half:] for k, v in arrays.items()})

    # ---- the naive vote
    answers = {}       # (task, test index) -> {grid key: [votes, sum of sigmoid(q), grid]}
    for ident, inputs, preds, q in zip(*arrays.values()):
        if ident == 0:
            continue
        task, t, m = _parse(names[ident])
        test_input = _undo(naive_crop(inputs), t, m)
        pair = [i for i, (a, _) in enumerate(tasks[task]["test"])
                if a.shape == test_input.shape and (a == test_input).all()]
        assert len(pair) == 1
        grid = _undo(naive_crop(preds), t, m)
        entry = answers.setdefault((task, pair[0]), {}).setdefault((grid.shape, grid.tobytes()), [0, 0.0, grid])
        entry[0] += 1
        entry[1] += 1 / (1 + math.exp(-float(q)))
    ranked = {key: sorted(d.values(), key=lambda e: (-e[0], -e[1] / e[0])) for key, d in answers.items()}
    rank = {}
    for (task, p), answers_ranked in ranked.items():
        truth = tasks[task]["test"][p][1]
        rank[(task, p)] = next((r for r, e in enumerate(answers_ranked)
                                if e[2].shape == truth.shape and (e[2] == truth).all()), None)

    split = load_test_split(build)
    votes = vote([tmp_path / "rank_0.npz", tmp_path / "rank_1.npz"], split)
    ks = [1, 2, 3, 5, 1000]
    results = pass_at_k(pair_stats(votes), split.task_pair_start, ks)
    for k in ks:
        solved = {task: [rank.get((task, p)) is not None and rank[(task, p)] < k for p in range(len(t["test"]))]
                  for task, t in tasks.items()}
        assert results[k]["task"] == pytest.approx(sum(all(s) for s in solved.values()) / len(tasks))
        assert results[k]["pair"] == pytest.approx(sum(sum(s) / len(s) for s in solved.values()) / len(tasks))
    assert 0 < results[1]["pair"] < results[1000]["pair"] < 1     # the draw exercises the ranks

    c = votes.candidates
    names_in_order = list(tasks)
    for (task, p), expected in ranked.items():
        pair = int(split.task_pair_start[names_in_order.index(task)]) + p
        got = range(int(c.pair_start[pair]), int(c.pair_start[pair + 1]))
        assert [(e[0], e[2].tolist()) for e in expected] == [(int(c.votes[g]), votes.grid(g).tolist()) for g in got]
        assert [e[1] / e[0] for e in expected] == pytest.approx([float(c.confidence[g]) for g in got], abs=1e-12)

    submission = build_submission(votes)
    assert list(submission) == names_in_order
    for task, t in tasks.items():
        for p in range(len(t["test"])):
            attempts = [e[2].tolist() for e in ranked.get((task, p), []) if e[2].size][:2]
            attempts += [attempts[0] if attempts else [[0]]] * (2 - len(attempts))
            assert submission[task][p] == {"attempt_1": attempts[0], "attempt_2": attempts[1]}
