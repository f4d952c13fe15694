"""The numba re-implementation of NumPy's legacy global generator, draw for draw against NumPy."""
import numpy as np

from arc_data.rng import LegacyState, randint, shuffle_inplace


def test_randint_matches_numpy_including_single_value_ranges():
    ranges = [8, 1, 3, 30, 17, 1, 900, 2, 5, 1000, 65537, 7] * 200  # crosses a twist boundary
    np.random.seed(42)
    expected = [np.random.randint(0, n) for n in ranges]
    after = np.random.randint(0, 2**31)
    np.random.seed(42)
    st = LegacyState()
    got = [randint(st.key, st.pos, n) for n in ranges]
    st.push()
    assert got == expected
    assert np.random.randint(0, 2**31) == after  # NumPy continues exactly where we stopped


def test_permutation_and_list_shuffle_match_numpy():
    np.random.seed(7)
    perms = [np.random.permutation(np.arange(1, 10, dtype=np.uint8)) for _ in range(300)]
    items = [(f"task{i}", {"x": i}) for i in range(400)]
    np.random.shuffle(items)
    after = np.random.randint(0, 8)
    np.random.seed(7)
    st = LegacyState()
    for expected in perms:
        arr = np.arange(1, 10, dtype=np.uint8)
        shuffle_inplace(st.key, st.pos, arr)
        assert np.array_equal(arr, expected)
    order = np.arange(400)
    shuffle_inplace(st.key, st.pos, order)
    st.push()
    assert [f"task{i}" for i in order] == [name for name, _ in items]
    assert np.random.randint(0, 8) == after
