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
