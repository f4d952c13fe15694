"""bench_train.py under a time limit: it times fewer steps rather than run into a caller's timeout
(scripts/gpu_check.sh sets one per phase), and says how many it timed."""
import json

import torch

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
