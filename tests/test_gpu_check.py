"""scripts/gpu_check.sh, rehearsed on the CPU (REHEARSE=1): every phase's command line runs, the
smoke run trains, resumes and votes, and the summary names failures. A GPU lease is short and
one-shot; this is what keeps the script from wasting it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT


def run_check(tmp_path, data, **env):
    out = tmp_path / "out"
    out.mkdir(parents=True)
    full_env = {**os.environ, "REHEARSE": "1", "PYTHON": sys.executable, "DATA": str(data), "STEPS": "1",
                "BATCH": "4", "OUT": str(out), "RUN": str(tmp_path / "run"), **env}
    if "WHEELS" not in env:
        full_env.pop("WHEELS", None)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], env=full_env, capture_output=True,
                          text=True, timeout=600)
    records = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return proc, records, (out / "gpu_check.log").read_text()


def test_full_rehearsal_runs_every_phase(small_build, tmp_path):
    # A broken adam-atan2 archive and an nvcc that fails: the background build fails, is reported,
    # and the fused test skips; nothing else is disturbed. (The trainer's wheels are installed here.)
    wheels, bin_dir = tmp_path / "wheels", tmp_path / "bin"
    wheels.mkdir()
    bin_dir.mkdir()
    (wheels / "adam_atan2-0.0.3.tar.gz").write_bytes(b"not an archive")
    (bin_dir / "nvcc").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "nvcc").chmod(0o755)
    proc, records, log = run_check(tmp_path, small_build, FULL="1", WHEELS=str(wheels),
                                   PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    build = [r for r in records if "adam_atan2_build" in r or "adam_atan2_build_rc" in r]
    assert build[0]["adam_atan2_build"] == "started" and build[1]["adam_atan2_build_rc"] != 0
    phases = [r["phase"] for r in records if "phase" in r and "elapsed_s" in r]
    assert phases == ["bench_model hrm_v1", "gpu tests", "bench_train hrm_v1", "fused AdamATan2 test",
                      "pretrain smoke", "pretrain resume", "vote", "bench_train hrm_deeploop", "done"]
    assert records[-1]["failed"] == []
    benches = [r for r in records if "tokens_per_s" in r]
    assert [b["config"] for b in benches] == ["cpu-bench", "hrm_tiny", "hrm_tiny"]
    assert all(b["tokens_per_s"] > 0 for b in benches)
    assert "resumed from" in proc.stdout
    assert "task (paper)" in proc.stdout              # vote's pass@K table
    assert (tmp_path / "run" / "latest").read_text().strip() == "step_3"
    run_log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in run_log if "alignment/mean" in r] == [3]   # diagnostics ran once, resumed
    assert log == proc.stdout                         # the copy that comes back from a device run


def test_a_failing_phase_is_reported_and_the_rest_still_run(small_build, tmp_path):
    # A data folder without a test split: the trainer-based phases fail, one after the other.
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("identifiers.json", "manifest.json"):
        (broken / name).write_bytes((small_build / name).read_bytes())
    (broken / "train").symlink_to(small_build / "train")
    proc, records, _ = run_check(tmp_path, broken, ONLY="v1 smoke deeploop")
    assert proc.returncode == 1
    started = [r["phase"] for r in records if "elapsed_s" in r]
    assert started == ["bench_train hrm_v1", "pretrain smoke", "pretrain resume", "vote",
                       "bench_train hrm_deeploop", "done"]
    assert records[-1]["failed"] == started[:-1]


def test_a_spent_budget_skips_phases_and_names_them(small_build, tmp_path):
    # what is skipped is what would run: by default the two training benchmarks (both of which
    # test_full_rehearsal_runs_every_phase runs), with FULL=1 every phase
    for full, skipped in (("", "v1 deeploop"), ("1", "model tests v1 adam smoke deeploop")):
        proc, records, _ = run_check(tmp_path / f"full{full}", small_build, BUDGET="1", FULL=full)
        assert proc.returncode == 0
        assert [r["phase"] for r in records if "elapsed_s" in r] == ["done"]
        assert records[-1]["skipped_for_budget"] == skipped
