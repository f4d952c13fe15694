"""Draw tasks: grids in the standard ARC palette, as one PNG sheet per task or a self-contained HTML
page (every grid an inline PNG, nothing fetched from elsewhere).

Sheet layout, top to bottom: the task name and its vote summary; one row per demonstration pair
(input, output); one row per test input (input, ground truth, then the best-ranked answers with
their votes, framed green when right and red when wrong).
"""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass

import numpy as np

from evaluate.font import draw_text, text_size
from evaluate.png import encode_png
from evaluate.task_view import TaskView

# the standard ARC palette, colours 0..9
PALETTE = np.array([[0x00, 0x00, 0x00], [0x00, 0x74, 0xD9], [0xFF, 0x41, 0x36], [0x2E, 0xCC, 0x40],
                    [0xFF, 0xDC, 0x00], [0xAA, 0xAA, 0xAA], [0xF0, 0x12, 0xBE], [0xFF, 0x85, 0x1B],
                    [0x7F, 0xDB, 0xFF], [0x87, 0x0C, 0x25]], dtype=np.uint8)
PALETTE_HEX = ["#" + "".join(f"{v:02X}" for v in rgb) for rgb in PALETTE]
BACKGROUND, INK, GRID_LINE = (255, 255, 255), (34, 34, 34), (85, 85, 85)
RIGHT, WRONG, PLAIN, EMPTY = (0, 150, 60), (200, 30, 50), (210, 210, 210), (235, 235, 235)
FRAME, GAP, MARGIN, SCALE = 3, 14, 16, 2       # pixels; SCALE: font pixels per glyph pixel


def cell_size(grid: np.ndarray) -> int:
    """Pixels per cell: big cells for small grids, 30x30 grids about 210 pixels wide."""
    return int(max(6, min(24, 210 // max(grid.shape + (1,)))))


def grid_image(grid: np.ndarray, cell: int) -> np.ndarray:
    """RGB picture of a grid: ``cell``-pixel squares separated and surrounded by 1-pixel lines, so
    cell (r, c) covers rows ``1 + r*(cell+1)`` .. ``+cell`` and the same for columns."""
    rows, cols = grid.shape
    if rows == 0 or cols == 0:
        return np.full((cell + 2, cell + 2, 3), EMPTY, dtype=np.uint8)
    step = cell + 1
    image = np.empty((rows * step + 1, cols * step + 1, 3), dtype=np.uint8)
    image[:] = GRID_LINE
    block = np.repeat(np.repeat(PALETTE[grid], cell, axis=0), cell, axis=1)     # [rows*cell, cols*cell, 3]
    inner = np.ones(rows * step + 1, dtype=bool)
    inner[::step] = False
    keep_cols = np.ones(cols * step + 1, dtype=bool)
    keep_cols[::step] = False
    image[np.ix_(inner, keep_cols)] = block
    return image


@dataclass
class Panel:
    caption: str
    grid: np.ndarray
    frame: tuple = PLAIN
    role: str = ""             # demo-input, demo-output, test-input, truth, answer
    rank: int = 0              # answers: 1-based rank


@dataclass
class Placed:
    """Where a grid was drawn on a sheet: its picture's top-left pixel and cell size."""
    role: str
    index: int                 # demonstration / test pair number (0-based)
    rank: int                  # answers: 1-based rank; others 0
    grid: np.ndarray
    y: int
    x: int
    cell: int


def task_rows(view: TaskView) -> list[tuple[str, list[Panel], int]]:
    """The rows of a task's picture: (row title, panels, pair index)."""
    rows = [(f"demo {i + 1}", [Panel("input", a, role="demo-input"), Panel("output", b, role="demo-output")], i)
            for i, (a, b) in enumerate(view.demos)]
    for i, test in enumerate(view.tests):
        panels = [Panel("test input", test.input, role="test-input"), Panel("truth", test.truth, role="truth")]
        for k, answer in enumerate(test.answers):
            panels.append(Panel(f"#{k + 1} {answer.votes}v {'right' if answer.correct else 'wrong'}",
                                answer.grid, RIGHT if answer.correct else WRONG, role="answer", rank=k + 1))
        if test.answers or test.votes:
            tail = f"rank {test.rank}" if test.rank else "right answer not voted"
            rows.append((f"test {i + 1}: {test.votes} votes, {tail}", panels, i))
        else:
            rows.append((f"test {i + 1}", panels, i))
    return rows


def task_sheet(view: TaskView) -> tuple[np.ndarray, list[Placed]]:
    """One PNG-ready RGB picture of a task, and where each grid landed on it."""
    text_h = text_size("x", SCALE)[0]
    title = f"{view.name}  {view.summary}".strip()
    layout, y, width = [], MARGIN + text_h + GAP, text_size(title, SCALE)[1]
    for row_title, panels, index in task_rows(view):
        y += text_h + 10                # the row title, then room before the captions
        x, row_h, placed_row = MARGIN, 0, []
        for panel in panels:
            cell = cell_size(panel.grid)
            image = grid_image(panel.grid, cell)
            panel_w = max(image.shape[1] + 2 * FRAME, text_size(panel.caption, SCALE)[1])
            placed_row.append((panel, index, image, cell, y, x))
            x += panel_w + GAP
            row_h = max(row_h, text_h + 4 + image.shape[0] + 2 * FRAME)
        layout.append((row_title, y - text_h - 10, placed_row))
        width = max(width, x - GAP - MARGIN, text_size(row_title, SCALE)[1])
        y += row_h + GAP
    sheet = np.empty((y - GAP + MARGIN, width + 2 * MARGIN, 3), dtype=np.uint8)
    sheet[:] = BACKGROUND
    draw_text(sheet, title, MARGIN, MARGIN, SCALE, INK)
    placed = []
    for row_title, title_y, row in layout:
        draw_text(sheet, row_title, title_y, MARGIN, SCALE, INK)
        for panel, index, image, cell, top, left in row:
            draw_text(sheet, panel.caption, top, left, SCALE, INK)
            gy, gx = top + text_h + 4 + FRAME, left + FRAME
            h, w = image.shape[:2]
            sheet[gy - FRAME:gy + h + FRAME, gx - FRAME:gx + w + FRAME] = panel.frame
            sheet[gy:gy + h, gx:gx + w] = image
            placed.append(Placed(panel.role, index, panel.rank, panel.grid, gy, gx, cell))
    return sheet, placed


def html_page(views: list[TaskView], title: str) -> str:
    """A self-contained HTML page: every grid an inline PNG in a <figure> whose data attributes
    (task, role, pair, rank, cell) say what it is."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
             "body{font-family:sans-serif;margin:16px;color:#222}section{margin-bottom:32px}"
             ".row{display:flex;flex-wrap:wrap;align-items:flex-start;gap:14px;margin:6px 0 14px}"
             "figure{margin:0;padding:3px;border:3px solid #d2d2d2}figure.right{border-color:#00963c}"
             "figure.wrong{border-color:#c81e32}figcaption{font-size:12px;margin-top:2px}"
             "img{image-rendering:pixelated;display:block}h3{font-size:14px;margin:8px 0 0}"
             ".palette span{display:inline-block;width:14px;height:14px;margin-right:2px}"
             "</style></head><body>", f"<h1>{html.escape(title)}</h1>",
             "<p class='palette'>" + "".join(f"<span title='{i}' style='background:{c}'></span>"
                                             for i, c in enumerate(PALETTE_HEX)) + "</p>"]
    for view in views:
        parts.append(f"<section id='{html.escape(view.name)}'><h2>{html.escape(view.name)} "
                     f"<small>{html.escape(view.summary)}</small></h2>")
        for row_title, panels, index in task_rows(view):
            parts.append(f"<h3>{html.escape(row_title)}</h3><div class='row'>")
            for panel in panels:
                parts.append(_figure(view.name, panel, index))
            parts.append("</div>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "".join(parts)


def _figure(task: str, panel: Panel, index: int) -> str:
    cell = cell_size(panel.grid)
    data = base64.b64encode(encode_png(grid_image(panel.grid, cell))).decode()
    kind = {RIGHT: " class='right'", WRONG: " class='wrong'"}.get(panel.frame, "")
    rows, cols = panel.grid.shape
    return (f"<figure{kind} data-task='{html.escape(task)}' data-role='{panel.role}' data-pair='{index}' "
            f"data-rank='{panel.rank}' data-cell='{cell}'><img alt='{rows}x{cols} grid' "
            f"src='data:image/png;base64,{data}'><figcaption>{html.escape(panel.caption)} "
            f"({rows}x{cols})</figcaption></figure>")
