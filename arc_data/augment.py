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


SUFFIX_LEN = 14   # "_t<d>_" + ten digits


def parse_augmentation_bytes(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """Batched :func:`parse_augmentation_name` over names stored as byte ranges ``buf[starts:ends]``
    (UTF-8), for the evaluator's hundreds of thousands of names: one numpy pass, no Python per name.

    Returns ``(augmented bool [n], t uint8 [n], colour_maps uint8 [n, 10], task_ends int64 [n])``
    by exactly the single-name rules: a name not of the form ``<task>_t<0-7>_<ten digits>``, or whose
    digits are not a permutation of 0..9, is an original (t 0, identity map, the task is the name);
    ``buf[starts:task_ends]`` is the task name. (Multi-byte UTF-8 characters never contain ASCII
    bytes, so matching the ASCII suffix on bytes is matching it on characters.)
    """
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    n = len(starts)
    buf = buf if len(buf) else np.zeros(1, np.uint8)             # all names empty: nothing to read
    cells = np.maximum(ends[:, None] - SUFFIX_LEN + np.arange(SUFFIX_LEN), 0)
    codes = buf[cells] if n else np.zeros((0, SUFFIX_LEN), np.uint8)
    digits = codes[:, 4:] - np.uint8(ord("0"))                   # wraps to > 9 for non-digits
    # ten powers of two sum to 1023 only when they are 1, 2, ..., 512 once each
    bit_sum = np.left_shift(np.int64(1), np.minimum(digits, 20).astype(np.int64)).sum(axis=1)
    augmented = ((ends - starts > SUFFIX_LEN) & (codes[:, 0] == ord("_")) & (codes[:, 1] == ord("t"))
                 & (codes[:, 2] >= ord("0")) & (codes[:, 2] <= ord("7")) & (codes[:, 3] == ord("_"))
                 & (digits <= 9).all(axis=1) & (bit_sum == 0x3FF))
    t = np.where(augmented, codes[:, 2] - np.uint8(ord("0")), 0).astype(np.uint8)
    maps = np.where(augmented[:, None], digits, IDENTITY_MAP).astype(np.uint8)
    return augmented, t, maps, np.where(augmented, ends - SUFFIX_LEN, ends)


def parse_augmentation_names(names: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """:func:`parse_augmentation_bytes` for a list of names: ``(tasks, t uint8 [n], maps uint8 [n, 10])``."""
    encoded = [name.encode() for name in names]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    ends = np.cumsum(lengths)
    buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    augmented, t, maps, _ = parse_augmentation_bytes(buf, ends - lengths, ends)
    tasks = [name[:-SUFFIX_LEN] if a else name for name, a in zip(names, augmented.tolist())]
    return tasks, t, maps
