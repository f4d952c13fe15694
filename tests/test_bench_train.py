"""bench_train.py under a time limit: it times fewer steps rather than run into a caller's timeout
(scripts/gpu_check.sh sets one per phase), and says how many it timed."""
import json
import subprocess
import sys

import torch

from conftest import ROOT
from hrm.distributed import DistInfo
from scripts.bench_train import MIN_TIMED_STEPS, bench

CPU = DistInfo(0, 1, 0, torch.device("cpu"))


def test_a_spent_time_limit_times_the_minimum_and_no_limit_times_all(small_build, capsys):
    short = bench("hrm_tiny", small_build, 4, 50, 1, False, CPU, 989.0, time_limit=1e-3)
    assert short["steps"] == MIN_TIMED_STEPS and short["tokens_per_s"] > 0
    full = bench("hrm_tiny", small_build, 4, 6, 1, False, CPU, 989.0)
    assert full["steps"] == 6
    # the compile wait is printed as soon as it is known, before the timed loop
    warm = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [w["stage"] for w in warm] == ["warmed up", "warmed up"] and warm[0]["first_step_s"] > 0


def test_a_data_folder_that_is_not_a_build_is_one_line(tmp_path):
    ran = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_train.py"), "--data", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert f"error: --data {tmp_path}: {tmp_path / 'train'}: split directory not found" in ran.stderr, ran.stderr
