"""p_sweep.py: the grid and its commands, resume bookkeeping, the Figure-6 PNG, and a real 2-cell sweep."""
from __future__ import annotations

import argparse
import csv
import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from evaluate.png import decode_png, read_png
from scripts import p_sweep
from scripts.p_sweep import CSV_COLUMNS, Cell, command_signature, make_grid, parse_loops
from scripts.run_status import unigram_floor
from scripts.sweep_plot import HEADER, FOOTER, PANEL_H, PANEL_W, SEED_COLOURS, figure6_png

# a micro model (as tests/conftest.py's MICRO_ARCH) so a run costs seconds
MICRO = ["arch.hidden_size=32", "arch.puzzle_emb_ndim=32", "arch.expansion=2", "arch.halt_max_steps=2"]


def test_parse_loops():
    assert parse_loops("4", default_h_cycles=2) == (2, 4)
    assert parse_loops("3x4", default_h_cycles=2) == (3, 4)
    assert parse_loops("3X1", default_h_cycles=2) == (3, 1)
    for bad in ("0", "x4", "2x", "2x3x4", "four", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_loops(bad, default_h_cycles=2)


def test_grid_is_every_combination_once():
    cells = make_grid([0.3, 0.35], [0, 1, 2], [1e-3, 3e-3], [(2, 2), (2, 4)])
    assert len(cells) == 2 * 3 * 2 * 2 == len(set(cells)) == len({c.folder for c in cells})
    assert cells[0] == Cell(0.3, 0, 1e-3, 2, 2) and cells[0].folder == "lr0.001_loops2x2/p0.300_seed0"
    assert Cell(0.55, 1, 0.003, 3, 4).loops == "3x4"


def test_default_grid_and_cpu_preset():
    args = p_sweep.parse_args([])
    assert args.p == [0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60] and args.loop_pairs == [(2, 2)]
    args = p_sweep.parse_args(["--preset", "cpu", "--steps", "7", "--loops", "4", "3x3"])
    assert (args.p, args.seeds, args.jobs, args.steps) == ([0.30, 0.40, 0.50, 0.60], [0, 1], 2, 7)
    assert args.loop_pairs == [(2, 4), (3, 3)] and args.threads >= 1


def test_gpus_default_to_the_visible_ones_and_set_the_job_count(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")   # a child's names for them are 3 and 5, not 0 and 1
    args = p_sweep.parse_args([])
    assert (args.gpus, args.jobs) == (["3", "5"], 2)
    assert p_sweep.parse_args(["--jobs", "3"]).gpus == ["3", "5"]
    assert (p_sweep.parse_args(["--gpus", "none"]).gpus, p_sweep.parse_args(["--gpus", "none"]).jobs) == ([], 1)
    assert p_sweep.parse_args(["--gpus", "7"]).jobs == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert (p_sweep.parse_args([]).gpus, p_sweep.parse_args([]).jobs) == ([], 1)


def test_run_logged_passes_extra_variables_to_the_child(tmp_path):
    from scripts.experiment_tools import PYTHON, run_logged
    cmd = [PYTHON, "-c", "import os; print('gpu', os.environ['CUDA_VISIBLE_DEVICES'], os.environ['OMP_NUM_THREADS'])"]
    run_logged(cmd, tmp_path / "log", step="env", threads=3, env={"CUDA_VISIBLE_DEVICES": "6"})
    assert "gpu 6 3" in (tmp_path / "log").read_text()


def test_each_cell_trains_with_its_own_p_seed_lr_and_loops(tmp_path):
    args = p_sweep.parse_args(["--steps", "50", "--set", "arch.hidden_size=32"])
    cmd = p_sweep.train_command(Cell(0.35, 2, 3e-3, 3, 4), args, tmp_path / "build", tmp_path / "run")
    for expected in ("arch=hrm_tiny", "arch.scaling.rule=custom", "arch.scaling.p=0.35", "seed=2", "lr=0.003",
                     "arch.H_cycles=3", "arch.L_cycles=4", "max_steps=50", "arch.hidden_size=32",
                     f"checkpoint_path={tmp_path / 'run'}"):
        assert expected in cmd, expected
    # the signature that decides "same run" ignores where the build and the run folder live
    elsewhere = p_sweep.train_command(Cell(0.35, 2, 3e-3, 3, 4), args, Path("/x/build"), Path("/x/run"))
    assert command_signature(cmd) == command_signature(elsewhere)
    other = p_sweep.train_command(Cell(0.4, 2, 3e-3, 3, 4), args, tmp_path / "build", tmp_path / "run")
    assert command_signature(cmd) != command_signature(other)


def _fake_cell(work: Path, cell: Cell, args, build: Path, digest: str, exit_code: int, losses: list[float]):
    run_dir = work / cell.folder / "run"
    run_dir.mkdir(parents=True)
    lines = [{"step": 0, "scaling/L/alpha": 2.0, "scaling/L/beta": 0.5}]
    lines += [{"step": i + 1, "train/lm_loss": x if math.isfinite(x) else str(x)} for i, x in enumerate(losses)]
    (run_dir / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    signature = command_signature(p_sweep.train_command(cell, args, build, run_dir))
    (work / cell.folder / "cell.json").write_text(json.dumps(
        {"signature": signature, "digest": digest, "exit_code": exit_code, "seconds": 1.0}))


def test_resume_keeps_results_and_reruns_errors_and_changed_cells(tmp_path):
    args = p_sweep.parse_args(["--steps", "30"])
    build, work, digest = tmp_path / "build", tmp_path / "work", "d" * 64
    trained, stuck, diverged, crashed, absent, other_build = make_grid([0.3, 0.4, 0.5, 0.6, 0.7, 0.8], [0], [1e-3], [(2, 2)])
    _fake_cell(work, trained, args, build, digest, 0, [1.0] * 30)
    _fake_cell(work, stuck, args, build, digest, 0, [2.0] * 30)
    _fake_cell(work, diverged, args, build, digest, 3, [2.0] * 5)
    _fake_cell(work, crashed, args, build, digest, 1, [2.0] * 5)
    _fake_cell(work, other_build, args, build, "e" * 64, 0, [1.0] * 30)
    cells = [trained, stuck, diverged, crashed, absent, other_build]
    records, todo = p_sweep.split_finished(cells, args, build, digest, work, floor=1.5)
    assert set(records) == {trained, stuck, diverged}
    assert todo == [crashed, absent, other_build]
    changed = p_sweep.parse_args(["--steps", "31"])   # another command: nothing is reused
    records, todo = p_sweep.split_finished(cells, changed, build, digest, work, floor=1.5)
    assert not records and todo == cells


def test_figure6_png_has_one_panel_per_lr_and_loops(tmp_path):
    rows = []
    for lr in (1e-3, 1e-2):
        for p in (0.3, 0.5):
            rows.append(dict(p=p, seed=0, lr=lr, loops="2x2", status="trained", final_loss=1.0 + p))
            rows.append(dict(p=p, seed=1, lr=lr, loops="2x2", status="stuck" if p == 0.3 else "trained",
                             final_loss=1.6))
            rows.append(dict(p=p, seed=2, lr=lr, loops="2x2", status="diverged", final_loss=math.nan))
    path = figure6_png(rows, 1.55, tmp_path / "fig.png", "test")
    pixels = read_png(path)
    assert pixels.shape == (HEADER + PANEL_H + FOOTER, 2 * PANEL_W, 3)
    colours = {tuple(c) for c in pixels.reshape(-1, 3)}
    assert all(tuple(SEED_COLOURS[k]) in colours for k in range(3))   # every seed is drawn


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, read by hand."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_two_cell_sweep_writes_csv_png_and_markdown_and_resumes(small_build, tmp_path, capsys):
    out = tmp_path / "results" / "sweep"
    # Two GPU names: CPU torch ignores CUDA_VISIBLE_DEVICES, so the runs train here all the same.
    argv = ["--data", str(small_build), "--p", "0.3", "0.5", "--seeds", "0", "--steps", "3", "--jobs", "2",
            "--gpus", "5", "7", "--window", "2", "--work", str(tmp_path / "work"), "--out", str(out), "--set", *MICRO]
    assert p_sweep.main(argv) == 0
    cells = [json.loads(p.read_text()) for p in sorted((tmp_path / "work").rglob("cell.json"))]
    assert sorted(c["gpu"] for c in cells) == ["5", "7"]   # the two runs at once, one per GPU
    with open(out.with_suffix(".csv"), newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == CSV_COLUMNS
    floor, _ = unigram_floor(small_build)
    assert [(float(r["p"]), int(r["seed"]), r["loops"]) for r in rows] == [(0.3, 0, "2x2"), (0.5, 0, "2x2")]
    for r in rows:
        assert r["status"] in ("trained", "stuck") and int(r["steps"]) == 3 and r["exit_code"] == "0"
        assert float(r["floor"]) == pytest.approx(floor, rel=1e-5)
        assert math.isfinite(float(r["final_loss"])) and float(r["min_loss"]) <= float(r["final_loss"]) + 1e-6
    assert float(rows[0]["alpha"]) == pytest.approx(6 ** 0.3, rel=1e-5)   # N = 3 for 1+1 layers, C_L = 2
    assert float(rows[1]["beta"]) == pytest.approx(24 ** -0.5, rel=1e-5)
    data = out.with_suffix(".png").read_bytes()
    assert png_size(data) == (PANEL_W, HEADER + PANEL_H + FOOTER)
    assert decode_png(data).shape == (HEADER + PANEL_H + FOOTER, PANEL_W, 3)
    md = out.with_suffix(".md").read_text()
    assert "digest `" in md and "p_sweep.py --data" in md and "| 0.3 | 0 |" in md

    logs = sorted((tmp_path / "work").rglob("train.log"))
    stamps = [p.stat().st_mtime_ns for p in logs]
    capsys.readouterr()
    assert p_sweep.main(argv) == 0                       # everything finished: nothing is trained again
    assert "2 finished cell(s) kept, 0 to run" in capsys.readouterr().out
    assert [p.stat().st_mtime_ns for p in logs] == stamps
    np.testing.assert_array_equal(read_png(out.with_suffix(".png")), decode_png(data))
