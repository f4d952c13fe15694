"""Numba kernels of the vote: crop, undo the augmentation, hash, and match inputs, one pass per row.

A grid travels as a *canonical* row: ``uint8[900]`` holding the cells row-major in its first
``rows*cols`` bytes, with the shape kept beside it. The kernels write canonical rows in place of the
prediction canvases, so 385,812 predictions never need a second 350 MB array.

The crop is the contract's (``arc_data.encoding.crop``) and the dihedral transforms are
``arc_data.augment.dihedral``; tests check both equal those reference functions.
"""
from __future__ import annotations

import numba
import numpy as np

from arc_data.augment import DIHEDRAL_INVERSE
from arc_data.encoding import COLOUR_OFFSET, MAX_GRID, SEQ_LEN, VOCAB_SIZE

INVERSE_T = np.array(DIHEDRAL_INVERSE, dtype=np.int64)

# Row outcome codes in ``pair_of_row`` (a test-pair index >= 0 otherwise).
PADDING = -1
INPUT_MISMATCH = -2

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
_M3 = np.uint64(0x165667B19E3779F9)
_SEED1 = np.uint64(0x243F6A8885A308D3)
_SEED2 = np.uint64(0x13198A2E03707344)


@numba.njit(cache=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(cache=True, inline="always")
def _fmix(h):
    # murmur3's 64-bit finaliser: every input bit reaches every output bit
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@numba.njit(cache=True)
def hash_grid(cells, rows, cols):
    """128-bit content hash (two independent 64-bit lanes) of a shape and its row-major cells.

    Cells are packed eight to a word, so each lane costs ~113 multiplies for a 30x30 grid. Equal
    hashes are still confirmed cell by cell before two answers are merged (``grouping``).
    """
    n = rows * cols
    shape_word = np.uint64(rows) << np.uint64(8) | np.uint64(cols)
    h1 = _SEED1 ^ (shape_word * _M1)
    h2 = _SEED2 ^ (shape_word * _M2)
    word = np.uint64(0)
    shift = 0
    for k in range(n):
        word |= np.uint64(cells[k]) << np.uint64(shift)
        shift += 8
        if shift == 64 or k == n - 1:
            h1 = _rotl(h1 ^ (word * _M1), 31) * _M2
            h2 = _rotl(h2 + (word * _M3), 27) * _M1 + _M2
            word = np.uint64(0)
            shift = 0
    return _fmix(h1 ^ np.uint64(n)), _fmix(h2 + np.uint64(n))


@numba.njit(cache=True)
def crop_shape(canvas):
    """The contract crop's shape: the largest top-left rectangle of colour tokens (first on ties)."""
    best_area, best_rows, best_cols = 0, 0, 0
    width = MAX_GRID
    for r in range(MAX_GRID):
        w = 0
        base = r * MAX_GRID
        while w < width and canvas[base + w] >= COLOUR_OFFSET and canvas[base + w] < VOCAB_SIZE:
            w += 1
        width = w  # the running minimum: the scan above never passes the previous width
        if width == 0:
            break
        if width * (r + 1) > best_area:
            best_area, best_rows, best_cols = width * (r + 1), r + 1, width
    return best_rows, best_cols


@numba.njit(cache=True)
def dihedral_into(canvas, rows, cols, t, colour_map, out):
    """Write ``colour_map[dihedral(crop, t)]`` of a token canvas into ``out``; return its shape.

    ``canvas`` holds a ``rows x cols`` grid of colour tokens at its top left (stride 30). Each
    transform reads source cell ``base + i*di + j*dj`` for output cell (i, j); the eight cases are
    those of ``arc_data.augment.dihedral``.
    """
    last_r, last_c = (rows - 1) * MAX_GRID, cols - 1
    if t == 0:
        base, di, dj, out_rows, out_cols = 0, MAX_GRID, 1, rows, cols
    elif t == 1:    # rot90: out[i, j] = src[j, C-1-i]
        base, di, dj, out_rows, out_cols = last_c, -1, MAX_GRID, cols, rows
    elif t == 2:    # rot180: src[R-1-i, C-1-j]
        base, di, dj, out_rows, out_cols = last_r + last_c, -MAX_GRID, -1, rows, cols
    elif t == 3:    # rot270: src[R-1-j, i]
        base, di, dj, out_rows, out_cols = last_r, 1, -MAX_GRID, cols, rows
    elif t == 4:    # flip left-right: src[i, C-1-j]
        base, di, dj, out_rows, out_cols = last_c, MAX_GRID, -1, rows, cols
    elif t == 5:    # flip up-down: src[R-1-i, j]
        base, di, dj, out_rows, out_cols = last_r, -MAX_GRID, 1, rows, cols
    elif t == 6:    # transpose: src[j, i]
        base, di, dj, out_rows, out_cols = 0, 1, MAX_GRID, cols, rows
    else:           # anti-transpose (fliplr of rot90): src[R-1-j, C-1-i]
        base, di, dj, out_rows, out_cols = last_r + last_c, -1, -MAX_GRID, cols, rows
    k = 0
    for i in range(out_rows):
        src = base + i * di
        for j in range(out_cols):
            out[k] = colour_map[canvas[src] - COLOUR_OFFSET]
            src += dj
            k += 1
    return out_rows, out_cols


@numba.njit(cache=True)
def _undo(canvas, t, inverse_map, out):
    """Crop a token canvas and undo its augmentation into ``out`` (canonical); return the shape."""
    rows, cols = crop_shape(canvas)
    if rows == 0:
        return 0, 0
    return dihedral_into(canvas, rows, cols, INVERSE_T[t], inverse_map, out)


@numba.njit(cache=True)
def same_grid(a, a_rows, a_cols, b, b_rows, b_cols):
    if a_rows != b_rows or a_cols != b_cols:
        return False
    for k in range(a_rows * a_cols):
        if a[k] != b[k]:
            return False
    return True


@numba.njit(cache=True, parallel=True)
def canonicalise_rows(preds, inputs, row_ident, ident_task, ident_t, ident_inverse_map,
                      task_pair_start, pair_inputs, pair_input_shape, out_canon,
                      out_pair, out_shape, out_h1, out_h2):
    """The per-row work of the vote, in parallel over chunks of rows.

    For row i with identifier ``row_ident[i]`` (0 = padding): undo the augmentation of its input and
    find which of its task's original test inputs it equals (``out_pair[i]`` = that test pair, or
    INPUT_MISMATCH); undo the augmentation of its prediction into ``out_canon[i]`` (which may be
    ``preds`` itself) with its shape and 128-bit hash.
    """
    n = preds.shape[0]
    chunk = 2048
    for c in numba.prange((n + chunk - 1) // chunk):
        scratch = np.empty(SEQ_LEN, dtype=np.uint8)
        for i in range(c * chunk, min(n, (c + 1) * chunk)):
            ident = row_ident[i]
            if ident == 0:
                out_pair[i] = PADDING
                out_shape[i, 0] = 0
                out_shape[i, 1] = 0
                continue
            task = ident_task[ident]
            t = ident_t[ident]
            inverse_map = ident_inverse_map[ident]
            in_rows, in_cols = _undo(inputs[i], t, inverse_map, scratch)
            pair = INPUT_MISMATCH
            for p in range(task_pair_start[task], task_pair_start[task + 1]):
                if same_grid(scratch, in_rows, in_cols, pair_inputs[p],
                         pair_input_shape[p, 0], pair_input_shape[p, 1]):
                    pair = p
                    break
            out_pair[i] = pair
            rows, cols = _undo(preds[i], t, inverse_map, scratch)
            target = out_canon[i]
            for k in range(rows * cols):
                target[k] = scratch[k]
            out_shape[i, 0] = rows
            out_shape[i, 1] = cols
            h1, h2 = hash_grid(scratch, rows, cols)
            out_h1[i] = h1
            out_h2[i] = h2


@numba.njit(cache=True)
def matches_truth(representative, pair, canon, shape, truth, truth_shape):
    """Whether each answer (a representative canonical row) equals its test pair's ground truth."""
    out = np.zeros(len(representative), dtype=np.bool_)
    for g in range(len(representative)):
        r, p = representative[g], pair[g]
        out[g] = same_grid(canon[r], shape[r, 0], shape[r, 1], truth[p], truth_shape[p, 0], truth_shape[p, 1])
    return out
