"""The build plan: which augmentations each task keeps, and every random draw of the reference builder.

The reference builder (DESIGN.md, steps 1-7) interleaves its draws with slow per-grid Python work.
We keep its draws in exactly the same order but make them in compiled code (`arc_data.rng`), and
replace the work that does not touch the generator with cheaper exact equivalents:

* Duplicate variants. The reference hashes every grid of every trial with sha256 and keeps a trial
  when the sorted multiset of pair hashes is new. Two trials give the same puzzle exactly when
  their multisets of (input, output) grids are equal. We decide that equality with a 128-bit
  fingerprint that is linear in the colour map: for a grid g (after dihedral t) and colour map m,
  `h = shape_term + sum_p W[p, m[g[p]]] = shape_term + sum_c S_t[c, m[c]]` with
  `S_t[c, c'] = sum_{p: g[p] = c} W[p, c']`, W random 64-bit words (two independent lanes). So a
  trial costs ~10 additions per grid instead of hashing every cell. Pairs combine through a 64-bit
  mixer; the puzzle is the wrapping sum over its pairs (a multiset, like the sorted list). A false
  "duplicate" needs a 2^-128 coincidence.
* Translations: per puzzle one `randint(0, n_examples)`, per translated example two `randint`s.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from arc_data.augment import dihedral
from arc_data.encoding import MAX_GRID
from arc_data.rng import interval, randint, shuffle_inplace

RETRIES_FACTOR = 5  # up to 5 * num_aug trials per task, as in the reference

# Fixed fingerprint weights: drawn from their own generator so the global stream is untouched.
_fp_rng = np.random.default_rng(0x4852_4D2D_4450)
_W = _fp_rng.integers(0, 2**64, size=(2, MAX_GRID * MAX_GRID, 10), dtype=np.uint64)
_W_SHAPE = _fp_rng.integers(0, 2**64, size=(2, 2, MAX_GRID + 1, MAX_GRID + 1), dtype=np.uint64)


@numba.njit(cache=True, nogil=True)
def _mix64(x):
    # splitmix64 finaliser: a bijection that spreads every input bit over the output
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


@numba.njit(cache=True, nogil=True)
def _colour_tables(flat, offsets, W, tables):
    """tables[lane, g, c, c'] = sum over cells p of grid g with colour c of W[lane, p, c']."""
    tables[:] = 0
    for g in range(offsets.shape[0] - 1):
        for p in range(offsets[g + 1] - offsets[g]):
            c = flat[offsets[g] + p]
            for lane in range(2):
                for c2 in range(10):
                    tables[lane, g, c, c2] += W[lane, p, c2]


@numba.njit(cache=True, nogil=True)
def _fingerprint(tables, shape_terms, t, cmap, n_pairs):
    """128-bit fingerprint of the task's pair multiset under (dihedral t, colour map cmap)."""
    fp0 = np.uint64(0)
    fp1 = np.uint64(0)
    for lane in range(2):
        acc = np.uint64(0)
        for pair in range(n_pairs):
            h_in = shape_terms[lane, t, pair, 0]
            h_out = shape_terms[lane, t, pair, 1]
            gi = (t * n_pairs + pair) * 2
            for c in range(10):
                h_in += tables[lane, gi, c, cmap[c]]
                h_out += tables[lane, gi + 1, c, cmap[c]]
            acc += _mix64(_mix64(h_in) ^ h_out)
        if lane == 0:
            fp0 = acc
        else:
            fp1 = acc
    return fp0, fp1


@numba.njit(cache=True, nogil=True)
def _seen_or_insert(keys0, keys1, used, fp0, fp1):
    """Open addressing set of 128-bit fingerprints; True when already present."""
    mask = keys0.shape[0] - 1
    i = np.int64(fp0 & np.uint64(mask))
    while used[i]:
        if keys0[i] == fp0 and keys1[i] == fp1:
            return True
        i = (i + 1) & mask
    used[i] = True
    keys0[i] = fp0
    keys1[i] = fp1
    return False


@numba.njit(cache=True, nogil=True)
def _plan_task(key, pos, tables, shape_terms, n_pairs, num_aug, out_t, out_map):
    """Draw trials exactly as the reference does for one task; returns how many variants it kept."""
    cap = 16
    while cap < 4 * (num_aug + 1):
        cap *= 2
    keys0 = np.zeros(cap, np.uint64)
    keys1 = np.zeros(cap, np.uint64)
    used = np.zeros(cap, np.bool_)
    cmap = np.arange(10).astype(np.uint8)
    fp0, fp1 = _fingerprint(tables, shape_terms, 0, cmap, n_pairs)
    _seen_or_insert(keys0, keys1, used, fp0, fp1)
    kept = 0
    perm = np.empty(9, np.uint8)
    for _trial in range(RETRIES_FACTOR * num_aug):
        t = randint(key, pos, 8)
        for i in range(9):
            perm[i] = i + 1
        shuffle_inplace(key, pos, perm)
        cmap[0] = 0
        cmap[1:] = perm
        fp0, fp1 = _fingerprint(tables, shape_terms, t, cmap, n_pairs)
        if not _seen_or_insert(keys0, keys1, used, fp0, fp1):
            out_t[kept] = t
            out_map[kept] = cmap
            kept += 1
        if kept + 1 >= num_aug + 1:
            break
    return kept


def _task_tables(task) -> tuple[np.ndarray, np.ndarray]:
    """Colour tables and shape terms of a task's grids under each of the 8 dihedral transforms."""
    grids = [dihedral(g, t) for t in range(8) for _, inp, out in task.pairs for g in (inp, out)]
    sizes = np.array([0] + [g.size for g in grids], dtype=np.int64)
    offsets = np.cumsum(sizes)
    flat = np.concatenate([np.ascontiguousarray(g).reshape(-1) for g in grids])
    tables = np.empty((2, len(grids), 10, 10), dtype=np.uint64)
    _colour_tables(flat, offsets, _W, tables)
    n_pairs = len(task.pairs)
    shapes = np.array([g.shape for g in grids], dtype=np.int64).reshape(8, n_pairs, 2, 2)
    io = np.arange(2)[None, None, :]
    shape_terms = _W_SHAPE[:, io, shapes[..., 0], shapes[..., 1]]  # [lane, t, pair, io]
    return tables, np.ascontiguousarray(shape_terms)


@dataclass
class VariantPlan:
    """Per task (processing order), its versions: the original first, then the kept augmentations."""
    task_start: np.ndarray  # int64 [tasks+1], offsets into the version arrays
    trans: np.ndarray  # uint8 [versions], dihedral id
    colour_map: np.ndarray  # uint8 [versions, 10]

    @property
    def num_versions(self) -> int:
        return int(self.task_start[-1])


def plan_variants(subsets, num_aug: int, state, progress=None) -> tuple[list, VariantPlan]:
    """Shuffle each subset's task list, then decide each task's kept augmentations, advancing `state`
    (the global legacy RNG) exactly as the reference does: subset by subset, the shuffle of a subset
    before the trials of its tasks. Returns the tasks in processing order and their plan."""
    out_t = np.zeros(max(num_aug, 1), np.uint8)
    out_map = np.zeros((max(num_aug, 1), 10), np.uint8)
    ordered, trans, maps, counts = [], [], [], []
    identity = np.arange(10, dtype=np.uint8)
    for subset_tasks in subsets:
        order = np.arange(len(subset_tasks))
        shuffle_inplace(state.key, state.pos, order)  # the reference's np.random.shuffle of the list
        for i in order:
            task = subset_tasks[i]
            tables, shape_terms = _task_tables(task)
            kept = _plan_task(state.key, state.pos, tables, shape_terms, len(task.pairs), num_aug, out_t, out_map)
            ordered.append(task)
            trans.append(np.concatenate([[0], out_t[:kept]]).astype(np.uint8))
            maps.append(np.concatenate([identity[None], out_map[:kept]]))
            counts.append(kept + 1)
            if progress is not None:
                progress.update(1)
    plan = VariantPlan(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                       np.concatenate(trans) if trans else np.zeros(0, np.uint8),
                       np.concatenate(maps) if maps else np.zeros((0, 10), np.uint8))
    return ordered, plan


@numba.njit(cache=True, nogil=True)
def lay_out_split(key, pos, task_start, trans, pair_start, pair_split, pair_shape, split, translate,
                  row_pair, row_version, row_offsets, puzzle_rows, group_puzzles):
    """One split's rows in the reference's order, with the writing phase's draws.

    Rows go groups (tasks with examples in `split`), then puzzles (versions), then examples (pairs):
    fills row_pair/row_version, the examples per puzzle and the puzzles per group. Per puzzle, one
    `randint(0, n_examples)` picks the example left in place; each other example, when `translate`,
    gets `r, c` shared by its input and output (`pair_shape[p] = (in_rows, in_cols, out_rows,
    out_cols)` before the dihedral transform; transforms 1, 3, 6, 7 swap rows and columns).
    """
    row = 0
    n_puzzles = 0
    n_groups = 0
    for task in range(task_start.shape[0] - 1):
        n = 0
        for p in range(pair_start[task], pair_start[task + 1]):
            if pair_split[p] == split:
                n += 1
        if n == 0:
            continue
        for v in range(task_start[task], task_start[task + 1]):
            t = trans[v]
            swap = t == 1 or t == 3 or t == 6 or t == 7
            keep = randint(key, pos, n)
            i = 0
            for p in range(pair_start[task], pair_start[task + 1]):
                if pair_split[p] != split:
                    continue
                r = 0
                c = 0
                if translate and i != keep:
                    rows = max(pair_shape[p, 0], pair_shape[p, 2])
                    cols = max(pair_shape[p, 1], pair_shape[p, 3])
                    if swap:
                        rows, cols = cols, rows
                    r = interval(key, pos, MAX_GRID - rows)
                    c = interval(key, pos, MAX_GRID - cols)
                row_pair[row] = p
                row_version[row] = v
                row_offsets[row, 0] = r
                row_offsets[row, 1] = c
                row += 1
                i += 1
            puzzle_rows[n_puzzles] = n
            n_puzzles += 1
        group_puzzles[n_groups] = task_start[task + 1] - task_start[task]
        n_groups += 1
    return row
