"""Reading prediction arrays straight from .npz files, stored or compressed, in row ranges."""
import numpy as np
import pytest

from evaluate.npz_reader import open_npz


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_row_ranges_equal_np_load(tmp_path, save):
    rng = np.random.default_rng(0)
    arrays = {"preds": rng.integers(0, 12, (5000, 900), dtype=np.uint8),
              "q_halt_logits": rng.normal(size=5000).astype(np.float32),
              "puzzle_identifiers": np.arange(5000, dtype=np.int32)}
    save(tmp_path / "a.npz", **arrays)
    members = open_npz(tmp_path / "a.npz")
    assert set(members) == set(arrays)
    preds = members["preds"]
    assert preds.shape == (5000, 900) and preds.dtype == np.uint8
    buffer = np.empty((1200, 900), np.uint8)
    for lo in range(0, 5000, 1200):                     # in order, into one reused buffer
        hi = min(5000, lo + 1200)
        assert np.array_equal(preds.read(lo, hi, out=buffer[:hi - lo]), arrays["preds"][lo:hi])
    assert np.array_equal(preds.read(10, 20), arrays["preds"][10:20])     # out of order: reopened
    assert np.array_equal(members["q_halt_logits"].read(), arrays["q_halt_logits"])
    assert np.array_equal(members["puzzle_identifiers"].read(4990, 5000), np.arange(4990, 5000))
    with pytest.raises(ValueError, match="does not fit"):
        preds.read(0, 10, out=np.empty((10, 900), np.int64))


def test_truncated_file_is_an_error(tmp_path):
    np.savez(tmp_path / "a.npz", preds=np.ones((100, 900), np.uint8))
    data = (tmp_path / "a.npz").read_bytes()
    members = open_npz(tmp_path / "a.npz")
    (tmp_path / "a.npz").write_bytes(data[:50_000])     # header still there, rows cut off
    with pytest.raises(EOFError, match="truncated"):
        members["preds"].read()
