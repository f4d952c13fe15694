"""What the evaluator's command lines write: output paths checked before the work, files written
whole or not at all, and a quiet end when the reader of stdout goes away (``vote.py | head``).

Output paths are checked before anything slow runs, so a typo costs nothing. The rule: an output
file must not be a directory, and its folder must exist or be creatable, i.e. the nearest existing
ancestor is a directory this process can write in (missing folders are then created, as
``mkdir -p`` would). An existing file is replaced.
"""
from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from evaluate.errors import EvaluationInputError

# the status a shell reports for a tool killed by SIGPIPE (128 + 13), as `cat` or `grep` give in
# `... | head`; pipelines under `set -o pipefail` see the same status from us as from them
BROKEN_PIPE_STATUS = 141


def nearest_existing(folder: Path) -> Path:
    """``folder`` or its closest ancestor that exists (a dangling link counts as existing: it is
    in the way of a mkdir all the same)."""
    while not (folder.exists() or folder.is_symlink()):
        folder = folder.parent       # ends at "." or "/", which exist
    return folder


def check_folder(folder: Path, what: str) -> None:
    """Refuse a folder that cannot be created: a non-directory in its path, or no write permission
    where the first missing folder would go."""
    existing = nearest_existing(Path(folder))
    if not existing.is_dir():
        raise EvaluationInputError(f"{what}: {existing} is in its path and is not a directory")
    # the file goes into `existing`, or its first missing folder does: both need write access
    if not os.access(existing, os.W_OK | os.X_OK):
        raise EvaluationInputError(f"{what}: no permission to write in {existing}")


def check_output_file(path: Path, option: str) -> None:
    """An output file named on the command line (``option`` names it in the message)."""
    path = Path(path)
    if path.is_dir():
        raise EvaluationInputError(f"{option} {path} is a directory; give a file name")
    check_folder(path.parent, f"{option} {path}")


def check_output_dir(path: Path, what: str) -> None:
    """An output folder: an existing directory, or one that can be created."""
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not path.is_dir():
        raise EvaluationInputError(f"{what} {path} exists and is not a directory")
    check_folder(path, f"{what} {path}")


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write through a temporary file in the same folder, then rename it over ``path``: a reader
    never sees half a file, and a failure leaves any previous file as it was. Any OSError becomes
    an :class:`EvaluationInputError` naming ``path``."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # os.open with mode 0o666: the file gets the usual permissions (umask applied), where
        # tempfile's would stay private (0o600) after the rename
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise EvaluationInputError(f"cannot write {path}: {e.strerror or e}") from None
    return path


def quiet_on_broken_pipe(main) -> int:
    """Run a command's ``main`` and give :data:`BROKEN_PIPE_STATUS`, silently, when stdout's reader
    has gone away (``| head -1``), as Unix tools do; the recipe of Python's signal documentation."""
    try:
        status = main()
        sys.stdout.flush()       # a short output is still buffered: its broken pipe shows up here
        return status
    except BrokenPipeError:
        # the interpreter flushes stdout again on exit and would report the same error: point the
        # descriptor at /dev/null first
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_STATUS
