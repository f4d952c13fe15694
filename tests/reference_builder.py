"""A slow, literal implementation of DESIGN.md's reference algorithm (steps 1-7), for tests only.

Written straight from the spec with plain NumPy calls on the global generator and sha256 puzzle
hashes, sharing nothing with `arc_data.plan`/`arc_data.writer` but the task loader, so the fast
builder can be checked against it byte for byte on small inputs.
"""
from __future__ import annotations

import hashlib

import numpy as np

from arc_data.augment import dihedral


def _grid_hash(grid: np.ndarray) -> str:
    return hashlib.sha256(bytes(grid.shape) + np.ascontiguousarray(grid).tobytes()).hexdigest()


def _puzzle_hash(pairs) -> str:
    return hashlib.sha256("|".join(sorted(f"{_grid_hash(i)}|{_grid_hash(o)}" for i, o in pairs)).encode()).hexdigest()


def _encode(grid: np.ndarray, r: int, c: int) -> np.ndarray:
    canvas = np.zeros((30, 30), np.uint8)
    h, w = grid.shape
    canvas[r:r + h, c:c + w] = grid + 2
    if r + h < 30:
        canvas[r + h, c:c + w] = 1
    if c + w < 30:
        canvas[r:r + h, c + w] = 1
    return canvas.reshape(-1)


def reference_build(sources, num_aug: int, seed: int) -> dict:
    """sources: list of `arc_data.sources.Source` (already listed in order). Returns the arrays."""
    np.random.seed(seed)
    groups = {"train": [], "test": []}  # split -> list of groups; group = list of (name, pairs)
    for source in sources:
        for subset, tasks in source.subsets:
            items = [(t.name, t) for t in tasks]
            np.random.shuffle(items)
            for name, task in items:
                dest = {"train": [], "test": []}
                for key, inp, out in task.pairs:
                    dest["test" if key == "test" and subset == "evaluation" else "train"].append((inp, out))
                everything = [p for key, i, o in task.pairs for p in [(i, o)]]
                versions = [(name, 0, np.arange(10, dtype=np.uint8))]
                seen = {_puzzle_hash(everything)}
                for _ in range(5 * num_aug):
                    t = np.random.randint(0, 8)
                    cmap = np.concatenate([np.zeros(1, np.uint8), np.random.permutation(np.arange(1, 10, dtype=np.uint8))])
                    h = _puzzle_hash([(dihedral(cmap[i], t), dihedral(cmap[o], t)) for i, o in everything])
                    if h not in seen:
                        seen.add(h)
                        versions.append((f"{name}_t{t}_{''.join(map(str, cmap))}", t, cmap))
                    if len(versions) >= num_aug + 1:
                        break
                for split in ("train", "test"):
                    if dest[split]:
                        groups[split].append([(vname, [(dihedral(m[i], t), dihedral(m[o], t)) for i, o in dest[split]])
                                              for vname, t, m in versions])
    ids = {}
    for split in ("train", "test"):
        for group in groups[split]:
            for vname, _ in group:
                ids.setdefault(vname, len(ids) + 1)
    result = {"identifiers": ["<blank>"] + list(ids)}
    for split in ("train", "test"):
        inputs, labels, pids, pidx, gidx = [], [], [], [0], [0]
        for group in groups[split]:
            for vname, pairs in group:
                keep = np.random.randint(0, len(pairs))
                for k, (i, o) in enumerate(pairs):
                    r = c = 0
                    if split == "train" and k != keep:
                        r = np.random.randint(0, 30 - max(i.shape[0], o.shape[0]) + 1)
                        c = np.random.randint(0, 30 - max(i.shape[1], o.shape[1]) + 1)
                    inputs.append(_encode(i, r, c))
                    labels.append(_encode(o, r, c))
                pidx.append(len(inputs))
                pids.append(ids[vname])
            gidx.append(len(pids))
        result[split] = {"inputs": np.stack(inputs) if inputs else np.zeros((0, 900), np.uint8),
                         "labels": np.stack(labels) if labels else np.zeros((0, 900), np.uint8),
                         "puzzle_identifiers": np.array(pids, np.int32), "puzzle_indices": np.array(pidx, np.int32),
                         "group_indices": np.array(gidx, np.int32)}
    return result
