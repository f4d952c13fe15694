"""sweep_plot.py: the legend fits the picture, and the command line re-plots a p sweep's CSV."""
from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evaluate.png import read_png
from scripts import sweep_plot
from scripts.sweep_plot import (FOOTER, HEADER, LEGEND_PAD, PANEL_H, PANEL_W, SEED_COLOURS, entry_width, figure6_png,
                                legend_groups, place_legend)

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results" / "p_sweep_cpu.csv"   # 2 panels (lr 1e-3, 1e-2), p 0.3 ... 0.6, seeds 0 1


def one_panel_rows(seeds=(0, 1, 2)) -> list[dict]:
    rows = []
    for p in (0.3, 0.6):
        for k, seed in enumerate(seeds):
            status = ("trained", "stuck", "diverged")[k % 3]
            rows.append(dict(p=p, seed=seed, lr=1e-2, loops="2x4", status=status,
                             final_loss=math.nan if status == "diverged" else 1.3 + 0.2 * k))
    return rows


def test_the_legend_of_one_panel_fits_inside_the_picture(tmp_path):
    # p_sweep.py's own call: one (lr, loops) panel, 560 pixels wide, the dotted floor - 5% line on
    pixels = read_png(figure6_png(one_panel_rows(), 1.56, tmp_path / "one.png", "one panel", margin=0.05))
    assert pixels.shape[1] == PANEL_W
    footer = pixels[HEADER + PANEL_H:]
    assert (footer[:, -LEGEND_PAD // 2:] == 255).all(), "a legend label runs into the right edge"
    assert (footer[-4:] == 255).all(), "the legend runs into the bottom edge"
    colours = {tuple(c) for c in footer.reshape(-1, 3)}
    assert all(tuple(SEED_COLOURS[k]) in colours for k in range(3))   # the seed line is drawn


@pytest.mark.parametrize("width", [PANEL_W, 2 * PANEL_W])
@pytest.mark.parametrize("seeds", [[0], list(range(12))])
def test_placed_legend_entries_stay_within_the_margins(width, seeds):
    placed = place_legend(legend_groups(seeds, 0.05), width)
    assert len(placed) == 5 + len(seeds)
    for x, _, entry in placed:
        assert LEGEND_PAD <= x and x + entry_width(entry) <= width - LEGEND_PAD, entry
    lines = [line for _, line, _ in placed]
    assert lines == sorted(lines)
    seed_lines = {line for _, line, (_, _, label) in placed if label.startswith("seed")}
    assert min(seed_lines) > max(line for _, line, (_, _, label) in placed if not label.startswith("seed"))


def test_two_panels_keep_a_two_line_legend(tmp_path):
    rows = one_panel_rows() + [dict(r, lr=1e-3) for r in one_panel_rows()]
    pixels = read_png(figure6_png(rows, 1.56, tmp_path / "two.png", "two panels", margin=0.05))
    assert pixels.shape == (HEADER + PANEL_H + FOOTER, 2 * PANEL_W, 3)


def run_script(*args: str) -> subprocess.CompletedProcess:
    """`python scripts/sweep_plot.py ...` from the repository root, as a user types it (the package
    import path not set up by anyone)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "scripts/sweep_plot.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)


def test_the_script_replots_a_committed_csv(tmp_path):
    out = tmp_path / "replot.png"
    done = run_script(str(COMMITTED.relative_to(ROOT)), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    pixels = read_png(out)
    assert pixels.shape == (HEADER + PANEL_H + FOOTER, 2 * PANEL_W, 3)
    # the same picture as drawing the CSV's rows in this process, with the default title
    rows = sweep_plot.read_sweep_csv(COMMITTED)
    expected = figure6_png(rows, sweep_plot.sweep_floor(rows, COMMITTED), tmp_path / "direct.png",
                           "p sweep: p_sweep_cpu.csv, 100 steps, seeds 0 1", margin=0.05)
    np.testing.assert_array_equal(pixels, read_png(expected))
    # with the sweep's own title (docs/experiments.md), the committed picture, byte for byte
    titled = tmp_path / "titled.png"
    assert run_script(str(COMMITTED.relative_to(ROOT)), "--out", str(titled),
                      "--title", "p sweep: hrm_tiny, 100 steps, seeds 0 1").returncode == 0
    assert titled.read_bytes() == COMMITTED.with_suffix(".png").read_bytes()


def test_read_sweep_csv_gives_numbers():
    rows = sweep_plot.read_sweep_csv(COMMITTED)
    assert len(rows) == 16 and rows[0]["p"] == 0.3 and rows[0]["seed"] == 0 and rows[0]["lr"] == 1e-3
    assert rows[0]["loops"] == "2x2" and rows[0]["status"] == "trained" and isinstance(rows[0]["final_loss"], float)
    assert sweep_plot.sweep_floor(rows, COMMITTED) == pytest.approx(1.56469)


def test_a_csv_saved_by_a_spreadsheet_with_a_byte_order_mark_is_read(tmp_path):
    """A sweep CSV saved again from a spreadsheet as UTF-8 starts with a BOM: it was refused, "no
    column p", the BOM glued to the first column's name."""
    path = tmp_path / "saved.csv"
    path.write_bytes(b"\xef\xbb\xbfp,seed,lr,loops,status,final_loss,floor,steps\r\n0.3,0,0.001,2x2,trained,1.2,1.5,9\r\n")
    assert [(r["p"], r["seed"], r["final_loss"]) for r in sweep_plot.read_sweep_csv(path)] == [(0.3, 0, 1.2)]


def test_the_default_output_is_the_csv_beside_its_png(tmp_path):
    csv_path = tmp_path / "mine.csv"
    csv_path.write_text(COMMITTED.read_text())
    assert sweep_plot.main([str(csv_path)]) == 0
    assert read_png(tmp_path / "mine.png").shape[1] == 2 * PANEL_W


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("case, message", [
    ("absent", "absent.csv"),
    ("no_floor", "not a p_sweep.py CSV (no column floor)"),
    ("empty", "no rows"),
    ("two_floors", "different unigram floors (1.5, 1.6)"),
    ("bad_number", "row 3"),
])
def test_the_script_names_what_is_wrong_with_its_csv(tmp_path, case, message):
    columns = ["p", "seed", "lr", "loops", "status", "final_loss", "floor", "steps"]
    row = dict(p="0.3", seed="0", lr="0.001", loops="2x2", status="trained", final_loss="1.2", floor="1.5", steps="9")
    path = tmp_path / f"{case}.csv"
    if case == "no_floor":
        _write_csv(path, [{k: v for k, v in row.items() if k != "floor"}], [c for c in columns if c != "floor"])
    elif case == "empty":
        _write_csv(path, [], columns)
    elif case == "two_floors":
        _write_csv(path, [row, dict(row, seed="1", floor="1.6")], columns)
    elif case == "bad_number":
        _write_csv(path, [row, dict(row, seed="one")], columns)
    done = run_script(str(path), "--out", str(tmp_path / "x.png"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "x.png").exists()


def test_the_script_refuses_a_margin_out_of_range(tmp_path):
    done = run_script(str(COMMITTED), "--margin", "1.5", "--out", str(tmp_path / "x.png"))
    assert done.returncode == 2 and "--margin must be in [0, 1)" in done.stderr


def test_an_out_that_is_the_csv_itself_is_refused_and_the_csv_kept(tmp_path, capsys):
    """`sweep_plot.py x.csv --out x.csv` wrote the PNG over the sweep's only record."""
    csv = tmp_path / "sweep.csv"
    csv.write_bytes(COMMITTED.read_bytes())
    with pytest.raises(SystemExit) as e:
        sweep_plot.main([str(csv), "--out", str(tmp_path / "." / "sweep.csv")])
    assert e.value.code == 2 and "is the CSV itself" in capsys.readouterr().err
    assert csv.read_bytes() == COMMITTED.read_bytes()


@pytest.mark.parametrize("where", ["folder", "under_a_file"])
def test_an_out_that_cannot_be_written_is_named_without_a_traceback(tmp_path, capsys, where):
    (tmp_path / "a_file").write_text("not a folder")
    out = tmp_path if where == "folder" else tmp_path / "a_file" / "x.png"
    with pytest.raises(SystemExit) as e:
        sweep_plot.main([str(COMMITTED), "--out", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and ("is a directory" if where == "folder" else "is in its path") in err, err


@pytest.mark.parametrize("case, message", [
    ("binary", "not text"),
    ("cut_short", "row 3: fewer fields than the header"),
    ("trained_without_loss", "row 2: a trained run without a finite final_loss"),
    ("stuck_at_inf", "row 2: a stuck run without a finite final_loss"),
    ("nan_floor", "row 2: a floor of nan"),
])
def test_a_damaged_csv_is_one_line_naming_the_file_and_row(tmp_path, case, message):
    """A CSV cut short, not text, or with a loss the picture cannot place: one line naming the file
    (these ended in a traceback from the drawing, or an error that did not say which file)."""
    header = "p,seed,lr,loops,status,final_loss,floor,steps\n"
    good = "0.3,0,0.001,2x2,trained,1.2,1.5,9\n"
    path = tmp_path / f"{case}.csv"
    if case == "binary":
        path.write_bytes(b"\x80\x81\xff\n")
    else:
        path.write_text(header + {"cut_short": good + "0.3,1,0.001,2x",
                                  "trained_without_loss": "0.3,0,0.001,2x2,trained,,1.5,9\n",
                                  "stuck_at_inf": "0.3,0,0.001,2x2,stuck,inf,1.5,9\n",
                                  "nan_floor": "0.3,0,0.001,2x2,trained,1.2,nan,9\n"}[case])
    done = run_script(str(path), "--out", str(tmp_path / "x.png"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{path}: {message}" in done.stderr, done.stderr
    assert not (tmp_path / "x.png").exists()


def test_a_picture_that_cannot_be_written_whole_leaves_the_previous_one(tmp_path):
    """A full disk (here a file-size limit) while writing the PNG: one line naming it, and the
    previous picture as it was, not half of the new one."""
    out = tmp_path / "plot.png"
    out.write_bytes(b"the previous picture")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def limit_file_size():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))   # Python ignores SIGXFSZ: EFBIG
    done = subprocess.run([sys.executable, "scripts/sweep_plot.py", str(COMMITTED), "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, preexec_fn=limit_file_size)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot write {out}" in done.stderr
    assert out.read_bytes() == b"the previous picture"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]    # no temporary file left


def test_panels_go_by_the_numbers_of_their_loops_not_their_text(tmp_path, monkeypatch):
    """`--loops 4 10`: as text "2x10" sorted before "2x4", so the L_cycles 10 panel came first."""
    titles = []
    monkeypatch.setattr(sweep_plot, "draw_panel", lambda canvas, x0, y0, rows, *rest: titles.append((x0, y0, rest[-2])))
    rows = [dict(row, loops=loops) for loops in ("2x10", "2x4", "10x4") for row in one_panel_rows(seeds=(0,))]
    figure6_png(rows, 1.56, tmp_path / "loops.png", "loops")
    assert [title for _, _, title in sorted(titles, key=lambda t: (t[1], t[0]))] == [
        "lr 0.01   loops 2x4 (h x l)", "lr 0.01   loops 2x10 (h x l)", "lr 0.01   loops 10x4 (h x l)"]
