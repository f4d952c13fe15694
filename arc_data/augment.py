"""The augmentations of the ARC builder: 8 dihedral transforms and colour permutations, plus names.

An augmented puzzle is named ``f"{task}_t{t}_{map}"`` where ``map`` is the ten digits of the colour
map (``map[c]`` is the new colour of colour ``c``; colour 0 always stays 0). Every grid of the variant
is ``dihedral(map[grid], t)``. The evaluator undoes both from the name alone.
"""
from __future__ import annotations

import re

import numpy as np

# dihedral ids: 0 identity, 1/2/3 rotate 90/180/270 (np.rot90 k=1..3), 4 flip left-right,
# 5 flip up-down, 6 transpose, 7 flip left-right of rot90.
DIHEDRAL_INVERSE = (0, 3, 2, 1, 4, 5, 6, 7)
NUM_DIHEDRAL = 8
IDENTITY_MAP = np.arange(10, dtype=np.uint8)

_NAME_RE = re.compile(r"^(?P<task>.+)_t(?P<t>[0-7])_(?P<map>[0-9]{10})$")


def dihedral(grid: np.ndarray, t: int) -> np.ndarray:
    """Dihedral transform ``t`` of a 2-D grid (a view where numpy allows it)."""
    if t == 0:
        return grid
    if t in (1, 2, 3):
        return np.rot90(grid, k=t)
    if t == 4:
        return np.fliplr(grid)
    if t == 5:
        return np.flipud(grid)
    if t == 6:
        return grid.T
    if t == 7:
        return np.fliplr(np.rot90(grid, k=1))
    raise ValueError(f"dihedral transform id must be 0..7, got {t}")


def inverse_dihedral(grid: np.ndarray, t: int) -> np.ndarray:
    return dihedral(grid, DIHEDRAL_INVERSE[t])


def augment_grid(grid: np.ndarray, t: int, colour_map: np.ndarray) -> np.ndarray:
    """The builder's forward augmentation: colour map first, then dihedral transform."""
    return np.ascontiguousarray(dihedral(colour_map[grid], t))


def inverse_colour_map(colour_map: np.ndarray) -> np.ndarray:
    inv = np.empty(10, dtype=np.uint8)
    inv[colour_map] = np.arange(10, dtype=np.uint8)
    return inv


def undo_augmentation(grid: np.ndarray, t: int, colour_map: np.ndarray) -> np.ndarray:
    """Inverse of :func:`augment_grid`: inverse dihedral, then the inverse colour map."""
    return inverse_colour_map(colour_map)[np.ascontiguousarray(inverse_dihedral(grid, t))]


def augmentation_name(task: str, t: int, colour_map: np.ndarray) -> str:
    return f"{task}_t{t}_{''.join(str(int(x)) for x in colour_map)}"


def parse_augmentation_name(name: str) -> tuple[str, int, np.ndarray]:
    """``name -> (task, t, colour_map)``; an original (unaugmented) name gives ``(name, 0, identity)``."""
    m = _NAME_RE.match(name)
    if m is None:
        return name, 0, IDENTITY_MAP.copy()
    colour_map = np.frombuffer(m["map"].encode(), dtype=np.uint8) - ord("0")
    if sorted(colour_map.tolist()) != list(range(10)):
        return name, 0, IDENTITY_MAP.copy()
    return m["task"], int(m["t"]), colour_map.astype(np.uint8)


def parse_augmentation_names(names: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Batched :func:`parse_augmentation_name` for hundreds of thousands of names (the evaluator).

    Returns ``(tasks, t uint8 [n], colour_maps uint8 [n, 10])`` by exactly the single-name rules: a
    name not of the form ``<task>_t<0-7>_<ten digits>``, or whose digits are not a permutation of
    0..9, is an original. The fixed-length suffix (14 characters) is checked as one numpy array of
    code points, because a regex per name costs about 2 microseconds, which at 400k names is most of
    the evaluator's time budget.
    """
    n = len(names)
    tasks = list(names)
    t = np.zeros(n, dtype=np.uint8)
    maps = np.tile(IDENTITY_MAP, (n, 1))
    if n == 0:
        return tasks, t, maps
    codes = np.array([name[-14:].rjust(14) for name in names], dtype="<U14").view(np.uint32).reshape(n, 14)
    lengths = np.fromiter(map(len, names), dtype=np.int64, count=n)
    digits = codes[:, 4:] - np.uint32(ord("0"))          # wraps to huge values for non-digits
    in_range = (digits <= 9).all(axis=1)
    # a permutation of 0..9 sets each of the ten bits once
    bits = np.bitwise_or.reduce(np.left_shift(np.uint32(1), np.minimum(digits, 31)), axis=1)
    is_perm = ((lengths > 14) & (codes[:, 0] == ord("_")) & (codes[:, 1] == ord("t"))
               & (codes[:, 2] >= ord("0")) & (codes[:, 2] <= ord("7")) & (codes[:, 3] == ord("_"))
               & in_range & (bits == 0x3FF))
    rows = np.flatnonzero(is_perm)
    t[rows] = codes[rows, 2] - ord("0")
    maps[rows] = digits[rows]
    if len(rows) == n:
        tasks = [name[:-14] for name in names]
    else:
        for i in rows.tolist():
            tasks[i] = names[i][:-14]
    return tasks, t, maps
