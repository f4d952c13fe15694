"""One training process per run folder.

Two runs started into the same folder (the same command launched twice, a scheduler's requeue while
the first job still runs) would both pass the fresh-folder check, then overwrite each other's
checkpoints, `latest`, `all_config.yaml` and log, and both exit 0. Rank 0 therefore holds an
exclusive `flock` on `<run>/.lock` from its start-up checks to the end of its training. The kernel
drops the lock when the process dies (SIGKILL included), so a killed run never leaves its folder
locked; the file stays (removing it would let two processes lock two different files of that name).

Public API
----------
``RunLock.acquire(run_dir) -> RunLock``   RunFolderInUse (a ValueError) naming the holder (pid, host,
                                          start) when the folder is in use; creates the folder when
                                          it is missing.
``is_held(run_dir) -> bool``               whether another process holds it now (takes nothing)
``lock.release(cleanup=False)``           idempotent; ``cleanup`` also removes the lock file and the
                                          folders acquire() created, if nothing else was put there
                                          (a start refused after the lock was taken leaves nothing).
"""
from __future__ import annotations

import errno
import os
import socket
import sys
import time
from pathlib import Path

try:
    import fcntl
except ImportError:     # not POSIX (Windows): runs go unguarded, as before
    fcntl = None

LOCK_NAME = ".lock"
# what flock(LOCK_NB) fails with when another open file holds the lock (other errors: no flock here)
_HELD_ERRNOS = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


class RunFolderInUse(ValueError):
    """Another process holds the run folder; `holder` says which ("pid 123 on node7 since ...")."""

    def __init__(self, message: str, holder: str):
        super().__init__(message)
        self.holder = holder


def _names(path: Path, handle) -> bool:
    """Whether `path` is still the file `handle` has open."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(handle.fileno()))
    except FileNotFoundError:
        return False


def is_held(run_dir: str | Path) -> bool:
    """Whether another process holds `run_dir` now; takes nothing and creates nothing (a probe for
    messages: the hold is only ever taken by RunLock.acquire, which decides)."""
    path = Path(run_dir) / LOCK_NAME
    if fcntl is None or not path.is_file():
        return False
    try:
        with open(path, "rb") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)   # released as the file closes
    except OSError as e:
        return e.errno in _HELD_ERRNOS
    return False


class RunLock:
    def __init__(self, run_dir: Path, handle, created: list[Path]):
        self.run_dir, self._handle, self._created = run_dir, handle, created

    @classmethod
    def acquire(cls, run_dir: str | Path, _tries: int = 3) -> "RunLock":
        run_dir = Path(run_dir)
        created = [p for p in (run_dir, *run_dir.parents) if not p.exists()]   # deepest first
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / LOCK_NAME
        if fcntl is None:
            return cls(run_dir, None, created)
        # what a holder wrote is only shown: undecodable bytes (a damaged file) must not fail the refusal
        handle = open(path, "a+", encoding="utf-8", errors="replace")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in _HELD_ERRNOS:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                handle.close()
                raise RunFolderInUse(f"{run_dir} is in use: {holder} is training into it (it holds {path}); "
                                     f"wait for it to end, or choose another run_name / checkpoint_path",
                                     holder) from None
            # a filesystem without flock (some network mounts): train unguarded rather than not at all
            print(f"warning: cannot lock {path} ({e.strerror}); nothing stops another "
                  f"run from writing into {run_dir} at the same time", file=sys.stderr, flush=True)
            handle.close()
            return cls(run_dir, None, created)
        if not _names(path, handle) and _tries > 1:
            # a refused start's cleanup removed the file between our open and our flock: a lock on
            # that orphan stops nobody (the next start makes a new .lock); take the one there now.
            # A few times only: a filesystem whose stat and fstat never agree would recurse forever
            handle.close()
            return cls.acquire(run_dir, _tries - 1)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()} since "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        return cls(run_dir, handle, created)

    def release(self, cleanup: bool = False) -> None:
        if cleanup:     # unlinked while still held: nobody can take a lock on the file being removed
            try:
                (self.run_dir / LOCK_NAME).unlink(missing_ok=True)
            except OSError:     # a read-only folder (the refusal being cleaned up after): the file stays
                pass
            for folder in self._created:
                try:
                    folder.rmdir()      # only if empty: never anything another process put there
                except OSError:
                    break
        if self._handle is not None:
            self._handle.close()        # closing the file drops the flock
            self._handle = None
