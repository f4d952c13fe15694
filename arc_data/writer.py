"""Streaming output: render token rows chunk by chunk, hash them while writing, never hold a split.

A full arc-aug-1000 build is ~6.5 GB of token rows. We render a chunk of rows in compiled code
(both cores), and two I/O threads hash and write the inputs and labels of the previous chunk
meanwhile (`hashlib` and file writes release the GIL). Files are `np.save`-compatible: the same
header bytes NumPy writes, then the raw rows.
"""
from __future__ import annotations

import hashlib
import io
import os
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from arc_data.encoding import COLOUR_OFFSET, EOS, MAX_GRID, SEQ_LEN

CHUNK_ROWS = 16384


def npy_header(dtype, shape) -> bytes:
    """The exact header `np.save` writes for an array of this dtype and shape (C order)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)})
    return buf.getvalue()


class HashingFile:
    """A file written sequentially whose sha256 and size are known when it closes."""

    def __init__(self, path):
        self.path = path
        self.sha = hashlib.sha256()
        self.size = 0
        self.file = open(path, "wb")

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.file.write(view)
        self.size += view.nbytes

    def close(self) -> dict:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return {"sha256": self.sha.hexdigest(), "size": self.size}


def save_npy(path, array: np.ndarray) -> dict:
    """`np.save` a small array, returning its manifest entry."""
    out = HashingFile(path)
    out.write(npy_header(array.dtype, array.shape))
    out.write(np.ascontiguousarray(array))
    return out.close()


@numba.njit(cache=True, nogil=True)
def _source_cell(t, i, j, rows, cols):
    """Flat index in the original (rows x cols) grid of cell (i, j) of its dihedral transform t."""
    if t == 0:
        return i * cols + j
    if t == 1:  # rot90: out[i][j] = g[j][C-1-i]
        return j * cols + (cols - 1 - i)
    if t == 2:
        return (rows - 1 - i) * cols + (cols - 1 - j)
    if t == 3:  # rot270: out[i][j] = g[R-1-j][i]
        return (rows - 1 - j) * cols + i
    if t == 4:
        return i * cols + (cols - 1 - j)
    if t == 5:
        return (rows - 1 - i) * cols + j
    if t == 6:
        return j * cols + i
    return (rows - 1 - j) * cols + (cols - 1 - i)  # t == 7: anti-transpose


@numba.njit(cache=True, nogil=True)
def _render(out, grids, start, rows, cols, t, cmap, r, c):
    """Encode one augmented grid into a zeroed 900-token row (contract: DESIGN.md token encoding)."""
    swap = t == 1 or t == 3 or t == 6 or t == 7
    out_rows = cols if swap else rows
    out_cols = rows if swap else cols
    for i in range(out_rows):
        base = (r + i) * MAX_GRID + c
        for j in range(out_cols):
            out[base + j] = cmap[grids[start + _source_cell(t, i, j, rows, cols)]] + COLOUR_OFFSET
        if c + out_cols < MAX_GRID:
            out[base + out_cols] = EOS
    if r + out_rows < MAX_GRID:
        base = (r + out_rows) * MAX_GRID + c
        for j in range(out_cols):
            out[base + j] = EOS


@numba.njit(cache=True, nogil=True, parallel=True)
def render_rows(first, count, row_pair, row_version, row_offsets, trans, colour_map, grids, pair_grid_start,
                pair_shape, out_inputs, out_labels):
    for k in numba.prange(count):
        row = first + k
        p = row_pair[row]
        v = row_version[row]
        out_inputs[k, :] = 0
        out_labels[k, :] = 0
        r = row_offsets[row, 0]
        c = row_offsets[row, 1]
        _render(out_inputs[k], grids, pair_grid_start[p, 0], pair_shape[p, 0], pair_shape[p, 1], trans[v],
                colour_map[v], r, c)
        _render(out_labels[k], grids, pair_grid_start[p, 1], pair_shape[p, 2], pair_shape[p, 3], trans[v],
                colour_map[v], r, c)


def write_token_rows(inputs_path, labels_path, n_rows: int, render_chunk, progress=None) -> tuple[dict, dict]:
    """Write `n_rows` rows of inputs and labels as two .npy files; `render_chunk(first, count, inputs,
    labels)` fills the buffers. Returns both manifest entries."""
    files = [HashingFile(inputs_path), HashingFile(labels_path)]
    # render_rows' parallel loop (numba's OpenMP layer) sets OpenMP's thread count to the core count;
    # torch shares it: an in-process caller (a benchmark, the tests) would then run torch on more
    # threads than OMP_NUM_THREADS asked for. Put back where torch is loaded (not imported here).
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    try:
        return _write_chunks(files, n_rows, render_chunk, progress)
    finally:
        for f in files:
            f.file.close()  # no-op after a successful close(); frees the handles on errors
        if threads is not None:
            torch.set_num_threads(threads)


def _write_chunks(files, n_rows, render_chunk, progress) -> tuple[dict, dict]:
    header = npy_header(np.uint8, (n_rows, SEQ_LEN))
    for f in files:
        f.write(header)
    ring = [(np.empty((CHUNK_ROWS, SEQ_LEN), np.uint8), np.empty((CHUNK_ROWS, SEQ_LEN), np.uint8)) for _ in range(3)]
    in_flight: deque = deque()
    # One single-thread executor per file: each file's chunks are hashed and written strictly in
    # order. (One two-thread pool would let a thread that finished its labels write take the next
    # inputs chunk while the previous inputs chunk is still being written: rows out of order.)
    with ThreadPoolExecutor(1) as inputs_writer, ThreadPoolExecutor(1) as labels_writer:
        for n, first in enumerate(range(0, n_rows, CHUNK_ROWS)):
            if len(in_flight) == len(ring):  # reuse a buffer only after its previous writes finished
                for fut in in_flight.popleft():
                    fut.result()
            count = min(CHUNK_ROWS, n_rows - first)
            buf_in, buf_lab = ring[n % len(ring)]
            render_chunk(first, count, buf_in, buf_lab)
            in_flight.append((inputs_writer.submit(files[0].write, buf_in[:count]),
                              labels_writer.submit(files[1].write, buf_lab[:count])))
            if progress is not None:
                progress.update(count)
        for futs in in_flight:
            for fut in futs:
                fut.result()
    return files[0].close(), files[1].close()
