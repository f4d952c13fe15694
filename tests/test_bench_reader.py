"""bench_reader.py: one JSON line per world size and one for the evaluation pass, with the rows a
rank really gets (its share of the global batch) and the whole test split read once."""
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT


def test_bench_reader_reports_each_ranks_share_and_a_full_eval_pass(small_build):
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_reader.py"), "--data", str(small_build),
                          "--batch", "8", "--world", "1", "4", "--seconds", "0.2", "--epochs-per-iteration", "1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    train, evals = lines[:2], lines[2]
    assert [(t["world_size"], t["rank"], t["rows_per_batch"]) for t in train] == [(1, 0, 8), (4, 3, 2)]
    assert all(t["batches_per_s"] > 0 and t["rows_per_s"] > 0 for t in train)
    test_rows = len(np.load(small_build / "test" / "all__inputs.npy"))
    # rank 0 of 4 gets a quarter of every padded global batch of 8
    assert evals["reader"] == "eval" and evals["rows"] == 2 * evals["batches"] == 2 * -(-test_rows // 8)


def test_bad_sizes_are_one_line_not_a_traceback(small_build, monkeypatch, capsys):
    """Sizes the reader refuses, and a batch bigger than an iteration of a small build (the reader
    drops a partial last batch, so the first next() raised StopIteration): one line (argparse's
    error), exit 2. In-process: four interpreters starting torch took 10 s."""
    from scripts import bench_reader
    for args, message in ((["--batch", "0"], "must be at least 1"), (["--world", "0"], "must be at least 1"),
                          (["--epochs-per-iteration", "0"], "must be at least 1"),
                          (["--batch", "100000", "--world", "1", "--epochs-per-iteration", "1"],
                           "holds fewer rows than one global batch of 100000"),
                          # timed nothing and reported "batches_per_s": 0.0
                          (["--seconds", "-1"], "--seconds must be more than 0, got -1.0"),
                          (["--seconds", "nan"], "--seconds must be more than 0, got nan")):
        monkeypatch.setattr(sys, "argv", ["bench_reader.py", "--data", str(small_build), "--seconds", "0.1", *args])
        with pytest.raises(SystemExit) as exited:
            bench_reader.main()
        out, err = capsys.readouterr()
        assert exited.value.code == 2 and message in err and out == "", (args, err)
