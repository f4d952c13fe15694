"""Numba kernels of the vote: crop, undo the augmentation, hash, and match inputs, one pass per row.

A grid travels as a *canonical* row: ``uint8[900]`` holding the cells row-major in its first
``rows*cols`` bytes, with the shape kept beside it. The kernels write the canonical rows of a chunk
of predictions, then pack them end to end into one pool (``start`` offsets).

The crop is the contract's (``arc_data.encoding.crop``) and the dihedral transforms are
``arc_data.augment.dihedral``; tests check both equal those reference functions.
"""
from __future__ import annotations

import numba
import numpy as np

from arc_data.augment import DIHEDRAL_INVERSE
from arc_data.encoding import COLOUR_OFFSET, MAX_GRID, VOCAB_SIZE

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


@numba.njit(cache=True, inline="always")
def _mix(h1, h2, word):
    return _rotl(h1 ^ (word * _M1), 31) * _M2, _rotl(h2 + (word * _M3), 27) * _M1 + _M2


@numba.njit(cache=True)
def hash_grid(cells, rows, cols):
    """128-bit content hash (two independent 64-bit lanes) of a shape and its row-major cells.

    Cells are read eight at a time as one little-endian word (a 30x30 grid is 113 words per lane);
    the last, partial word holds only the grid's own cells, so bytes beyond it never matter. Equal
    hashes are still confirmed cell by cell before two answers are merged (``grouping``).
    """
    n = rows * cols
    shape_word = np.uint64(rows) << np.uint64(8) | np.uint64(cols)
    h1 = _SEED1 ^ (shape_word * _M1)
    h2 = _SEED2 ^ (shape_word * _M2)
    full = n // 8
    words = cells[:full * 8].view(np.uint64)
    for w in range(full):
        h1, h2 = _mix(h1, h2, words[w])
    if n > full * 8:
        word = np.uint64(0)
        for k in range(full * 8, n):
            word |= np.uint64(cells[k]) << np.uint64(8 * (k - full * 8))
        h1, h2 = _mix(h1, h2, word)
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


@numba.njit(cache=True, inline="always")
def _walk(rows, cols, t):
    """How ``dihedral(grid, t)`` reads a ``rows x cols`` grid stored with stride 30: output cell
    (i, j) is source cell ``base + i*di + j*dj``; returns (base, di, dj, out_rows, out_cols). The
    eight cases are those of ``arc_data.augment.dihedral``."""
    last_r, last_c = (rows - 1) * MAX_GRID, cols - 1
    if t == 0:
        return 0, MAX_GRID, 1, rows, cols
    if t == 1:      # rot90: out[i, j] = src[j, C-1-i]
        return last_c, -1, MAX_GRID, cols, rows
    if t == 2:      # rot180: src[R-1-i, C-1-j]
        return last_r + last_c, -MAX_GRID, -1, rows, cols
    if t == 3:      # rot270: src[R-1-j, i]
        return last_r, 1, -MAX_GRID, cols, rows
    if t == 4:      # flip left-right: src[i, C-1-j]
        return last_c, MAX_GRID, -1, rows, cols
    if t == 5:      # flip up-down: src[R-1-i, j]
        return last_r, -MAX_GRID, 1, rows, cols
    if t == 6:      # transpose: src[j, i]
        return 0, 1, MAX_GRID, cols, rows
    return last_r + last_c, -1, -MAX_GRID, cols, rows    # anti-transpose: src[R-1-j, C-1-i]


NOT_COLOUR = 255
TOKEN_MAP_SIZE = VOCAB_SIZE + 1     # tokens 0..11, then one slot for every token >= 12


def inverse_token_maps(colour_maps: np.ndarray) -> np.ndarray:
    """Per colour map ``m`` (augmentation: colour c became m[c]), the table token -> original colour
    that the kernels read: ``table[m[c] + 2] = c``, NOT_COLOUR for PAD, EOS and tokens >= 12."""
    colour_maps = np.asarray(colour_maps, dtype=np.int64).reshape(-1, 10)
    tables = np.full((len(colour_maps), TOKEN_MAP_SIZE), NOT_COLOUR, dtype=np.uint8)
    np.put_along_axis(tables, colour_maps + COLOUR_OFFSET, np.arange(10, dtype=np.uint8)[None, :], axis=1)
    return tables


@numba.njit(cache=True, inline="always")
def _colour(token_map, token):
    return token_map[min(token, VOCAB_SIZE)]


@numba.njit(cache=True, inline="always")
def _is_colour(token):
    return token >= COLOUR_OFFSET and token < VOCAB_SIZE


@numba.njit(cache=True)
def quick_shape(canvas):
    """(h, w): the runs of colour tokens along row 0 and down column 0.

    When the h x w block holds only colour tokens, the contract crop is exactly (h, w): row 0 stops
    at column w, so the running-minimum width is w on every row above h, and row h starts with a
    non-colour token, so it is 0 from there on. A well-formed grid (EOS border) always passes; the
    kernels fall back to :func:`crop_shape` otherwise. Costs h + w reads instead of h * w.
    """
    w = 0
    while w < MAX_GRID and _is_colour(canvas[w]):
        w += 1
    h = 0
    while h < MAX_GRID and _is_colour(canvas[h * MAX_GRID]):
        h += 1
    return h, w


@numba.njit(cache=True)
def dihedral_into(canvas, rows, cols, t, token_map, out):
    """Write ``token_map[dihedral(canvas[:rows, :cols], t)]`` into ``out``.

    Returns (out_rows, out_cols, all_colour): ``token_map`` gives the colour of each token and
    NOT_COLOUR for the rest, so ``all_colour`` tells whether the block held colour tokens only.
    """
    base, di, dj, out_rows, out_cols = _walk(rows, cols, t)
    seen = 0
    k = 0
    for i in range(out_rows):
        src = base + i * di
        for j in range(out_cols):
            cell = _colour(token_map, canvas[src])
            out[k] = cell
            seen |= cell
            src += dj
            k += 1
    return out_rows, out_cols, seen < 16      # colours are 0..9; NOT_COLOUR sets the high bits


@numba.njit(cache=True)
def undo_hash_into(canvas, t, token_map, out):
    """Crop a prediction, undo its augmentation into ``out``, hash it: (rows, cols, h1, h2)."""
    rows, cols = quick_shape(canvas)
    if rows > 0:
        out_rows, out_cols, all_colour = dihedral_into(canvas, rows, cols, INVERSE_T[t], token_map, out)
        if not all_colour:      # not a clean block: take the contract crop the long way
            rows, cols = crop_shape(canvas)
            out_rows, out_cols, _ = dihedral_into(canvas, rows, cols, INVERSE_T[t], token_map, out)
        rows, cols = out_rows, out_cols
    h1, h2 = hash_grid(out, rows, cols)
    return rows, cols, h1, h2


@numba.njit(cache=True)
def undone_equals(canvas, rows, cols, t, token_map, target, target_rows, target_cols):
    """Whether undoing the augmentation of the block ``canvas[:rows, :cols]`` gives ``target``; the
    walk of :func:`dihedral_into` with ``INVERSE_T[t]``, stopping at the first difference (a
    non-colour token is a difference: NOT_COLOUR is no colour)."""
    base, di, dj, out_rows, out_cols = _walk(rows, cols, INVERSE_T[t])
    if out_rows != target_rows or out_cols != target_cols:
        return False
    k = 0
    for i in range(out_rows):
        src = base + i * di
        for j in range(out_cols):
            if _colour(token_map, canvas[src]) != target[k]:
                return False
            src += dj
            k += 1
    return True


@numba.njit(cache=True)
def match_input(canvas, t, token_map, first_pair, end_pair, pair_inputs, pair_input_shape):
    """The test pair whose original input equals this input, cropped and un-augmented, or
    INPUT_MISMATCH. Tries the quick shape first; only when no pair matches and the block was not
    the crop after all does it crop the long way and try again."""
    h, w = quick_shape(canvas)
    for p in range(first_pair, end_pair):
        if undone_equals(canvas, h, w, t, token_map, pair_inputs[p], pair_input_shape[p, 0], pair_input_shape[p, 1]):
            return p
    rows, cols = crop_shape(canvas)
    if rows > 0 and (rows != h or cols != w):
        for p in range(first_pair, end_pair):
            if undone_equals(canvas, rows, cols, t, token_map, pair_inputs[p],
                             pair_input_shape[p, 0], pair_input_shape[p, 1]):
                return p
    return INPUT_MISMATCH


@numba.njit(cache=True)
def same_grid(a, a_rows, a_cols, b, b_rows, b_cols):
    if a_rows != b_rows or a_cols != b_cols:
        return False
    for k in range(a_rows * a_cols):
        if a[k] != b[k]:
            return False
    return True


@numba.njit(cache=True, parallel=True)
def canonicalise_rows(preds, inputs, row_ident, ident_task, ident_t, ident_token_map,
                      task_pair_start, pair_inputs, pair_input_shape,
                      out_canon, out_pair, out_shape, out_h1, out_h2):
    """The per-row work of the vote, in parallel over blocks of rows.

    For row i with identifier ``row_ident[i]`` (0 = padding): find which of its task's original test
    inputs its input equals once cropped and un-augmented (``out_pair[i]`` = that test pair, or
    INPUT_MISMATCH); write its cropped, un-augmented prediction to ``out_canon[i]`` (canonical), with
    the shape and the 128-bit hash. ``ident_token_map[id]`` is :func:`inverse_token_maps` of its map.
    """
    n = preds.shape[0]
    block = 1024
    for b in numba.prange((n + block - 1) // block):
        for i in range(b * block, min(n, (b + 1) * block)):
            ident = row_ident[i]
            if ident == 0:
                out_pair[i] = PADDING
                out_shape[i, 0] = 0
                out_shape[i, 1] = 0
                continue
            task, t, token_map = ident_task[ident], ident_t[ident], ident_token_map[ident]
            out_pair[i] = match_input(inputs[i], t, token_map, task_pair_start[task],
                                      task_pair_start[task + 1], pair_inputs, pair_input_shape)
            rows, cols, h1, h2 = undo_hash_into(preds[i], t, token_map, out_canon[i])
            out_shape[i, 0] = rows
            out_shape[i, 1] = cols
            out_h1[i] = h1
            out_h2[i] = h2


@numba.njit(cache=True, parallel=True)
def pack_rows(canon_rows, shape, pool, start):
    """Copy each canonical row's ``rows*cols`` cells to ``pool[start[i]:]``: the grids of 385,812
    predictions average ~230 cells, so packed they take a quarter of the 900-byte rows."""
    for i in numba.prange(canon_rows.shape[0]):
        n = np.int64(shape[i, 0]) * np.int64(shape[i, 1])
        # two 1-D views and an index loop: the form LLVM vectorises (4x faster than a slice copy)
        source, target = canon_rows[i], pool[start[i]:start[i] + n]
        for k in range(n):
            target[k] = source[k]


@numba.njit(cache=True)
def same_packed(pool, start, shape, a, b):
    """Whether packed grids ``a`` and ``b`` are equal (shape and cells)."""
    return same_grid(pool[start[a]:], shape[a, 0], shape[a, 1], pool[start[b]:], shape[b, 0], shape[b, 1])


@numba.njit(cache=True)
def matches_truth(representative, pair, pool, start, shape, truth, truth_shape):
    """Whether each answer (a representative packed grid) equals its test pair's ground truth."""
    out = np.zeros(len(representative), dtype=np.bool_)
    for g in range(len(representative)):
        r, p = representative[g], pair[g]
        out[g] = same_grid(pool[start[r]:], shape[r, 0], shape[r, 1], truth[p], truth_shape[p, 0], truth_shape[p, 1])
    return out
