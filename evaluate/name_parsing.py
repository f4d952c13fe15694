"""Decode the augmentation of many puzzle names at once, straight from the bytes of identifiers.json.

The rules are exactly ``arc_data.augment.parse_augmentation_name``: ``<task>_t<0-7>_<ten digits>``
with the digits a permutation of 0..9 is an augmented puzzle; any other name is an original (t 0,
identity map). A numba pass over ~370,000 names takes milliseconds where numpy's array-at-a-time
version took 0.2 s and a Python loop 0.7 s. Names are UTF-8: a multi-byte character never contains
an ASCII byte, so matching the ASCII suffix byte by byte matches it character by character.
"""
from __future__ import annotations

import numba
import numpy as np

SUFFIX_LEN = 14     # "_t<d>_" and ten digits
_UNDERSCORE, _T, _ZERO = ord("_"), ord("t"), ord("0")


@numba.njit(cache=True)
def decode_augmentations(buf, starts, ends):
    """For the names ``buf[starts[i]:ends[i]]``: (t uint8 [n], colour maps uint8 [n, 10], task_ends).

    ``buf[starts[i]:task_ends[i]]`` is the name's task (the whole name for an original).
    """
    n = len(starts)
    t = np.zeros(n, dtype=np.uint8)
    maps = np.empty((n, 10), dtype=np.uint8)
    task_ends = ends.copy()
    for i in range(n):
        for c in range(10):
            maps[i, c] = c
        s, e = starts[i], ends[i]
        if e - s <= SUFFIX_LEN:
            continue
        b = e - SUFFIX_LEN
        if buf[b] != _UNDERSCORE or buf[b + 1] != _T or buf[b + 3] != _UNDERSCORE:
            continue
        dihedral = np.int64(buf[b + 2]) - _ZERO
        if dihedral < 0 or dihedral > 7:
            continue
        seen = 0
        for c in range(10):
            digit = np.int64(buf[b + 4 + c]) - _ZERO
            if digit < 0 or digit > 9:
                seen = -1
                break
            seen |= 1 << digit
        if seen != 0x3FF:          # each digit exactly once
            continue
        t[i] = dihedral
        for c in range(10):
            maps[i, c] = buf[b + 4 + c] - _ZERO
        task_ends[i] = b
    return t, maps, task_ends


@numba.njit(cache=True)
def tasks_match(buf, starts, task_ends, task, table, lengths):
    """Whether each name's task part is the name ``table[task[i], :lengths[task[i]]]``."""
    out = np.ones(len(starts), dtype=np.bool_)
    for i in range(len(starts)):
        k = task[i]
        if task_ends[i] - starts[i] != lengths[k]:
            out[i] = False
            continue
        for j in range(lengths[k]):
            if buf[starts[i] + j] != table[k, j]:
                out[i] = False
                break
    return out


def name_table(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Names as a zero-padded byte table and their lengths, for :func:`tasks_match`."""
    encoded = [name.encode() for name in names]
    lengths = np.array([len(b) for b in encoded], dtype=np.int64)
    table = np.zeros((len(encoded), max(lengths, default=0)), dtype=np.uint8)
    for k, b in enumerate(encoded):
        table[k, :len(b)] = np.frombuffer(b, dtype=np.uint8)
    return table, lengths
