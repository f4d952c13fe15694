"""scripts/gpu_check.sh, rehearsed on the CPU (REHEARSE=1): every phase's command line runs, the
smoke run trains, resumes and votes, and the summary names failures. A GPU lease is short and
one-shot; this is what keeps the script from wasting it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, together


@pytest.fixture
def rehearse_build(tiny_build):
    """A build of the settings REHEARSE=1 makes (2 tasks, 2 augmentations): the only one it reuses."""
    return tiny_build


def run_check(tmp_path, data, **env):
    out = tmp_path / "out"
    out.mkdir(parents=True)
    full_env = {**os.environ, "REHEARSE": "1", "PYTHON": sys.executable, "DATA": str(data), "STEPS": "1",
                "BATCH": "2", "OUT": str(out), "RUN": str(tmp_path / "run"), **env}
    for key in ("WHEELS", "FULL", "ONLY", "BUDGET", "SITE"):   # the script's own settings: a caller's export
        if key not in env:                                     # would change what a test checks
            full_env.pop(key, None)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], env=full_env, capture_output=True,
                          text=True, timeout=600)
    records = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return proc, records, (out / "gpu_check.log").read_text()


def fake_adam_build(tmp_path) -> dict:
    """A broken adam-atan2 archive in $WHEELS and an nvcc that fails: what starts the background build."""
    wheels, bin_dir = tmp_path / "wheels", tmp_path / "bin"
    wheels.mkdir()
    bin_dir.mkdir()
    (wheels / "adam_atan2-0.0.3.tar.gz").write_bytes(b"not an archive")
    (bin_dir / "nvcc").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "nvcc").chmod(0o755)
    return dict(WHEELS=str(wheels), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_full_rehearsal_runs_every_phase(rehearse_build, tmp_path):
    # FULL=1's phases, in two runs at once (ONLY=; one per core of the 2-core machines this suite
    # targets, each run's phases being one after the other): every phase's command line runs, and
    # test_a_spent_budget_skips_phases_and_names_them shows one FULL=1 run reaching them all in this
    # order. The background build of the fused optimizer fails, is reported, and the fused test
    # skips; nothing else is disturbed. (The trainer's wheels are installed here.) The first run is
    # given no build: it makes its own 2-task one, as on a GPU machine without data/gpu-check; the
    # second, the longer, reuses one made with the same settings (a build process fewer).
    first, second = tmp_path / "first", tmp_path / "second"
    (proc, records, log), (proc2, records2, log2) = together(
        lambda: run_check(first, first / "data", ONLY="model tests v1 adam", **fake_adam_build(tmp_path)),
        lambda: run_check(second, rehearse_build, ONLY="smoke deeploop torchrun"))
    for p in (proc, proc2):
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert json.loads((first / "data" / "manifest.json").read_text())["settings"]["limit_tasks"] == 2
    build = [r for r in records if "adam_atan2_build" in r or "adam_atan2_build_rc" in r]
    assert build[0]["adam_atan2_build"] == "started" and build[1]["adam_atan2_build_rc"] != 0
    phases = [r["phase"] for r in records + records2 if "phase" in r and "elapsed_s" in r]
    # the short check's benchmarks first: a budget that runs out on a one-shot lease skips the extras
    assert phases == ["bench_train hrm_v1", "bench_model hrm_v1", "gpu tests", "fused AdamATan2 test", "done",
                      "bench_train hrm_deeploop", "pretrain smoke", "pretrain resume", "vote", "done"]
    assert records[-1]["failed"] == records2[-1]["failed"] == []
    # skipped for the rehearsal itself, not for a GPU count it never looked at
    assert {"phase": "torchrun 2 processes", "skipped": "a rehearsal runs no NCCL (it needs one GPU per rank)"} in records2
    benches = [r for r in records + records2 if "tokens_per_s" in r]
    assert [b["config"] for b in benches] == ["hrm_tiny", "cpu-bench", "hrm_tiny"]
    assert all(b["tokens_per_s"] > 0 for b in benches)
    assert "resumed from" in proc2.stdout
    assert "task (paper)" in proc2.stdout              # vote's pass@K table
    assert (second / "run" / "latest").read_text().strip() == "step_3"
    run_log = [json.loads(line) for line in (second / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in run_log if "alignment/mean" in r] == [3]   # diagnostics ran once, resumed
    assert (log, log2) == (proc.stdout, proc2.stdout)  # the copy that comes back from a device run


def test_an_installed_fused_backend_is_not_built_again(rehearse_build, tmp_path):
    # the archive and nvcc are there (as in test_full_rehearsal_runs_every_phase, where the backend
    # is not, and the build starts), but the backend imports: no build; the phase itself is skipped
    site = tmp_path / "site"
    site.mkdir()
    (site / "adam_atan2_backend.py").write_text("")
    proc, records, _ = run_check(tmp_path, rehearse_build, ONLY="adam", BUDGET="1", SITE=str(site),
                                 **fake_adam_build(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not [r for r in records if "adam_atan2_build" in r]
    assert records[-1]["skipped_for_budget"] == "adam"


def test_a_failing_phase_is_reported_and_the_rest_still_run(rehearse_build, tmp_path):
    # A data folder without a train split: the trainer-based phases fail, one after the other
    # (the smoke run's pretrain.py refuses it before importing torch: a quick failure). ONLY names
    # a [full] phase and leaves out a default one (deeploop).
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("identifiers.json", "manifest.json"):
        (broken / name).write_bytes((rehearse_build / name).read_bytes())
    (broken / "test").symlink_to(rehearse_build / "test")
    proc, records, _ = run_check(tmp_path, broken, ONLY="v1 smoke")
    assert proc.returncode == 1
    started = [r["phase"] for r in records if "elapsed_s" in r]
    assert started == ["bench_train hrm_v1", "pretrain smoke", "pretrain resume", "vote", "done"]
    assert records[-1]["failed"] == started[:-1]


def test_a_spent_budget_skips_phases_and_names_them(rehearse_build, tmp_path):
    # what is skipped is what would run: by default the two training benchmarks (both of which
    # test_full_rehearsal_runs_every_phase runs), with FULL=1 every phase
    for full, skipped in (("", "v1 deeploop"), ("1", "v1 deeploop model tests adam smoke")):
        proc, records, _ = run_check(tmp_path / f"full{full}", rehearse_build, BUDGET="1", FULL=full)
        assert proc.returncode == 0
        assert [r["phase"] for r in records if "elapsed_s" in r] == ["done"]
        assert records[-1]["skipped_for_budget"] == skipped


def test_a_build_made_with_other_settings_is_refused_not_measured_on(small_build, tmp_path):
    # DATA holds a build of 8 tasks and 4 augmentations where the check makes 2 and 2 (an older
    # prepare_gpu_check.sh, DATA pointed at another build): it was reused, its figures silently
    # other ones. Refused at setup, naming both settings, before any phase; the build left as it was.
    manifest = (small_build / "manifest.json").read_bytes()
    proc, records, _ = run_check(tmp_path, small_build, ONLY="v1")
    assert proc.returncode == 1
    assert not [r for r in records if "phase" in r]
    setup = records[-1]["setup"]
    assert setup.startswith(f"{small_build} holds a build made with other settings (") and "'limit_tasks': 8" in setup
    assert "'limit_tasks': 2" in setup and "remove it (it is built again) or set DATA to another folder" in setup
    assert (small_build / "manifest.json").read_bytes() == manifest


def test_a_mistyped_only_key_is_refused_before_anything_runs(tmp_path):
    # ONLY="deeploop torchrn" ran deeploop alone and ended `"failed": []`: the second go after a
    # budget ran out would have skipped torchrun without a word. Refused at once, naming the key.
    proc, records, log = run_check(tmp_path, tmp_path / "data", ONLY="deeploop torchrn")
    assert proc.returncode == 2
    assert records == [{"setup": "ONLY: no phase 'torchrn' (the phases: v1 deeploop torchrun model tests adam smoke)"}]
    assert not (tmp_path / "data").exists()        # refused before the build, too
    assert log == proc.stdout


def test_a_budget_that_is_not_whole_seconds_is_refused(tmp_path):
    # BUDGET=540s failed each phase's `[ -gt 0 ]` with a bash warning and ran with no limit at all,
    # past the lease it was meant to fit
    proc, records, _ = run_check(tmp_path, tmp_path / "data", ONLY="deeploop", BUDGET="540s")
    assert proc.returncode == 2
    assert records == [{"setup": "BUDGET: '540s' is not a whole number of seconds (0: no limit)"}]
    assert not (tmp_path / "data").exists()


def test_a_python_without_numba_is_said_at_setup(tmp_path):
    # $WHEELS carries no numba: the check went on to the build and failed in the first phase that
    # evaluates. A python that sees no site-packages (-S) stands for an image without numba.
    python = tmp_path / "bare-python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    proc, records, _ = run_check(tmp_path, tmp_path / "data", PYTHON=str(python))
    assert proc.returncode == 1
    assert records == [{"setup": "numba is missing (evaluation and voting need it; prepare_gpu_check.sh's wheels "
                                 "do not carry it)"}]
    assert not (tmp_path / "data").exists()


def test_pytest_is_asked_for_only_by_the_phases_that_run_it(tmp_path):
    # The short check runs no pytest, yet stopped at setup without it ("missing: pytest"): the README's
    # GPU recipe installs no dev extra. A python that finds no pytest (sys.modules["pytest"] = None
    # makes find_spec answer None) stands for such a machine.
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['pytest'] = None\n")
    env = dict(PYTHONPATH=f"{hide}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc, records, _ = run_check(tmp_path / "tests", tmp_path / "data", ONLY="tests", **env)
    assert proc.returncode == 1 and records[-1]["setup"].startswith("missing: pytest; pass WHEELS="), records
    proc, records, _ = run_check(tmp_path / "v1", tmp_path / "data", ONLY="v1", **env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert records[-1]["failed"] == [] and not any("setup" in r for r in records), records
    assert any(r.get("phase") == "bench_train hrm_v1" and "elapsed_s" in r for r in records), records


def test_help_prints_the_header_and_runs_nothing(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--help"], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "OUT": str(tmp_path)})
    assert proc.returncode == 0 and proc.stdout.startswith("GPU check (one H200 or any CUDA GPU)"), proc.stdout
    assert "REHEARSE=1 runs every phase on the CPU" in proc.stdout and "set -uo" not in proc.stdout
    assert os.listdir(tmp_path) == []           # no log, no build
    other = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "FULL=1"], capture_output=True, text=True)
    assert other.returncode == 2 and "takes no arguments (settings are environment variables" in other.stderr
