"""hrm/run_lock.py: one training process per run folder, released by the end of training or by the
holder's death, and nothing left behind by a start refused after the lock was taken."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT
from hrm.run_lock import LOCK_NAME, RunFolderInUse, RunLock, is_held

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")


def test_a_held_folder_is_refused_naming_the_holder_until_it_is_released(tmp_path):
    first = RunLock.acquire(tmp_path / "run")
    with pytest.raises(ValueError) as refused:
        RunLock.acquire(tmp_path / "run")
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'run'} is in use: pid {os.getpid()} on ")
    assert f"(it holds {tmp_path / 'run' / LOCK_NAME}); wait for it to end, or choose another run_name" in message
    first.release()
    first.release()                                    # twice is harmless
    RunLock.acquire(tmp_path / "run").release()
    assert (tmp_path / "run" / LOCK_NAME).is_file()    # kept: see the module's docstring


def test_a_killed_holder_leaves_the_folder_free(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from hrm.run_lock import RunLock; "
                               f"lock = RunLock.acquire({str(tmp_path / 'run')!r}); print('held', flush=True); time.sleep(600)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match=f"is in use: pid {holder.pid} on "):
            RunLock.acquire(tmp_path / "run")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    RunLock.acquire(tmp_path / "run").release()


def test_cleanup_removes_what_acquire_created_and_nothing_else(tmp_path):
    lock = RunLock.acquire(tmp_path / "project" / "run")
    lock.release(cleanup=True)
    assert os.listdir(tmp_path) == []
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "other_run").mkdir()
    lock = RunLock.acquire(tmp_path / "project" / "run")
    (tmp_path / "project" / "run" / "notes.txt").write_text("someone else's")
    lock.release(cleanup=True)                         # not empty: kept, and so is project/
    assert sorted(os.listdir(tmp_path / "project" / "run")) == ["notes.txt"]


def test_a_held_lock_file_of_damaged_text_is_still_refused_as_in_use(tmp_path):
    """What the holder wrote is only shown: bytes that are not UTF-8 (a damaged file, another
    encoding) must not turn the refusal into a UnicodeDecodeError."""
    import fcntl
    (tmp_path / "run").mkdir()
    with open(tmp_path / "run" / LOCK_NAME, "wb") as holder:
        holder.write(b"pid 7 on n\xf6de3\n")
        holder.flush()
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RunFolderInUse, match="is in use: pid 7 on n"):
            RunLock.acquire(tmp_path / "run")


def test_a_lock_taken_on_a_file_a_refused_start_just_removed_is_taken_again(tmp_path, monkeypatch):
    """A start refused after taking the lock removes the lock file (release(cleanup=True)). A second
    start that opened the file just before, and locks it just after, would hold a lock on a file
    no longer in the folder: a third start would make a new .lock, lock it too, and two runs would
    train into one folder. The second takes the lock again, on the file the folder now holds."""
    import hrm.run_lock
    first = RunLock.acquire(tmp_path / "run")
    real_flock, calls = hrm.run_lock.fcntl.flock, []

    def flock_after_the_cleanup(fd, operation):
        if not calls:       # the first start's cleanup runs between the second's open and flock
            first.release(cleanup=True)
        calls.append(fd)
        return real_flock(fd, operation)
    monkeypatch.setattr(hrm.run_lock.fcntl, "flock", flock_after_the_cleanup)
    second = RunLock.acquire(tmp_path / "run")
    monkeypatch.undo()
    with pytest.raises(RunFolderInUse, match=f"is in use: pid {os.getpid()} on "):
        RunLock.acquire(tmp_path / "run")
    second.release()


def test_a_filesystem_whose_stat_never_matches_the_open_file_still_takes_the_lock(tmp_path, monkeypatch):
    """The retry above is for a file removed in a race: where stat and fstat of one file never agree
    (some overlay or network filesystems), acquire takes the lock as before rather than recurse."""
    import hrm.run_lock
    monkeypatch.setattr(hrm.run_lock, "_names", lambda path, handle: False)
    lock = RunLock.acquire(tmp_path / "run")
    with pytest.raises(RunFolderInUse):
        RunLock.acquire(tmp_path / "run")
    lock.release()


def test_is_held_tells_a_held_folder_from_a_free_one_and_takes_nothing(tmp_path):
    """The probe behind resume=auto's message: a folder whose lock another holder has, against a free
    one, one never locked (no .lock, and none made) and one that does not exist (not made either)."""
    assert not is_held(tmp_path / "missing") and not (tmp_path / "missing").exists()
    (tmp_path / "plain").mkdir()
    assert not is_held(tmp_path / "plain") and not (tmp_path / "plain" / LOCK_NAME).exists()
    lock = RunLock.acquire(tmp_path / "run")
    assert is_held(tmp_path / "run")
    assert is_held(tmp_path / "run")                 # probing twice leaves the hold with its holder
    with pytest.raises(RunFolderInUse):
        RunLock.acquire(tmp_path / "run")
    lock.release()
    assert not is_held(tmp_path / "run")
    RunLock.acquire(tmp_path / "run").release()      # the probe left nothing held behind
