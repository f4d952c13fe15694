"""The numba kernels against the contract's reference functions, and the exactness of grouping."""
import numpy as np

from arc_data.augment import augment_grid, augmentation_name, dihedral, parse_augmentation_name, \
    parse_augmentation_names
from arc_data.encoding import crop, encode_grid
from evaluate.grouping import group_candidates
from evaluate.kernels import INVERSE_T, crop_shape, dihedral_into, hash_grid

IDENTITY = np.arange(10, dtype=np.uint8)


def test_crop_shape_equals_contract_crop_on_garbage():
    rng = np.random.default_rng(0)
    for trial in range(3000):
        canvas = np.zeros(900, dtype=np.uint8)
        rows, cols = rng.integers(0, 31, size=2)
        canvas.reshape(30, 30)[:rows, :cols] = rng.integers(2, 12, size=(rows, cols))
        # sprinkle PAD/EOS holes (often inside the grid) and colour noise outside it
        holes = rng.integers(0, 900, size=rng.integers(0, 6))
        canvas[holes] = rng.integers(0, 2, size=len(holes))
        noise = rng.integers(0, 900, size=rng.integers(0, 20))
        canvas[noise] = np.where(canvas[noise] == 0, rng.integers(0, 12, size=len(noise)), canvas[noise])
        assert crop_shape(canvas) == crop(canvas).shape, trial


def test_dihedral_into_equals_reference_for_every_transform():
    grid = np.arange(12, dtype=np.uint8).reshape(3, 4) % 10
    colour_map = np.array([0, 5, 6, 7, 8, 9, 1, 2, 3, 4], dtype=np.uint8)
    for t in range(8):
        out = np.zeros(900, dtype=np.uint8)
        rows, cols = dihedral_into(encode_grid(grid), 3, 4, t, colour_map, out)
        expected = colour_map[dihedral(grid, t)]
        assert (rows, cols) == expected.shape
        assert np.array_equal(out[:rows * cols].reshape(rows, cols), expected), t
    assert INVERSE_T.tolist() == [0, 3, 2, 1, 4, 5, 6, 7]


def test_hash_separates_shapes_with_the_same_cells_and_single_cells():
    cells = np.zeros(900, dtype=np.uint8)
    cells[:4] = [1, 2, 3, 4]
    hashes = {hash_grid(cells, r, c) for r, c in [(1, 4), (4, 1), (2, 2)]}
    assert len(hashes) == 3
    one = np.zeros(900, dtype=np.uint8)
    seen = set()
    for k in range(900):       # every single-cell change of a 30x30 grid gives a new hash
        one[:] = 0
        one[k] = 1
        seen.add(hash_grid(one, 30, 30))
    assert len(seen) == 900 and hash_grid(np.zeros(900, np.uint8), 0, 0) != hash_grid(one, 30, 30)


def test_grouping_is_exact_even_when_every_hash_collides():
    # six rows of pair 0 holding grids A, B, A, C, B, A; all hashes forced equal
    grids = {"A": np.array([[1, 2]]), "B": np.array([[2, 1]]), "C": np.array([[1], [2]])}
    labels = list("ABACBA")
    canon = np.zeros((6, 900), dtype=np.uint8)
    shape = np.zeros((6, 2), dtype=np.uint8)
    for i, name in enumerate(labels):
        canon[i, :2] = grids[name].reshape(-1)
        shape[i] = grids[name].shape
    conf = np.array([0.1, 0.9, 0.1, 0.5, 0.9, 0.1])
    zeros = np.zeros(6, dtype=np.uint64)
    c = group_candidates(np.zeros(6, np.int32), zeros, zeros, canon, shape, conf, num_pairs=1)
    # A: 3 votes; B: 2 votes; C: 1 vote
    assert c.votes.tolist() == [3, 2, 1]
    assert [labels[r] for r in c.representative] == ["A", "B", "C"]
    assert np.allclose(c.confidence, [0.1, 0.9, 0.5])
    assert c.pair_start.tolist() == [0, 3]


def test_grouping_keeps_pairs_apart_and_counts_pairs_without_rows():
    canon = np.zeros((4, 900), dtype=np.uint8)
    shape = np.ones((4, 2), dtype=np.uint8)          # four identical 1x1 grids [[0]]
    h = np.full(4, 7, dtype=np.uint64)
    pair = np.array([2, 0, 2, -1], dtype=np.int32)  # the last row does not vote
    c = group_candidates(pair, h, h, canon, shape, np.full(4, 0.5), num_pairs=3)
    assert c.pair.tolist() == [0, 2] and c.votes.tolist() == [1, 2]
    assert c.pair_start.tolist() == [0, 1, 1, 2]


def test_batched_name_parser_equals_single_parser():
    names = [augmentation_name("007bbfb7", 3, np.array([0, 2, 1, 3, 4, 5, 6, 7, 8, 9], np.uint8)),
             "007bbfb7", "AboveBelow1", "x_t1_0123456789", "y_t2_0123456788", "_t1_0123456789",
             "z_t8_0123456789", "é_t3_0123456789", "a_t3_012345678٩", "b_t3_1023456789", "a_b_t7_0918273645",
             "t1_0123456789"]
    tasks, t, maps = parse_augmentation_names(names)
    for i, name in enumerate(names):
        task, t1, m1 = parse_augmentation_name(name)
        assert (tasks[i], int(t[i])) == (task, t1) and np.array_equal(maps[i], m1), name
    assert tasks[0] == "007bbfb7" and t[0] == 3 and tasks[10] == "a_b" and t[10] == 7


def test_augmented_round_trip_through_kernel_undo():
    from evaluate.kernels import canonicalise_rows
    grid = np.array([[1, 2, 3], [4, 5, 0]], dtype=np.uint8)
    answer = np.array([[9, 8], [7, 6], [0, 5], [4, 3]], dtype=np.uint8)
    cmaps = [np.concatenate([[0], np.roll(np.arange(1, 10), k)]).astype(np.uint8) for k in range(8)]
    n = 8
    preds = np.stack([encode_grid(augment_grid(answer, t, cmaps[t])) for t in range(n)])
    inputs = np.stack([encode_grid(augment_grid(grid, t, cmaps[t])) for t in range(n)])
    inv = np.stack([np.argsort(m).astype(np.uint8) for m in cmaps])
    pair_inputs = np.zeros((1, 900), np.uint8)
    pair_inputs[0, :6] = grid.reshape(-1)
    out_pair, out_shape = np.empty(n, np.int32), np.empty((n, 2), np.uint8)
    h1, h2 = np.empty(n, np.uint64), np.empty(n, np.uint64)
    canonicalise_rows(preds, inputs, np.arange(1, n + 1, dtype=np.int32), np.zeros(n + 1, np.int32),
                      np.concatenate([[0], np.arange(n)]).astype(np.uint8), np.concatenate([inv[:1], inv]),
                      np.array([0, 1]), pair_inputs, np.array([[2, 3]], np.uint8), preds, out_pair,
                      out_shape, h1, h2)
    assert out_pair.tolist() == [0] * n
    assert (out_shape == [4, 2]).all() and len(set(zip(h1.tolist(), h2.tolist()))) == 1
    assert (preds[:, :8] == answer.reshape(-1)).all()
