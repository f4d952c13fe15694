"""NumPy's legacy global generator (MT19937), drawn from inside numba.

The reference builder makes millions of tiny draws (`np.random.randint`, `np.random.permutation`)
from `np.random`'s global RandomState. Calling NumPy for each costs microseconds; the draws
themselves cost nanoseconds. So we take the generator's exact state, advance it here in compiled
code with the same algorithms NumPy uses, and hand the state back, so that NumPy continues from
precisely where we stopped:

* MT19937 `next_uint32` (tempered output, twist every 624 words),
* `randint(0, n)` for the default int64 dtype = masked rejection on 32-bit draws; no draw at all
  when n == 1,
* `shuffle` / `permutation` = Fisher-Yates from the end, `j = random_interval(i)`, the same masked
  rejection (so `randint(0, n) == random_interval(n - 1)`, draw for draw).

tests/test_rng.py checks every function here against NumPy itself.
"""
from __future__ import annotations

import numba
import numpy as np

_N, _M = 624, 397
_MATRIX_A = np.uint32(0x9908B0DF)
_UPPER = np.uint32(0x80000000)
_LOWER = np.uint32(0x7FFFFFFF)


class LegacyState:
    """The global generator's state as two arrays numba can mutate in place."""

    def __init__(self):
        name, key, pos, _has_gauss, _gauss = np.random.get_state(legacy=True)
        assert name == "MT19937"
        self.key = np.array(key, dtype=np.uint32)
        self.pos = np.array([pos], dtype=np.int64)

    def push(self) -> None:
        """Hand the advanced state back to `np.random`."""
        np.random.set_state(("MT19937", self.key, int(self.pos[0]), 0, 0.0))


@numba.njit(cache=True, nogil=True)
def _twist(key):
    for i in range(_N):
        y = (key[i] & _UPPER) | (key[(i + 1) % _N] & _LOWER)
        v = key[(i + _M) % _N] ^ (y >> np.uint32(1))
        if y & np.uint32(1):
            v ^= _MATRIX_A
        key[i] = v


@numba.njit(cache=True, nogil=True)
def next_uint32(key, pos):
    if pos[0] >= _N:
        _twist(key)
        pos[0] = 0
    y = key[pos[0]]
    pos[0] += 1
    y ^= y >> np.uint32(11)
    y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
    y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
    y ^= y >> np.uint32(18)
    return y


@numba.njit(cache=True, nogil=True)
def interval(key, pos, hi):
    """A uniform integer in [0, hi] by masked rejection (NumPy's `random_interval`, hi < 2**32)."""
    if hi == 0:
        return 0
    mask = np.uint32(hi)
    mask |= mask >> np.uint32(1)
    mask |= mask >> np.uint32(2)
    mask |= mask >> np.uint32(4)
    mask |= mask >> np.uint32(8)
    mask |= mask >> np.uint32(16)
    while True:
        v = next_uint32(key, pos) & mask
        if v <= hi:
            return np.int64(v)


@numba.njit(cache=True, nogil=True)
def randint(key, pos, n):
    """`np.random.randint(0, n)` for 1 <= n <= 2**32 - 1."""
    return interval(key, pos, n - 1)


@numba.njit(cache=True, nogil=True)
def shuffle_inplace(key, pos, arr):
    """`np.random.shuffle(arr)` for a 1-D array (also the draws of shuffling a list of length len(arr))."""
    for i in range(arr.shape[0] - 1, 0, -1):
        j = interval(key, pos, i)
        tmp = arr[i]
        arr[i] = arr[j]
        arr[j] = tmp
