"""The p-sweep picture, in the style of the DeepLoop paper's Figure 6: final training loss against
the exponent p, one marker per seed, failed seeds marked distinctly, the mean of the trained seeds as
a line. One panel per (learning rate, loops) combination; the unigram floor as a dashed line.

Markers: shape = status (filled circle trained, hollow square stuck, cross diverged, the crosses in
a band above the plot since a diverged run has no final loss), colour = seed.
"""
from __future__ import annotations

import math
from pathlib import Path

from evaluate.png import write_png
from scripts.raster_plot import BLACK, GREY, Axes, Canvas, nice_ticks
from scripts.run_status import DIVERGED, STUCK, TRAINED

SEED_COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
                (140, 86, 75), (227, 119, 194), (23, 190, 207)]
SHAPE = {TRAINED: "o", STUCK: "s", DIVERGED: "x"}
PANEL_W, PANEL_H, PANELS_PER_ROW = 560, 400, 2
HEADER, FOOTER = 44, 64
LEFT, RIGHT, TOP, BOTTOM = 78, 20, 64, 44      # plot box inside a panel
DIVERGED_BAND = 26                              # pixels above the plot box for diverged markers


def panel_key(row: dict) -> tuple:
    return (float(row["lr"]), str(row["loops"]))


def _finite(value) -> bool:
    return value is not None and value != "" and math.isfinite(float(value))


def loss_range(rows: list[dict], floor: float, threshold: float) -> tuple[float, float]:
    """One y range for every panel, so that panels compare at a glance."""
    losses = [float(r["final_loss"]) for r in rows if r["status"] in (TRAINED, STUCK) and _finite(r["final_loss"])]
    low, high = min(losses + [floor, threshold]), max(losses + [floor, threshold])
    pad = max(0.08 * (high - low), 0.02 * max(abs(high), 1e-3))
    return low - pad, high + pad


def draw_panel(canvas: Canvas, x0: int, y0: int, rows: list[dict], floor: float, threshold: float, seeds: list,
               title: str, y_range: tuple[float, float]) -> None:
    ps = sorted({float(r["p"]) for r in rows})
    x_step = min((b - a for a, b in zip(ps, ps[1:])), default=0.1)
    x_range = (ps[0] - 0.6 * x_step, ps[-1] + 0.6 * x_step)
    box = (x0 + LEFT, y0 + TOP, x0 + PANEL_W - RIGHT, y0 + PANEL_H - BOTTOM)
    ax = Axes(canvas, box, x_range, y_range)
    ax.frame(ps, nice_ticks(*y_range), [f"{p:g}" for p in ps])
    canvas.text(title, x0 + PANEL_W / 2, y0 + 8, BLACK, 2, "centre")
    canvas.text("final train lm loss", ax.left, ax.top - DIVERGED_BAND - 16, GREY, 2)
    canvas.text("p", ax.right, ax.bottom + 24, GREY, 2, "right")
    canvas.text("diverged", ax.left - 6, ax.top - DIVERGED_BAND / 2 - 5, GREY, 2, "right")

    floor_y = ax.py(floor)
    canvas.line(ax.left, floor_y, ax.right, floor_y, GREY, 1.5, dash=(6, 4))
    canvas.text(f"unigram floor {floor:.3f}", ax.right - 4, floor_y - 14, GREY, 2, "right")
    if threshold != floor:   # below this line a run counts as trained
        canvas.line(ax.left, ax.py(threshold), ax.right, ax.py(threshold), GREY, 1.0, dash=(2, 4))

    means = []
    for p in ps:
        trained = [float(r["final_loss"]) for r in rows
                   if float(r["p"]) == p and r["status"] == TRAINED and _finite(r["final_loss"])]
        if trained:
            means.append((p, sum(trained) / len(trained)))
    for (pa, ma), (pb, mb) in zip(means, means[1:]):
        canvas.line(ax.px(pa), ax.py(ma), ax.px(pb), ax.py(mb), BLACK, 2.0)
    for p, m in means:
        canvas.dot(ax.px(p), ax.py(m), 3, BLACK)

    spread = 7  # pixels between the seeds of one p, so markers do not hide each other
    for r in rows:
        if r["status"] not in SHAPE:
            continue
        k = seeds.index(r["seed"])
        x = ax.px(float(r["p"])) + (k - (len(seeds) - 1) / 2) * spread
        y = ax.top - DIVERGED_BAND / 2 if r["status"] == DIVERGED else ax.py(float(r["final_loss"]))
        canvas.marker(x, y, SHAPE[r["status"]], SEED_COLOURS[k % len(SEED_COLOURS)], 5)


def figure6_png(rows: list[dict], floor: float, path: Path, title: str, margin: float = 0.0) -> Path:
    """Write the sweep picture; rows are CSV rows (p, seed, lr, loops, status, final_loss, ...).
    margin > 0 adds a dotted line at floor * (1 - margin), the line a trained run ends below."""
    threshold = floor * (1 - margin)
    y_range = loss_range(rows, floor, threshold)
    keys = sorted({panel_key(r) for r in rows})
    seeds = sorted({r["seed"] for r in rows}, key=lambda s: int(s))
    columns = min(PANELS_PER_ROW, len(keys))
    panel_rows = -(-len(keys) // columns)
    canvas = Canvas(HEADER + panel_rows * PANEL_H + FOOTER, columns * PANEL_W)
    canvas.text(title, canvas.width / 2, 14, BLACK, 2, "centre")
    for i, key in enumerate(keys):
        lr, loops = key
        panel = [r for r in rows if panel_key(r) == key]
        x0, y0 = (i % columns) * PANEL_W, HEADER + (i // columns) * PANEL_H
        draw_panel(canvas, x0, y0, panel, floor, threshold, seeds, f"lr {lr:g}   loops {loops} (h x l)", y_range)
    y = canvas.height - FOOTER + 12
    x = 16
    for status, label in ((TRAINED, "trained"), (STUCK, "stuck (not below the floor)"), (DIVERGED, "diverged")):
        canvas.marker(x + 5, y + 5, SHAPE[status], GREY, 5)
        canvas.text(label, x + 16, y, BLACK, 2)
        x += 28 + len(label) * 8
    canvas.line(x, y + 5, x + 24, y + 5, BLACK, 2.0)
    canvas.text("mean of trained seeds", x + 30, y, BLACK, 2)
    if margin:
        x += 30 + len("mean of trained seeds") * 8 + 16
        canvas.line(x, y + 5, x + 24, y + 5, GREY, 1.0, dash=(2, 4))
        canvas.text(f"floor - {100 * margin:g}%", x + 30, y, BLACK, 2)
    y += 24
    x = 16
    for k, seed in enumerate(seeds):
        canvas.dot(x + 5, y + 5, 5, SEED_COLOURS[k % len(SEED_COLOURS)])
        canvas.text(f"seed {seed}", x + 16, y, BLACK, 2)
        x += 28 + len(f"seed {seed}") * 8
    return write_png(Path(path), canvas.pixels)
