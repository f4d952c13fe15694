"""Token encoding of ARC grids (contract): PAD=0, EOS=1, colour c -> c+2, a 30x30 canvas, row-major."""
from __future__ import annotations

import numpy as np

PAD, EOS, COLOUR_OFFSET = 0, 1, 2
VOCAB_SIZE = 12
MAX_GRID = 30
SEQ_LEN = MAX_GRID * MAX_GRID


def encode_grid(grid: np.ndarray, r: int = 0, c: int = 0) -> np.ndarray:
    """Place ``grid`` at offset (r, c) of a 30x30 canvas, EOS just below and just right of it.

    EOS goes on the row below the grid (grid columns only) and on the column right of it (grid rows
    only), each only where it lies inside the canvas; the corner cell stays PAD.
    """
    rows, cols = grid.shape
    canvas = np.zeros((MAX_GRID, MAX_GRID), dtype=np.uint8)
    canvas[r:r + rows, c:c + cols] = grid + COLOUR_OFFSET
    if r + rows < MAX_GRID:
        canvas[r + rows, c:c + cols] = EOS
    if c + cols < MAX_GRID:
        canvas[r:r + rows, c + cols] = EOS
    return canvas.reshape(-1)


def crop(tokens: np.ndarray) -> np.ndarray:
    """Decode a predicted 900-token canvas back to a grid.

    Takes the largest top-left rectangle holding only colour tokens (2..11), scanning rows downward
    while the usable width can only shrink; ties go to the first (shortest) rectangle found.
    """
    canvas = np.asarray(tokens).reshape(MAX_GRID, MAX_GRID)
    valid = (canvas >= COLOUR_OFFSET) & (canvas < VOCAB_SIZE)
    # width of the valid prefix of each row, then the running minimum down the rows
    widths = np.where(valid.all(axis=1), MAX_GRID, np.argmin(valid, axis=1))
    widths = np.minimum.accumulate(widths)
    areas = widths * np.arange(1, MAX_GRID + 1)
    best = int(np.argmax(areas))
    if areas[best] == 0:
        return np.zeros((0, 0), dtype=np.uint8)
    return (canvas[:best + 1, :widths[best]] - COLOUR_OFFSET).astype(np.uint8)
