"""The p-sweep picture, in the style of the DeepLoop paper's Figure 6: final training loss against
the exponent p, one marker per seed, failed seeds marked distinctly, the mean of the trained seeds as
a line. One panel per (learning rate, loops) combination; the unigram floor as a dashed line.

Markers: shape = status (filled circle trained, hollow square stuck, cross diverged, the crosses in
a band above the plot since a diverged run has no final loss), colour = seed.

Re-plot a finished sweep from its CSV (scripts/p_sweep.py writes OUT.csv and OUT.png):

    python scripts/sweep_plot.py results/p_sweep_cpu.csv --out /tmp/p_sweep_cpu.png
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

# run as `python scripts/sweep_plot.py`, Python puts scripts/ on the path, not the repository
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluate.errors import EvaluationInputError  # noqa: E402
from evaluate.font import text_size  # noqa: E402
from evaluate.outputs import check_output_file, write_atomic  # noqa: E402
from evaluate.png import encode_png  # noqa: E402
from scripts.raster_plot import BLACK, GREY, Axes, Canvas, nice_ticks  # noqa: E402
from scripts.run_status import DEFAULT_MARGIN, DIVERGED, STUCK, TRAINED  # noqa: E402

SEED_COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
                (140, 86, 75), (227, 119, 194), (23, 190, 207)]
SHAPE = {TRAINED: "o", STUCK: "s", DIVERGED: "x"}
PANEL_W, PANEL_H, PANELS_PER_ROW = 560, 400, 2
HEADER, FOOTER = 44, 64                         # FOOTER: a legend of two lines (it grows when it wraps)
LEGEND_PAD, LEGEND_LINE, LEGEND_GAP = 16, 24, 12  # legend margin (left, right, bottom), line height, gap
MARKER_SWATCH, LINE_SWATCH = 16, 30             # pixels from a legend entry's start to its label
LINE_STYLES = {"mean": (BLACK, 2.0, None), "threshold": (GREY, 1.0, (2, 4))}   # colour, width, dash
LEFT, RIGHT, TOP, BOTTOM = 78, 20, 64, 44      # plot box inside a panel
DIVERGED_BAND = 26                              # pixels above the plot box for diverged markers


def panel_key(row: dict) -> tuple:
    return (float(row["lr"]), str(row["loops"]))


def loops_order(loops: str) -> tuple:
    """A sort key for a loops value ("HxL") by its numbers: as text, 2x10 came before 2x4, so
    `--loops 4 10` drew (and OUT.md listed) L_cycles 10 first. Text that is not HxL goes last."""
    try:
        return (0, *(int(n) for n in str(loops).lower().split("x")))
    except ValueError:
        return (1, str(loops))


def panel_order(key: tuple) -> tuple:
    lr, loops = key
    return (lr, loops_order(loops))


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
        colour, width, dash = LINE_STYLES["threshold"]
        canvas.line(ax.left, ax.py(threshold), ax.right, ax.py(threshold), colour, width, dash=dash)

    means = []
    for p in ps:
        trained = [float(r["final_loss"]) for r in rows
                   if float(r["p"]) == p and r["status"] == TRAINED and _finite(r["final_loss"])]
        if trained:
            means.append((p, sum(trained) / len(trained)))
    colour, width, _ = LINE_STYLES["mean"]
    for (pa, ma), (pb, mb) in zip(means, means[1:]):
        canvas.line(ax.px(pa), ax.py(ma), ax.px(pb), ax.py(mb), colour, width)
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


def legend_groups(seeds: list, margin: float) -> list[list[tuple]]:
    """The legend's entries, (swatch, colour, label) with a swatch a marker shape or a LINE_STYLES
    name, in groups that each start a line: the statuses and lines, then the seeds."""
    statuses = [(SHAPE[s], GREY, label) for s, label in
                ((TRAINED, "trained"), (STUCK, "stuck (not below the floor)"), (DIVERGED, "diverged"))]
    statuses.append(("mean", None, "mean of trained seeds"))
    if margin:
        statuses.append(("threshold", None, f"floor - {100 * margin:g}%"))
    return [statuses, [("o", SEED_COLOURS[k % len(SEED_COLOURS)], f"seed {seed}") for k, seed in enumerate(seeds)]]


def entry_width(entry: tuple) -> int:
    swatch, _, label = entry
    return (LINE_SWATCH if swatch in LINE_STYLES else MARKER_SWATCH) + text_size(label, 2)[1]


def place_legend(groups: list[list[tuple]], width: int) -> list[tuple[int, int, tuple]]:
    """(x, line, entry) for every entry: left to right from the margin, each group on a new line, and
    a new line before an entry that would cross the right margin (one panel is too narrow for one
    line of statuses: the legend was cut off at the canvas edge)."""
    placed, line = [], -1
    for group in groups:
        line, x = line + 1, LEGEND_PAD
        for entry in group:
            w = entry_width(entry)
            if x > LEGEND_PAD and x + w > width - LEGEND_PAD:
                line, x = line + 1, LEGEND_PAD
            placed.append((x, line, entry))
            x += w + LEGEND_GAP
    return placed


def legend_height(placed: list[tuple[int, int, tuple]]) -> int:
    """The footer the placed legend needs: FOOTER for two lines, LEGEND_LINE more for each extra line."""
    lines = 1 + max((line for _, line, _ in placed), default=0)
    return FOOTER + (lines - 2) * LEGEND_LINE


def draw_legend(canvas: Canvas, placed: list[tuple[int, int, tuple]], top: int) -> None:
    for x, line, (swatch, colour, label) in placed:
        y = top + line * LEGEND_LINE
        if swatch in LINE_STYLES:
            colour, width, dash = LINE_STYLES[swatch]
            canvas.line(x, y + 5, x + 24, y + 5, colour, width, dash=dash)
            canvas.text(label, x + LINE_SWATCH, y, BLACK, 2)
        else:
            canvas.marker(x + 5, y + 5, swatch, colour, 5)
            canvas.text(label, x + MARKER_SWATCH, y, BLACK, 2)


def figure6_png(rows: list[dict], floor: float, path: Path, title: str, margin: float = 0.0) -> Path:
    """Write the sweep picture; rows are CSV rows (p, seed, lr, loops, status, final_loss, ...).
    margin > 0 adds a dotted line at floor * (1 - margin), the line a trained run ends below."""
    threshold = floor * (1 - margin)
    y_range = loss_range(rows, floor, threshold)
    keys = sorted({panel_key(r) for r in rows}, key=panel_order)
    seeds = sorted({r["seed"] for r in rows}, key=lambda s: int(s))
    columns = min(PANELS_PER_ROW, len(keys))
    panel_rows = -(-len(keys) // columns)
    placed = place_legend(legend_groups(seeds, margin), columns * PANEL_W)
    canvas = Canvas(HEADER + panel_rows * PANEL_H + legend_height(placed), columns * PANEL_W)
    canvas.text(title, canvas.width / 2, 14, BLACK, 2, "centre")
    for i, key in enumerate(keys):
        lr, loops = key
        panel = [r for r in rows if panel_key(r) == key]
        x0, y0 = (i % columns) * PANEL_W, HEADER + (i // columns) * PANEL_H
        draw_panel(canvas, x0, y0, panel, floor, threshold, seeds, f"lr {lr:g}   loops {loops} (h x l)", y_range)
    draw_legend(canvas, placed, HEADER + panel_rows * PANEL_H + 12)
    # whole or not at all (a full disk left half a PNG, or cut a re-plot's previous picture short)
    return write_atomic(Path(path), encode_png(canvas.pixels))


# ---------------------------------------------------------------------------- command line
NEEDED_COLUMNS = ("p", "seed", "lr", "loops", "status", "final_loss", "floor", "steps")


def read_sweep_csv(path: Path) -> list[dict]:
    """The rows of a p_sweep.py CSV, numbers as numbers; ValueError naming the file when it is not one."""
    try:
        # utf-8-sig: a CSV saved again by a spreadsheet starts with a byte-order mark, which glued
        # to the first column's name made it "\ufeffp" (refused as having no column p)
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            missing = [c for c in NEEDED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path}: not a p_sweep.py CSV (no column {', '.join(missing)})")
            rows = list(reader)
    except UnicodeDecodeError as e:   # a ValueError whose message would not name the file
        raise ValueError(f"{path}: not text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise ValueError(f"{path}: not a CSV file ({e})") from None
    if not rows:
        raise ValueError(f"{path}: no rows")
    for line, row in enumerate(rows, start=2):   # the header is line 1
        if None in row.values():    # a line cut short (a copy interrupted): its last columns are absent
            raise ValueError(f"{path}: row {line}: fewer fields than the header")
        try:
            row.update(p=float(row["p"]), seed=int(row["seed"]), lr=float(row["lr"]), steps=int(row["steps"]),
                       final_loss=float(row["final_loss"] or "nan"), floor=float(row["floor"]))
        except ValueError as e:
            raise ValueError(f"{path}: row {line}: {e}") from None
        # drawn at their loss: a NaN or infinite one has no pixel (the drawing failed with a traceback)
        if not math.isfinite(row["floor"]):
            raise ValueError(f"{path}: row {line}: a floor of {row['floor']:g}")
        if row["status"] in (TRAINED, STUCK) and not math.isfinite(row["final_loss"]):
            raise ValueError(f"{path}: row {line}: a {row['status']} run without a finite final_loss")
    return rows


def sweep_floor(rows: list[dict], path: Path) -> float:
    """The unigram floor of the sweep's build, one value in every row (rows of two builds do not mix)."""
    floors = sorted({row["floor"] for row in rows})
    if len(floors) != 1:
        raise ValueError(f"{path}: rows with different unigram floors ({', '.join(f'{f:g}' for f in floors)}): "
                         f"rows of different builds")
    return floors[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Re-plot a p sweep (the paper's Figure 6) from the CSV scripts/p_sweep.py "
                                             "wrote.")
    ap.add_argument("csv", type=Path, help="a p_sweep.py CSV, e.g. results/p_sweep_cpu.csv")
    ap.add_argument("--out", type=Path, help="the PNG to write (default: the CSV's name with .png)")
    ap.add_argument("--title", help="title line (default: the CSV's name, the steps and the seeds)")
    ap.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                    help=f"the sweep's --margin: a dotted line at floor * (1 - margin), 0 for none (default "
                         f"{DEFAULT_MARGIN}, p_sweep.py's default)")
    args = ap.parse_args(argv)
    if not 0 <= args.margin < 1:
        ap.error(f"--margin must be in [0, 1), got {args.margin:g}")
    out = args.out or args.csv.with_suffix(".png")
    if out.resolve() == args.csv.resolve():     # the picture would replace the only record of the sweep
        ap.error(f"--out {out} is the CSV itself; give the PNG another name")
    try:    # before the CSV is read: a folder or a file in the way is named, not met by open()
        check_output_file(out, "--out")
    except EvaluationInputError as e:
        ap.error(str(e))
    try:
        rows = read_sweep_csv(args.csv)
        floor = sweep_floor(rows, args.csv)
    except OSError as e:
        ap.error(f"{args.csv}: {e.strerror.lower()}")
    except ValueError as e:
        ap.error(str(e))
    seeds = sorted({row["seed"] for row in rows})
    title = args.title or (f"p sweep: {args.csv.name}, {max(row['steps'] for row in rows)} steps, "
                           f"seeds {' '.join(map(str, seeds))}")
    try:
        png = figure6_png(rows, floor, out, title, margin=args.margin)
    except EvaluationInputError as e:   # cannot write (a full disk): named, no traceback
        ap.error(str(e))
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
