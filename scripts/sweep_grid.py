"""The p sweep's grid (scripts/p_sweep.py): its cells, p x seed x learning rate x loops, each with
the run folder it trains in; the --loops values; repeated values on an axis merged into one cell."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from scripts.experiment_tools import exact_text


@dataclass(frozen=True)
class Cell:
    p: float
    seed: int
    lr: float
    h_cycles: int
    l_cycles: int

    @property
    def loops(self) -> str:
        return f"{self.h_cycles}x{self.l_cycles}"

    @property
    def folder(self) -> str:
        return f"lr{exact_text(self.lr)}_loops{self.loops}/p{p_folder_text(self.p)}_seed{self.seed}"

    def describe(self) -> str:
        return f"p={exact_text(self.p)} seed={self.seed} lr={exact_text(self.lr)} loops={self.loops}"


def p_folder_text(p: float) -> str:
    """p with 3 decimals, as cell folders were always named (so their finished cells still resume),
    or exactly when 3 decimals would round it: 0.4 and 0.4004 must not share a folder."""
    text = f"{p:.3f}"
    return text if float(text) == p else exact_text(p)


def parse_loops(text: str, default_h_cycles: int) -> tuple[int, int]:
    """'4' -> (default_h_cycles, 4); '3x4' -> (3, 4)."""
    parts = text.lower().split("x")
    try:
        values = [int(v) for v in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or min(values, default=0) < 1:
        raise argparse.ArgumentTypeError(f"--loops takes L or HxL with whole numbers >= 1, got {text!r}")
    return (default_h_cycles, values[0]) if len(values) == 1 else (values[0], values[1])


def merge_same(flag: str, texts: list[str], keys: list, shown=str) -> tuple[list, str | None]:
    """The distinct keys in first-seen order, and a one-line note naming the texts that gave one key
    (None when all differ): two equal values on one axis would be one cell run twice, into one folder."""
    texts_of: dict = {}
    for text, key in zip(texts, keys):
        texts_of.setdefault(key, []).append(text)
    merged = [f"{' and '.join(group)} are both {shown(key)}" for key, group in texts_of.items() if len(group) > 1]
    note = f"note: {flag} {'; '.join(merged)}: each runs once" if merged else None
    return list(texts_of), note


def make_grid(ps: list[float], seeds: list[int], lrs: list[float], loops: list[tuple[int, int]]) -> list[Cell]:
    """Every combination once (p rounded to 6 decimals), in a fixed order; repeated values are merged."""
    cells = [Cell(round(p, 6), seed, lr, h, l) for lr in lrs for h, l in loops for p in ps for seed in seeds]
    return list(dict.fromkeys(cells))


def folder_clash(cells: list[Cell]) -> str | None:
    """Two distinct cells that would train in one folder (each run wipes its folder first, so the
    other's run would be destroyed), named, or None."""
    owner: dict[str, Cell] = {}
    for cell in cells:
        other = owner.setdefault(cell.folder, cell)
        if other != cell:
            return f"cells {other.describe()} and {cell.describe()} would share the run folder {cell.folder}"
    return None


def merge_axes(args, loop_texts: list[str], loop_pairs: list[tuple[int, int]]) -> tuple:
    """(p, seeds, lr, loop pairs) of `args` (p_sweep.parse_args) without repeats, and the notes saying
    what was merged: `--loops 3` and `--loops 2x3` are one cell with an arch of H_cycles 2, and p is
    kept to 6 decimals."""
    ps, p_note = merge_same("--p", [exact_text(p) for p in args.p], [round(p, 6) for p in args.p], exact_text)
    seeds, seed_note = merge_same("--seeds", [str(s) for s in args.seeds], args.seeds)
    lrs, lr_note = merge_same("--lr", [exact_text(lr) for lr in args.lr], args.lr, exact_text)
    pairs, loop_note = merge_same("--loops", loop_texts, loop_pairs, lambda hl: f"{hl[0]}x{hl[1]}")
    return ps, seeds, lrs, pairs, [n for n in (p_note, seed_note, lr_note, loop_note) if n]
