"""hrm.sweep under torchrun: the other ranks' temporary sweep records (and the stale ones a killed
rank leaves), and the launcher's log said by rank 0 alone. (Sweeps themselves: tests/test_train.py.)"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from hrm import sweep


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_record_whose_process_died_is_removed_and_nothing_else(tmp_path, monkeypatch):
    host, gone = sweep.this_host(), dead_pid()
    stale = tmp_path / f"hrm-sweep-rank1-{host}-{gone}"
    (stale / "0").mkdir(parents=True)                                     # with a job's folder in it
    (stale / "multirun.yaml").write_text("x")
    kept = [tmp_path / f"hrm-sweep-rank1-{host}-{os.getpid()}",          # a live process's
            tmp_path / f"hrm-sweep-rank1-another-node-{gone}",          # another machine's: its pid means nothing here
            tmp_path / f"hrm-sweep-rank1-{host}-{gone}-old",            # not exactly our name
            tmp_path / f"my-hrm-sweep-rank1-{host}-{gone}"]
    for folder in kept:
        folder.mkdir()
    (tmp_path / f"hrm-sweep-rank2-{host}-{gone}").write_text("a file")    # not a folder
    kept.append(tmp_path / f"hrm-sweep-rank2-{host}-{gone}")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / f"hrm-sweep-rank3-{host}-{gone}").symlink_to(target)      # a link: neither it nor its target
    kept += [tmp_path / f"hrm-sweep-rank3-{host}-{gone}", target]

    assert sweep.remove_stale_sweep_records(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and all(p.exists() for p in kept)


def test_another_users_record_is_left_alone(tmp_path, monkeypatch):
    stale = tmp_path / f"hrm-sweep-rank1-{sweep.this_host()}-{dead_pid()}"
    stale.mkdir()
    monkeypatch.setattr(os, "getuid", lambda: os.stat(stale).st_uid + 1)
    assert sweep.remove_stale_sweep_records(str(tmp_path)) == [] and stale.is_dir()


def test_a_rank_clears_stale_records_before_naming_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(sweep.tempfile, "tempdir", None)     # gettempdir() reads TMPDIR again
    monkeypatch.setattr(sweep.atexit, "register", lambda *a, **k: None)
    stale = tmp_path / f"hrm-sweep-rank1-{sweep.this_host()}-{dead_pid()}"
    stale.mkdir()
    monkeypatch.setenv("RANK", "0")
    assert sweep.sweep_record_on_rank_zero(["lr=1"]) == ["lr=1"] and stale.is_dir()   # rank 0 makes none
    monkeypatch.setenv("RANK", "1")
    argv = sweep.sweep_record_on_rank_zero(["lr=1"])
    assert argv == ["lr=1", f"hydra.sweep.dir={tmp_path}/hrm-sweep-rank1-{sweep.this_host()}-{os.getpid()}"]
    assert not stale.exists()


def test_other_ranks_keep_only_the_launchers_warnings(monkeypatch):
    launcher = logging.getLogger("hydra._internal.core_plugins.basic_launcher")
    monkeypatch.setattr(launcher, "filters", [])
    monkeypatch.setenv("RANK", "0")
    sweep.launcher_log_on_rank_zero()
    assert launcher.filter(launcher.makeRecord(launcher.name, logging.INFO, "", 0, "Launching 2 jobs", None, None))
    monkeypatch.setenv("RANK", "1")
    sweep.launcher_log_on_rank_zero()
    assert not launcher.filter(launcher.makeRecord(launcher.name, logging.INFO, "", 0, "Launching 2 jobs", None, None))
    assert launcher.filter(launcher.makeRecord(launcher.name, logging.WARNING, "", 0, "careful", None, None))


def test_a_sweep_job_starts_afresh_only_when_no_rank_has_a_checkpoint(tmp_path, monkeypatch):
    """`-m ... resume=latest`: each rank looks in its own folder (nodes need not share a
    filesystem). Nothing anywhere: the job starts afresh. A checkpoint on some ranks only: it
    resumes, so that the Trainer's agreed check names the ranks without one, rather than some
    ranks training from scratch beside others that resumed."""
    import hrm.distributed
    from hrm.distributed import DistInfo
    from hrm.pretrain_config import PretrainConfig
    import torch
    config = PretrainConfig.model_construct(resume="latest", checkpoint_path=str(tmp_path / "sweep"), run_name="r",
                                            project_name="p", data_path=str(tmp_path))
    rank1 = DistInfo(rank=1, world_size=2, local_rank=1, device=torch.device("cpu"))
    seen = []

    def gather(found_here, info):
        seen.append(found_here)
        return [peer, found_here]
    monkeypatch.setattr(hrm.distributed, "gather_objects", gather)
    for peer, expected in ((False, None), (True, "latest")):
        assert sweep.fresh_if_nothing_to_resume(config, rank1, "p=0.3").resume == expected
    assert seen == [False, False]                       # this rank's folder holds nothing
    (tmp_path / "sweep" / "p=0.3" / "step_5").mkdir(parents=True)
    (tmp_path / "sweep" / "p=0.3" / "step_5" / "trainer.pt").write_bytes(b"")
    peer = False
    assert sweep.fresh_if_nothing_to_resume(config, rank1, "p=0.3").resume == "latest"
    assert seen[-1] is True


def test_only_a_fresh_job_in_a_named_run_folder_with_checkpoints_is_in_the_way(tmp_path):
    """The sweep check's look at a job's run folder: a fresh job (no resume) whose run_name or
    checkpoint_path folder holds checkpoints is named; a resuming job, a default (time-stamped)
    run name, and a relative folder of a job that changes directory (hydra.job.chdir) are not."""
    from hrm.pretrain_config import PretrainConfig
    folder = tmp_path / "cp" / "p=0.3"
    (folder / "step_5").mkdir(parents=True)
    (folder / "step_5" / "trainer.pt").write_bytes(b"")
    fresh = PretrainConfig.model_construct(resume=None, checkpoint_path=str(tmp_path / "cp"), run_name=None,
                                           project_name="p", data_path=str(tmp_path))
    assert sweep.checkpoints_in_the_way(fresh, "p=0.3") == (
        f"{folder} already holds checkpoints (step_5); pass resume=latest to continue the sweep's runs, or another "
        f"run_name / checkpoint_path to start new ones")
    assert sweep.checkpoints_in_the_way(fresh, "p=0.5") is None                     # another job's folder
    assert sweep.checkpoints_in_the_way(fresh.model_copy(update={"resume": "latest"}), "p=0.3") is None
    unnamed = fresh.model_copy(update={"checkpoint_path": None})
    assert sweep.checkpoints_in_the_way(unnamed, "p=0.3") is None                   # <arch>-<time>-<tag>: new
    relative = fresh.model_copy(update={"checkpoint_path": os.path.relpath(tmp_path / "cp")})
    assert sweep.checkpoints_in_the_way(relative, "p=0.3") is not None
    assert sweep.checkpoints_in_the_way(relative, "p=0.3", job_chdir=True) is None


def test_a_jobs_tag_does_not_depend_on_the_order_of_the_swept_keys(monkeypatch):
    """The same sweep resumed (resume=latest) with its swept keys given in another order must find
    each job's run folder, which its tag names: otherwise every job starts afresh beside its run."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf
    tags = []
    for argv in (["-m", "lr=1e-3,2e-3", "arch.scaling.p=0.3,0.5", "seed=1"],
                 ["-m", "seed=1", "arch.scaling.p=0.3,0.5", "lr=1e-3,2e-3"]):
        job = [o.replace("1e-3,2e-3", "0.001").replace("0.3,0.5", "0.3") for o in argv[1:]]   # as Hydra gives it
        hydra_config = OmegaConf.create({"mode": RunMode.MULTIRUN, "overrides": {"task": job}, "sweeper": {}})
        monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda hydra_config=hydra_config: hydra_config))
        monkeypatch.setattr(sys, "argv", ["pretrain.py", *argv])
        tags.append(sweep.sweep_tag())
    assert tags[0] == tags[1] == "arch.scaling.p=0.3,lr=0.001"


def test_jobs_resuming_one_path_need_runs_of_their_own(tmp_path):
    """`-m resume=<run> lr=...,...` without run_name or checkpoint_path: every job would continue
    that run in its own folder, one after the other (the next from the last one's step, or saving
    over it, in one log). Named before the first job, with what to pass; a sweep of resume paths
    (several runs continued, each in its folder) and named jobs (each its own branch) are fine."""
    from hrm.pretrain_config import PretrainConfig
    run = str(tmp_path / "run")
    shared = PretrainConfig.model_construct(resume=run, checkpoint_path=None, run_name=None)
    assert sweep.jobs_share_a_run(shared, {"lr"}) == (
        f"resume={run}: every job would continue that run in its folder, one after the other; pass run_name (or "
        f"checkpoint_path) for each job to start a run of its own from that checkpoint (<run_name>-<its swept values>)")
    assert sweep.jobs_share_a_run(shared, {"lr", "resume"}) is None
    for named in ({"run_name": "b"}, {"checkpoint_path": str(tmp_path / "b")}, {"resume": "latest"}, {"resume": None}):
        assert sweep.jobs_share_a_run(shared.model_copy(update=named), {"lr"}) is None, named


def test_resume_latest_in_a_sweep_needs_its_run_name(tmp_path, monkeypatch):
    """Only resume=latest without run_name or checkpoint_path; the hint lists the run names whose
    folder for this job's values holds a checkpoint, newest first, and says so when there is none."""
    from hrm.pretrain_config import PretrainConfig
    monkeypatch.chdir(tmp_path)
    for name in ("tiny-20261201-0900-lr=0.001", "tiny-20261202-0900-lr=0.001", "tiny-20261203-0900-lr=0.002",
                 "lr=0.001"):
        (tmp_path / "checkpoints" / "b-hrm" / name / "step_1").mkdir(parents=True)
        (tmp_path / "checkpoints" / "b-hrm" / name / "step_1" / "trainer.pt").write_bytes(b"")
    (tmp_path / "checkpoints" / "b-hrm" / "tiny-20261204-0900-lr=0.001").mkdir()     # no checkpoint: not listed
    latest = PretrainConfig.model_construct(resume="latest", run_name=None, checkpoint_path=None, project_name=None,
                                            data_path="data/b")
    said = sweep.latest_needs_the_sweeps_name(latest, "lr=0.001")
    assert said == (f"resume=latest needs the sweep's run_name: its runs are {Path('checkpoints/b-hrm')}/<run_name>-"
                    f"<swept values>, the default run_name being <arch>-<the time the sweep started>; run names these "
                    f"values were trained under: run_name=tiny-20261202-0900, run_name=tiny-20261201-0900")
    assert sweep.latest_needs_the_sweeps_name(latest, "lr=0.5").endswith(
        f"; {Path('checkpoints/b-hrm')} holds no run of these values")
    for fine in ({"run_name": "tiny-20261202-0900"}, {"checkpoint_path": "cp"}, {"resume": None}, {"resume": "auto"}):
        assert sweep.latest_needs_the_sweeps_name(latest.model_copy(update=fine), "lr=0.001") is None, fine


def test_a_run_folder_a_sweep_named_in_command_line_order_is_still_found(monkeypatch, tmp_path):
    """Sweeps from before the tags were sorted named their runs in command-line order: the same
    sweep resumed must find those checkpoints, not start every job afresh beside them."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf
    argv = ["-m", "lr=1e-3,2e-3", "arch.scaling.p=0.3,0.5"]
    hydra_config = OmegaConf.create({"mode": RunMode.MULTIRUN, "overrides": {"task": ["lr=0.001", "arch.scaling.p=0.3"]},
                                     "sweeper": {}})
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: hydra_config))
    monkeypatch.setattr(sys, "argv", ["pretrain.py", *argv])
    config = {"checkpoint_path": str(tmp_path / "cp"), "run_name": None, "project_name": None, "data_path": "d"}
    assert sweep.sweep_tag(config) == sweep.sweep_tag() == "arch.scaling.p=0.3,lr=0.001"   # nothing on disk
    (tmp_path / "cp" / "lr=0.001,arch.scaling.p=0.3" / "step_5").mkdir(parents=True)
    (tmp_path / "cp" / "lr=0.001,arch.scaling.p=0.3" / "step_5" / "trainer.pt").write_bytes(b"")
    assert sweep.sweep_tag(config) == "lr=0.001,arch.scaling.p=0.3"
    (tmp_path / "cp" / "arch.scaling.p=0.3,lr=0.001" / "step_9").mkdir(parents=True)     # the sorted one wins
    (tmp_path / "cp" / "arch.scaling.p=0.3,lr=0.001" / "step_9" / "trainer.pt").write_bytes(b"")
    assert sweep.sweep_tag(config) == "arch.scaling.p=0.3,lr=0.001"


def test_the_sweep_check_reads_a_number_typed_as_a_name_as_launch_does(small_build):
    """The check before a sweep's first job validates each job as launch() will: `-m run_name=123
    lr=...` names its runs 123-..., not refused as 'run_name: Input should be a valid string' (the
    sweep stopped, none of its jobs run); a float is refused with the way out, as launch() does."""
    from hydra import compose, initialize_config_dir
    from conftest import ROOT
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        def job(*overrides):
            return lambda: compose("cfg_pretrain", overrides=[f"data_path={small_build}", *overrides])
        checked = sweep.validated_config(job("run_name=123", "project_name=2024"))
        assert (checked.run_name, checked.project_name) == ("123", "2024")
        assert "run_name=1000.0: Hydra read it as a number" in sweep.validated_config(job("run_name=1e3"))


def test_the_sweep_start_is_read_from_its_record_folder_name():
    """cfg_pretrain names a sweep's record checkpoints/multirun/%Y-%m-%d_%H-%M-%S: its runs' default
    names carry that time; a record named otherwise gives none (the first job's start is used)."""
    from datetime import datetime
    from hrm.sweep import sweep_start
    assert sweep_start("checkpoints/multirun/2026-11-30_10-15-07") == datetime(2026, 11, 30, 10, 15, 7)
    assert sweep_start("/abs/multirun/2026-11-30_10-15-07/") == datetime(2026, 11, 30, 10, 15, 7)
    assert sweep_start("checkpoints/multirun/rank0") is None
    assert sweep_start("/tmp/hrm-sweep-record-1-host-99") is None
