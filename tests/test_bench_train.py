"""bench_train.py under a time limit: it times fewer steps rather than run into a caller's timeout
(scripts/gpu_check.sh sets one per phase), and says how many it timed."""
import json
import sys

import pytest
import torch

from hrm.distributed import DistInfo
from scripts.bench_train import MIN_TIMED_STEPS, bench

CPU = DistInfo(0, 1, 0, torch.device("cpu"))


def test_a_spent_time_limit_times_the_minimum_and_no_limit_times_all(tiny_build, capsys):
    # batches of 2: the steps' count is what is checked, not their speed
    short = bench("hrm_tiny", tiny_build, 2, 50, 1, False, CPU, 989.0, time_limit=1e-3)
    assert short["steps"] == MIN_TIMED_STEPS and short["tokens_per_s"] > 0
    assert short["dtype"] == "float32"   # as bench_model.py writes it (it was "torch.float32")
    full = bench("hrm_tiny", tiny_build, 2, 6, 1, False, CPU, 989.0)
    assert full["steps"] == 6
    # the compile wait is printed as soon as it is known, before the timed loop
    warm = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [w["stage"] for w in warm] == ["warmed up", "warmed up"] and warm[0]["first_step_s"] > 0


def test_a_data_folder_that_is_not_a_build_is_one_line(tmp_path, monkeypatch, capsys):
    # in this process (a traceback would fail the test here too): scripts/gpu_check.sh's rehearsal
    # runs bench_train.py's command line, on such a folder too (tests/test_gpu_check.py)
    from scripts import bench_train
    monkeypatch.setenv("WANDB_MODE", "disabled")     # what main() sets by default, undone after the test
    monkeypatch.setattr(sys, "argv", ["bench_train.py", "--data", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        bench_train.main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err, err
    assert f"error: --data {tmp_path}: {tmp_path / 'train'}: split directory not found" in err, err


def test_flops_per_token_by_hand():
    """hidden 64 (SwiGLU inner 256), one H and one L block, one cycle each, 4 positions, vocab 12."""
    from hrm.config import ArchConfig
    from hrm.flops import flops_per_token
    arch = dict(hidden_size=64, num_heads=2, expansion=4, H_layers=1, L_layers=1, H_cycles=1, L_cycles=1,
                puzzle_emb_ndim=0)
    # per position: qkv 2*64*192 + o 2*64*64 + gate|up 2*64*512 + down 2*256*64 + attention 4*4*64
    block = (24576 + 8192 + 65536 + 32768 + 1024) * 4            # one block visit, 4 positions
    first_only = 2 * 64 * 192 * 4 + 4 * 4 * 64 + 8192 + 65536 + 32768   # position 0 of the last block
    head = 3 * 2 * 64 * 12 * 4
    q_head = 2 * 64 * 2                                          # one row's (halt, continue), forward
    # one ACT step: the model computes no Q target (hrm.model), so no target-Q segment:
    # training segment (2 visits) + backward of the 2 gradient-visible visits + LM head + Q head x3
    assert flops_per_token(ArchConfig(**arch, halt_max_steps=1), 4, 12) == (
        2 * block + 4 * block + head + 3 * q_head) / 4
    # more steps: plus the target-Q segment, its first visit whole and its last for position 0 only,
    # and the Q head once more
    assert flops_per_token(ArchConfig(**arch, halt_max_steps=2), 4, 12) == (
        (3 * block + first_only) + 4 * block + head + 4 * q_head) / 4


@pytest.mark.parametrize("args, message", [(["--batch", "0"], "--batch must be at least 1, got 0"),
                                           (["--steps", "0"], "--steps must be at least 1"),
                                           (["--warmup", "-1"], "--warmup at least 0"),
                                           (["--peak-tflops", "0"], "--peak-tflops must be > 0, got 0\n"),
                                           (["--peak-tflops", "nan"], "--peak-tflops must be > 0, got nan\n"),
                                           (["--time-limit", "-5"], "--time-limit must be > 0, got -5\n")])
def test_bad_numbers_are_refused_before_any_work(args, message, monkeypatch, capsys):
    """--batch 0 ran the default batch (8) and said batch 8; --steps 0 printed a result of 0 tokens/s.
    Refused before the build is made or the device chosen."""
    from scripts import bench_train
    monkeypatch.setattr(bench_train, "small_build", lambda folder: pytest.fail("built before refusing"))
    monkeypatch.setattr(sys, "argv", ["bench_train.py", "--config", "hrm_tiny", *args])
    with pytest.raises(SystemExit) as exited:
        bench_train.main()
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and message in err and out == "", err


def test_a_bench_time_limit_that_is_no_number_is_one_line(monkeypatch, capsys):
    # read as --time-limit's default when the parser was built: a ValueError traceback, even for --help
    from scripts import bench_train
    monkeypatch.setenv("BENCH_TIME_LIMIT", "5m")
    monkeypatch.setattr(bench_train, "small_build", lambda folder: pytest.fail("built before refusing"))
    monkeypatch.setattr(sys, "argv", ["bench_train.py", "--config", "hrm_tiny"])
    with pytest.raises(SystemExit) as exited:
        bench_train.main()
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.splitlines()[-1] == "bench_train.py: error: $BENCH_TIME_LIMIT='5m' is not a number of seconds"


def test_device_cuda_without_cuda_is_one_line(monkeypatch, capsys):
    # init_distributed's RuntimeError ended the run in a traceback, exit 1
    from scripts import bench_train
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(bench_train, "small_build", lambda folder: pytest.fail("built before refusing"))
    monkeypatch.setattr(sys, "argv", ["bench_train.py", "--device", "cuda"])
    with pytest.raises(SystemExit) as exited:
        bench_train.main()
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == "", err
    assert err.splitlines()[-1] == ("bench_train.py: error: --device cuda: CUDA is not available on this machine "
                                    "(--device cpu or auto)")


def test_both_benchmarks_report_mfu_on_cuda_against_the_given_peak(monkeypatch, capsys):
    """bench_model.py printed no MFU or peak memory on CUDA (bench_train.py did): gpu_check's model
    phase had none. Both use one formula: FLOPs/token x tokens/s over the peak."""
    import torch

    from hrm.flops import cuda_figures
    from scripts import bench_model
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 3 * 2**30)
    # 500 MFLOP/token at 200k tokens/s = 100 TFLOP/s: 0.1011 of the H200's 989, 0.5 of 200
    assert cuda_figures(5e8, 2e5, 989.0) == {"mfu": 0.1011, "peak_memory_gib": 3.0}
    assert cuda_figures(5e8, 2e5, 200.0)["mfu"] == 0.5
    monkeypatch.setattr(sys, "argv", ["bench_model.py", "--peak-tflops", "0"])
    with pytest.raises(SystemExit) as exited:
        bench_model.main()
    assert exited.value.code == 2 and "--peak-tflops must be > 0, got 0.0" in capsys.readouterr().err

