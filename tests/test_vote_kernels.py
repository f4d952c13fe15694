"""The numba kernels against the contract's reference functions, and the exactness of grouping."""
import numpy as np

from arc_data.augment import augment_grid, augmentation_name, dihedral, parse_augmentation_name
from arc_data.encoding import crop, encode_grid
from evaluate.grouping import group_candidates
from evaluate.name_parsing import decode_augmentations, name_table, tasks_match
from evaluate.kernels import (INVERSE_T, crop_shape, dihedral_into, hash_grid, inverse_token_maps, pack_rows,
                              quick_shape, undo_hash_into, undone_equals)

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
        token_map = np.full(13, 255, np.uint8)
        token_map[2:12] = colour_map                          # tokens are colours + 2
        rows, cols, all_colour = dihedral_into(encode_grid(grid), 3, 4, t, token_map, out)
        assert all_colour
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


def pack(canon, shape):
    sizes = shape[:, 0].astype(np.int64) * shape[:, 1]
    start = np.cumsum(sizes) - sizes
    pool = np.zeros(max(int(sizes.sum()), 1), np.uint8)
    pack_rows(canon, shape, pool, start)
    return pool, start


def test_pack_rows_lays_grids_end_to_end():
    canon = np.zeros((3, 900), np.uint8)
    canon[0, :2], canon[1, :0], canon[2, :3] = [1, 2], [], [7, 8, 9]
    shape = np.array([[1, 2], [0, 0], [3, 1]], np.uint8)
    pool, start = pack(canon, shape)
    assert start.tolist() == [0, 2, 2] and pool.tolist() == [1, 2, 7, 8, 9]


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
    pool, start = pack(canon, shape)
    c = group_candidates(np.zeros(6, np.int32), zeros, zeros, pool, start, shape, conf, num_pairs=1)
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
    pool, start = pack(canon, shape)
    c = group_candidates(pair, h, h, pool, start, shape, np.full(4, 0.5), num_pairs=3)
    assert c.pair.tolist() == [0, 2] and c.votes.tolist() == [1, 2]
    assert c.pair_start.tolist() == [0, 1, 1, 2]
    # sort keys mix the pair into h1; equal keys from different pairs must still be told apart
    mix = np.uint64(0x9E3779B97F4A7C15)
    h1 = np.array([mix, 0, mix], dtype=np.uint64)           # keys: mix^0, 0^mix, mix^0 -> all equal
    c = group_candidates(np.array([0, 1, 0], np.int32), h1, h1, pool, start[:3], shape[:3],
                         np.full(3, 0.5), num_pairs=2)
    assert c.pair.tolist() == [0, 1] and c.votes.tolist() == [2, 1]


def test_name_decoding_equals_single_name_parser():
    names = [augmentation_name("007bbfb7", 3, np.array([0, 2, 1, 3, 4, 5, 6, 7, 8, 9], np.uint8)),
             "007bbfb7", "AboveBelow1", "x_t1_0123456789", "y_t2_0123456788", "_t1_0123456789",
             "z_t8_0123456789", "é_t3_0123456789", "a_t3_012345678٩", "b_t3_1023456789",
             "a_b_t7_0918273645", "t1_0123456789", "", "q_t1_01234567890", "w_T1_0123456789"]
    encoded = [n.encode() for n in names]
    ends = np.cumsum([len(b) for b in encoded])
    starts = ends - [len(b) for b in encoded]
    buf = np.frombuffer(b"".join(encoded), np.uint8)
    t, maps, task_ends = decode_augmentations(buf, starts, ends)
    for i, name in enumerate(names):
        task, t1, m1 = parse_augmentation_name(name)
        assert buf[starts[i]:task_ends[i]].tobytes().decode() == task, name
        assert int(t[i]) == t1 and np.array_equal(maps[i], m1), name
    assert int(t[0]) == 3 and buf[starts[10]:task_ends[10]].tobytes() == b"a_b"
    table, lengths = name_table(["007bbfb7", "a_b", "a"])
    ok = tasks_match(buf, starts[[0, 1, 10, 3]], task_ends[[0, 1, 10, 3]], np.array([0, 0, 1, 1]), table, lengths)
    assert ok.tolist() == [True, True, True, False]     # "x" is not task "a_b"


def test_fused_undo_hash_and_input_check_equal_the_reference_undo():
    rng = np.random.default_rng(3)
    for trial in range(200):
        rows, cols = rng.integers(1, 31, size=2)
        grid = rng.integers(0, 10, size=(rows, cols)).astype(np.uint8)
        t = int(rng.integers(0, 8))
        colour_map = np.concatenate([[0], rng.permutation(np.arange(1, 10))]).astype(np.uint8)
        canvas = encode_grid(augment_grid(grid, t, colour_map))
        token_map = inverse_token_maps(colour_map)[0]
        out = np.zeros(900, np.uint8)
        r, c, h1, h2 = undo_hash_into(canvas, t, token_map, out)
        assert (r, c) == grid.shape and np.array_equal(out[:r * c].reshape(r, c), grid)
        assert (h1, h2) == hash_grid(out, r, c)
        target = out.copy()
        in_rows, in_cols = crop_shape(canvas)
        assert undone_equals(canvas, in_rows, in_cols, t, token_map, target, r, c)
        target[int(rng.integers(0, r * c))] += 1
        assert not undone_equals(canvas, in_rows, in_cols, t, token_map, target, r, c)
        if r != c:
            assert not undone_equals(canvas, in_rows, in_cols, t, token_map, out, c, r)


def test_canonicalise_rows_matches_inputs_and_undoes_predictions():
    from evaluate.kernels import INPUT_MISMATCH, PADDING, canonicalise_rows
    grid = np.array([[1, 2, 3], [4, 5, 0]], dtype=np.uint8)
    other = np.array([[7, 7, 7]], dtype=np.uint8)
    answer = np.array([[9, 8], [7, 6], [0, 5], [4, 3]], dtype=np.uint8)
    cmaps = [np.concatenate([[0], np.roll(np.arange(1, 10), k)]).astype(np.uint8) for k in range(8)]
    # rows 0-7: identifier t+1 = transform t; row 8: padding; row 9: identifier 1 with another input
    preds = np.stack([encode_grid(augment_grid(answer, t, cmaps[t])) for t in range(8)] + [np.zeros(900, np.uint8)] * 2)
    inputs = np.stack([encode_grid(augment_grid(grid, t, cmaps[t])) for t in range(8)]
                      + [np.zeros(900, np.uint8), encode_grid(other)])
    ids = np.array(list(range(1, 9)) + [0, 1], dtype=np.int32)
    token_maps = inverse_token_maps(np.stack([cmaps[0]] + cmaps))
    pair_inputs = np.zeros((2, 900), np.uint8)     # task 0 has test pairs 0 ([[5]]) and 1 (grid)
    pair_inputs[0, 0] = 5
    pair_inputs[1, :6] = grid.reshape(-1)
    n = len(ids)
    out_pair, out_shape = np.empty(n, np.int32), np.empty((n, 2), np.uint8)
    h1, h2 = np.empty(n, np.uint64), np.empty(n, np.uint64)
    canon = np.zeros_like(preds)
    canonicalise_rows(preds, inputs, ids, np.zeros(9, np.int32), np.array([0] + list(range(8)), np.uint8),
                      token_maps, np.array([0, 2]), pair_inputs, np.array([[1, 1], [2, 3]], np.uint8),
                      canon, out_pair, out_shape, h1, h2)
    assert out_pair.tolist() == [1] * 8 + [PADDING, INPUT_MISMATCH]
    assert (out_shape[:8] == [4, 2]).all() and len(set(zip(h1[:8].tolist(), h2[:8].tolist()))) == 1
    assert (canon[:8, :8] == answer.reshape(-1)).all()


def random_canvas(rng):
    """A canvas as a model might emit it: a grid with EOS border, then PAD/EOS holes and colour noise."""
    canvas = np.zeros(900, dtype=np.uint8)
    rows, cols = rng.integers(0, 31, size=2)
    canvas[:] = encode_grid(rng.integers(0, 10, size=(rows, cols)).astype(np.uint8)) if rows and cols else 0
    holes = rng.integers(0, 900, size=rng.integers(0, 4))
    canvas[holes] = rng.integers(0, 2, size=len(holes))
    noise = rng.integers(0, 900, size=rng.integers(0, 20))
    canvas[noise] = rng.integers(0, 256, size=len(noise))       # tokens >= 12 too: argmax garbage
    return canvas


def test_undo_hash_into_equals_crop_then_undo_augmentation_on_garbage():
    from arc_data.augment import undo_augmentation
    rng = np.random.default_rng(5)
    fallbacks = 0
    for trial in range(3000):
        canvas = random_canvas(rng)
        t = int(rng.integers(0, 8))
        colour_map = np.concatenate([[0], rng.permutation(np.arange(1, 10))]).astype(np.uint8)
        expected = undo_augmentation(crop(canvas), t, colour_map) if crop(canvas).size else np.zeros((0, 0))
        out = np.zeros(900, np.uint8)
        r, c, h1, h2 = undo_hash_into(canvas, t, inverse_token_maps(colour_map)[0], out)
        assert (r, c) == expected.shape, trial
        assert np.array_equal(out[:r * c].reshape(r, c), expected), trial
        assert (h1, h2) == hash_grid(out, r, c)
        fallbacks += quick_shape(canvas) != crop(canvas).shape
    assert fallbacks > 300     # the long way was exercised


def test_match_input_crops_the_long_way_when_the_quick_block_is_not_the_crop():
    from evaluate.kernels import INPUT_MISMATCH, match_input
    grid = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.uint8)
    pair_inputs = np.zeros((2, 900), np.uint8)
    pair_inputs[0, :1] = [9]
    pair_inputs[1, :6] = grid.reshape(-1)
    shapes = np.array([[1, 1], [3, 2]], np.uint8)
    identity = inverse_token_maps(np.arange(10))[0]
    canvas = encode_grid(grid).reshape(30, 30)
    canvas[0, 2:4] = 5         # row 0 runs on past the EOS column: quick block 3x4, crop still 3x2
    assert quick_shape(canvas.reshape(-1)) == (3, 4) and crop(canvas).shape == (3, 2)
    assert match_input(canvas.reshape(-1), 0, identity, 0, 2, pair_inputs, shapes) == 1
    canvas[1, 1] = 8           # now the crop differs from every test input
    assert match_input(canvas.reshape(-1), 0, identity, 0, 2, pair_inputs, shapes) == INPUT_MISMATCH
    # a transposed input under t=6 with its own colour map matches pair 1
    cmap = np.array([0, 3, 1, 2, 5, 4, 7, 6, 9, 8], np.uint8)
    augmented = encode_grid(augment_grid(grid, 6, cmap))
    assert match_input(augmented, 6, inverse_token_maps(cmap)[0], 0, 2, pair_inputs, shapes) == 1
