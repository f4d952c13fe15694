"""hrm.sweep under torchrun: the other ranks' temporary sweep records (and the stale ones a killed
rank leaves), and the launcher's log said by rank 0 alone. (Sweeps themselves: tests/test_train.py.)"""
from __future__ import annotations

import logging
import os
import subprocess
import sys

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
