import numpy as np

from arc_data.augment import (DIHEDRAL_INVERSE, augment_grid, augmentation_name, dihedral,
                              parse_augmentation_name, undo_augmentation)
from arc_data.encoding import crop, encode_grid


def test_encode_grid_hand_worked():
    grid = np.array([[0, 1, 2], [3, 4, 5]], dtype=np.uint8)
    canvas = encode_grid(grid, 1, 2).reshape(30, 30)
    assert canvas[1, 2:5].tolist() == [2, 3, 4]
    assert canvas[2, 2:5].tolist() == [5, 6, 7]
    assert canvas[3, 2:5].tolist() == [1, 1, 1]     # EOS row below, grid columns only
    assert canvas[1:3, 5].tolist() == [1, 1]         # EOS column right, grid rows only
    assert canvas[3, 5] == 0 and canvas[0].sum() == 0 and canvas[:, :2].sum() == 0
    assert canvas.sum() == sum(range(2, 8)) + 5


def test_encode_grid_at_canvas_edge_has_no_eos():
    grid = np.full((30, 30), 9, dtype=np.uint8)
    assert (encode_grid(grid) == 11).all()
    tall = np.zeros((30, 2), dtype=np.uint8)
    canvas = encode_grid(tall, 0, 28).reshape(30, 30)
    assert (canvas[:, 28:] == 2).all() and (canvas[:, :28] == 0).all()


def test_crop_inverts_encode_and_handles_garbage():
    rng = np.random.default_rng(0)
    for rows, cols in [(1, 1), (3, 7), (30, 30), (12, 30), (30, 4)]:
        grid = rng.integers(0, 10, size=(rows, cols), dtype=np.uint8)
        assert np.array_equal(crop(encode_grid(grid)), grid)
    assert crop(np.zeros(900, dtype=np.uint8)).shape == (0, 0)
    # a ragged prediction: row 0 valid for 4 cells, row 1 for 2, row 2 for 2 -> best area is 3x2=6
    canvas = np.zeros((30, 30), dtype=np.uint8)
    canvas[0, :4] = 3
    canvas[1:3, :2] = 4
    assert crop(canvas).tolist() == [[1, 1], [2, 2], [2, 2]]


def test_dihedral_ids_and_inverses():
    g = np.arange(6).reshape(2, 3)
    assert np.array_equal(dihedral(g, 1), [[2, 5], [1, 4], [0, 3]])
    assert np.array_equal(dihedral(g, 4), [[2, 1, 0], [5, 4, 3]])
    assert np.array_equal(dihedral(g, 5), [[3, 4, 5], [0, 1, 2]])
    assert np.array_equal(dihedral(g, 6), [[0, 3], [1, 4], [2, 5]])
    assert np.array_equal(dihedral(g, 7), [[5, 2], [4, 1], [3, 0]])  # anti-transpose
    for t in range(8):
        assert np.array_equal(dihedral(dihedral(g, t), DIHEDRAL_INVERSE[t]), g)


def test_augmentation_roundtrip_through_name():
    rng = np.random.default_rng(1)
    grid = rng.integers(0, 10, size=(4, 5), dtype=np.uint8)
    for t in range(8):
        cmap = np.concatenate([[0], rng.permutation(np.arange(1, 10))]).astype(np.uint8)
        name = augmentation_name("007bbfb7", t, cmap)
        task, t2, cmap2 = parse_augmentation_name(name)
        assert (task, t2) == ("007bbfb7", t) and np.array_equal(cmap2, cmap)
        assert np.array_equal(undo_augmentation(augment_grid(grid, t, cmap), t2, cmap2), grid)
    assert parse_augmentation_name("AboveBelow1")[:2] == ("AboveBelow1", 0)
