"""scripts/bench_vote.py: its generated inputs, on a few hand-made tasks (the timing itself needs the
400 ARC-AGI-1 evaluation tasks), and the options checked before any work."""
import json
import subprocess
import sys

from conftest import ROOT
from scripts.bench_vote import generate


def write_tasks(folder, count=3):
    folder.mkdir()
    for k in range(count):
        pair = {"input": [[k % 9 + 1, 0], [0, 2]], "output": [[2, 0], [0, k % 9 + 1]]}
        (folder / f"task{k}.json").write_text(json.dumps({"train": [pair], "test": [pair]}))
    return folder


def test_a_reused_out_folder_keeps_no_prediction_files_of_an_earlier_run(tmp_path):
    """--out DIR run with --ranks 2, then --ranks 1: the second run's rank_1.npz was the first's, and
    vote.py refused the folder (info.json says world_size 1 but the folder holds 2 .npz files)."""
    tasks, out = write_tasks(tmp_path / "arc"), tmp_path / "out"
    generate(tasks, out, rows=30, ranks=2, compressed=False, seed=0)
    generate(tasks, out, rows=30, ranks=1, compressed=False, seed=1)
    assert sorted(p.name for p in (out / "predictions").glob("*.npz")) == ["rank_0.npz"]


def test_fewer_rows_than_the_original_test_inputs_keep_the_originals(tmp_path):
    """--rows below the tasks' own test inputs: the augmentations all dropped, the originals kept (the
    generator popped from an empty list)."""
    tasks, out = write_tasks(tmp_path / "arc"), tmp_path / "out"
    generate(tasks, out, rows=1, ranks=1, compressed=False, seed=0)
    assert json.loads((out / "expected.json").read_text())["rows"] == 3


def test_no_timed_run_is_refused_before_any_work(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_vote.py"), "--arc-dir",
                          str(write_tasks(tmp_path / "arc")), "--runs", "0", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "--runs must be at least 1, got 385812, 1 and 0" in run.stderr, run.stderr
    assert not (tmp_path / "out").exists()
