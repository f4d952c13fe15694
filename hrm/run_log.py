"""Where a run's numbers go: `log.jsonl` in the run folder always, W&B when configured.

W&B mode `auto` goes online only when credentials exist (WANDB_API_KEY, or the W&B server's entry
in ~/.netrc, which `wandb login` writes) and the wandb package is installed; otherwise it is
disabled. It never prompts and never waits on the network without credentials: a run on a laptop or
an air-gapped node just writes its log file. With credentials and no route to the server (a key
from the login node on a compute node), wandb.init gives up after 30 s: `auto` then logs offline
and says so, an explicit `online` stops with one line. Asking
for `online` or `offline` without the package, or `online` without credentials, is an error that
says so.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import secrets
import shutil
import sys
from pathlib import Path
from urllib.parse import urlparse

from tqdm import tqdm


# The W&B cloud's API hosts: `wandb login` writes its key under the first in older wandb, under the
# second (CoreWeave Forge, its default server) in recent ones (0.31), which read either for the cloud.
WANDB_CLOUD_HOSTS = ("api.wandb.ai", "api.forge.coreweave.com")


def _has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    # `wandb login` writes the key to ~/.netrc under the server's host (the cloud's, or a
    # self-hosted server named by WANDB_BASE_URL)
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    hosts = WANDB_CLOUD_HOSTS if host in WANDB_CLOUD_HOSTS else (host,)
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        text = netrc.read_text()
    except OSError:
        return False
    return any(h in text for h in hosts)


def _wandb_installed() -> bool:
    return importlib.util.find_spec("wandb") is not None


WANDB_MODES = ("online", "offline", "disabled")   # what WANDB_MODE may force, over wandb.mode


def wandb_mode_forced() -> str | None:
    """The mode WANDB_MODE forces over wandb.mode, or None when it is unset (or empty). `dryrun` is
    wandb's older name of offline. Any other value is refused: `WANDB_MODE=ofline` was ignored
    without a word, and an auto run with credentials went online, where the user asked for none."""
    value = os.environ.get("WANDB_MODE", "").strip()
    if not value:
        return None
    mode = {"dryrun": "offline"}.get(value.lower(), value.lower())
    if mode not in WANDB_MODES:
        raise ValueError(f"WANDB_MODE={value!r} in the environment is not a W&B mode: one of {', '.join(WANDB_MODES)}"
                         f" (it overrides wandb.mode), or unset it")
    return mode


def resolve_wandb_mode(mode: str) -> str:
    forced = wandb_mode_forced()
    if forced is not None:
        mode = forced
    elif mode == "auto":
        if not _has_wandb_credentials():
            return "disabled"
        if not _wandb_installed():
            print("[hrm] W&B credentials found but the wandb package is not installed: logging to log.jsonl only",
                  file=sys.stderr, flush=True)
            return "disabled"
        return "online"
    if mode != "disabled" and not _wandb_installed():
        raise ValueError(f"W&B mode {mode!r} (wandb.mode or WANDB_MODE) needs the wandb package: "
                           "pip install wandb, or set wandb.mode=disabled")
    if mode == "online" and not _has_wandb_credentials():
        # wandb itself would prompt for a key, or fail deep inside the run
        raise ValueError("W&B mode 'online' (wandb.mode or WANDB_MODE) needs credentials: run `wandb login` "
                         "or set WANDB_API_KEY; or use wandb.mode=offline (sync later) or disabled")
    return mode


# Seconds between progress-bar redraws when stderr is not a terminal (a SLURM or nohup log): tqdm's
# 0.1 s there appends a redraw of ~100 bytes up to 10 times a second, ~80 MB a day of training.
FILE_BAR_INTERVAL_S = 30.0


def progress_bar(iterable=None, **kwargs) -> tqdm:
    """A tqdm bar: redrawn up to 10 times a second on a terminal, every FILE_BAR_INTERVAL_S into a file."""
    if hasattr(sys.stderr, "isatty") and sys.stderr.isatty():
        return tqdm(iterable, mininterval=0.1, **kwargs)
    # maxinterval too: tqdm's monitor thread forces a redraw of a bar quiet for maxinterval (10 s by
    # default), which would otherwise redraw it every 10-20 s whatever mininterval says
    return tqdm(iterable, mininterval=FILE_BAR_INTERVAL_S, maxinterval=FILE_BAR_INTERVAL_S, **kwargs)


# the x axis of a run's W&B charts: the training step, as log.jsonl's "step"
WANDB_STEP = "step"


def wandb_run_id(run_name: str) -> str:
    """The W&B run id for a run name: W&B refuses an id holding any of `:;,#?/'` (UsageError), and a
    sweep of two keys names its runs `<run>-a=1,b=2`; each becomes '-'."""
    return re.sub(r"[:;,#?/']", "-", run_name)


def new_wandb_run_id(run_name: str) -> str:
    """The W&B run id of a run that starts afresh: its name's id and a random suffix. Two fresh runs
    of one name (a folder deleted and the ablation run again, one run_name in two checkpoint_paths)
    are two W&B runs, not one run with both histories laid over each other. The suffix comes from
    the OS, not from a seeded generator: a rerun with the same seed must still differ, and training's
    own random streams are left untouched."""
    return f"{wandb_run_id(run_name)}-{secrets.token_hex(4)}"


def error_text(error: BaseException) -> str:
    """`OSError: [Errno 5] ...`, or the type alone for one without a message (MemoryError())."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _plain(value):
    """JSON-safe number (non-finite floats become strings so the log stays valid JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _remove_failed_online_start(wandb_dir: Path, run_id: str) -> None:
    """The folder an online start that could not reach the server left (`run-<time>-<id>`, nothing
    logged in it): beside the offline run of the same id, `wandb sync --sync-all` would take it for
    a second run to upload. Offline runs (`offline-run-...`) of this or an earlier start are kept."""
    for folder in wandb_dir.glob(f"run-*-{run_id}"):
        shutil.rmtree(folder, ignore_errors=True)


def _drop_partial_last_line(path: Path) -> None:
    """A run killed while writing a record leaves a line without its newline; the resumed run's
    first record would be glued onto it. Cut it (the resumed run logs those steps again)."""
    if not path.is_file():
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


class RunLog:
    """Rank 0 only: construct it there, nowhere else."""

    def __init__(self, run_dir: Path, *, project: str, run_name: str, config: dict, wandb_mode: str,
                 entity: str | None = None, append: bool = False, wandb_id: str | None = None,
                 continue_wandb_run: bool = False):
        """`append`: a resumed run continues its log; a fresh run starts a new one. `wandb_id`: the
        W&B run's id (None: a new one, new_wandb_run_id). `continue_wandb_run`: a resumed run logs
        on into the W&B run of that id (made if it is not there: its first part may have run with
        W&B off or offline); otherwise an existing W&B run of that id is refused, never appended to."""
        mode = resolve_wandb_mode(wandb_mode)  # first: a bad mode leaves no folder behind
        self.wandb_id = wandb_id or new_wandb_run_id(run_name)
        self.path = Path(run_dir) / "log.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if append:
            _drop_partial_last_line(self.path)
        self.wandb = None
        if mode != "disabled":
            os.environ.setdefault("WANDB_SILENT", "true")
            import wandb

            def start(mode: str):
                return wandb.init(project=project, name=run_name, entity=entity, config=config, mode=mode,
                                  dir=str(run_dir), id=self.wandb_id,
                                  resume="allow" if continue_wandb_run else "never",
                                  settings=wandb.Settings(init_timeout=30, x_disable_stats=True))
            try:
                self.wandb = start(mode)
            except wandb.errors.Error as e:
                if mode != "online":
                    raise
                reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no reason given'}"
                forced = wandb_mode_forced() is not None
                if wandb_mode != "auto" or forced:
                    # asked for by name: the user wants the server, and is told plainly it failed
                    # (by the setting that asked: WANDB_MODE wins over wandb.mode)
                    setting = "WANDB_MODE" if forced else "wandb.mode"
                    raise ValueError(f"W&B mode 'online' could not start ({reason}); {setting}=offline logs "
                                     f"without the server (`wandb sync` later), disabled not at all") from None
                # auto, with a key from a login node on a compute node without a route out: the run
                # goes on, logged offline, rather than stop on a choice the user did not make
                print(f"[hrm] W&B could not reach its server ({reason}): logging offline under "
                      f"{Path(run_dir) / 'wandb'} (`wandb sync` it later)", file=sys.stderr, flush=True)
                mode = "offline"
                # wandb's service still holds the failed start's run id: a second start with it
                # would be refused ("run ID ... is in use"); a fresh service takes it
                wandb.teardown()
                _remove_failed_online_start(Path(run_dir) / "wandb", self.wandb_id)
                self.wandb = start(mode)
            # Charts go by the training step as a logged value, not W&B's own step: W&B drops (a
            # warning WANDB_SILENT hides) any row logged at a step below its run's last, and a
            # resumed run logs again from its checkpoint's step (the evaluation a SIGTERM
            # interrupted, the steps a kill lost), behind the steps its first part logged.
            self.wandb.define_metric(WANDB_STEP)
            self.wandb.define_metric("*", step_metric=WANDB_STEP, step_sync=True)
        self.mode = mode
        # after W&B: a refusal there leaves no open file. Unbuffered: each record reaches the file
        # as it is logged, and one that fails can be cut off whole (_append)
        try:
            self.file = open(self.path, "ab" if append else "wb", buffering=0)
        except OSError:
            # the start is refused: the W&B run just begun must end here, or it stays "running"
            # on the server (and in wandb's service) with nothing ever logged to it
            if self.wandb is not None:
                try:
                    self.wandb.finish(exit_code=1)
                except Exception:   # noqa: BLE001 - the OSError is what the user must see
                    pass
            raise
        self._said: set[str] = set()   # the failures already warned of ("file", "wandb")

    # Rank 0 logs between the step's collectives: an error raised here (a full disk, an NFS hiccup,
    # W&B's service gone) would stop rank 0 alone, and every other rank would wait in the next
    # all-reduce until its timeout (NCCL: tens of minutes), then fail with an opaque error. A failed
    # record is therefore a warning, said once, and training goes on: a disk that is really full
    # stops every rank at the next checkpoint save, which the ranks agree on (CheckpointNotSaved).

    def log(self, record: dict, step: int) -> None:
        line = json.dumps({"step": step, **{k: _plain(v) for k, v in record.items()}}) + "\n"
        try:
            self._append(line.encode())
        except OSError as e:
            self._warn_once("file", f"cannot write the record of step {step} to {self.path} ({e.strerror or e}); "
                                    f"training goes on, and this record and any later one that cannot be written "
                                    f"are missing from the log (said once)")
        if self.wandb is not None and "wandb" not in self._said:   # once it failed, W&B is not tried again
            try:
                self.wandb.log({**record, WANDB_STEP: step})
            except Exception as e:   # wandb raises its own errors, and whatever its service's pipe does
                # log.jsonl still holds every record; each further try could fail slowly
                self._warn_once("wandb", f"W&B stopped logging at step {step} ({error_text(e)}); "
                                         f"training goes on, logged to {self.path} only")

    def _append(self, data: bytes) -> None:
        """Write one record whole or not at all: a partial line (a disk that filled up mid-record)
        would have the next record glued onto it, and readers refuse such a line in a log."""
        start = self.file.seek(0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[self.file.write(view):]   # a short write (the disk filling up) goes on
        except OSError:
            try:
                self.file.truncate(start)
            except OSError:   # rare (the write failed, the truncate too): a partial line is left
                pass
            raise

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._said:
            self._said.add(what)
            print(f"warning: {message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Never raises: at the run's end an error on rank 0 alone would leave the others waiting
        for it at the exit barrier."""
        try:
            self.file.close()   # NFS may report a failed write only now
        except OSError as e:
            self._warn_once("file", f"cannot write to {self.path} ({e.strerror or e}): its last records may be "
                                    f"missing")
        if self.wandb is not None:
            try:
                self.wandb.finish()
            except Exception as e:
                self._warn_once("wandb", f"W&B could not finish the run ({error_text(e)}); "
                                         f"{self.path} holds every record")
