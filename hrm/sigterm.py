"""SIGTERM during training: StopOnSigterm asks the loop to stop after the step (or evaluation batch)
it comes in, and TrainingStopped says, once that step is saved, where to resume from."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from hrm.pretrain_config import command_line_arg


class TrainingStopped(RuntimeError):
    """SIGTERM (a scheduler's time limit or preemption, `kill`, torchrun passing either on): every
    rank stopped after the same step, once the run's checkpoint for that step was saved."""

    def __init__(self, step: int, checkpoint: Path, run_dir: Path):
        super().__init__(f"stopped by SIGTERM at step {step}, saved as {checkpoint}: continue with "
                         f"{command_line_arg('resume', run_dir)}")
        self.step, self.checkpoint, self.run_dir = step, checkpoint, run_dir


class StopOnSigterm:
    """While training, SIGTERM asks for a stop instead of killing the process: the flag is read at
    the end of each step (summed over ranks with the step's metrics, so every rank stops after the
    same step) and after each evaluation batch but the last, and the run saves that step and stops
    (hrm.train.Trainer.fit raises TrainingStopped; an evaluation cut short runs again on resume).
    Schedulers send SIGTERM some seconds before SIGKILL (SLURM: KillWait, 30 s by default; torchrun
    also waits 30 s after passing it on): one step and a save fit; hours since the last evaluation's
    checkpoint would be lost otherwise. A second SIGTERM kills at once, as before, unless it comes within
    REPEAT_WINDOW_S of the first: a scheduler that signals every process of a job (SLURM's time
    limit and scancel, with proctrack/cgroup) reaches torchrun's workers directly and again through
    torchrun passing it on, and that copy must not kill the save the first one asked for.
    Installed only from the main thread (signal handlers can be set nowhere else)."""

    REPEAT_WINDOW_S = 5.0

    def __init__(self):
        self.requested = False
        self._previous = None
        self._first_at = 0.0

    def __enter__(self) -> "StopOnSigterm":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._request)
        return self

    def _request(self, signum, frame) -> None:
        now = time.monotonic()
        if not self.requested:
            self.requested, self._first_at = True, now
        elif now - self._first_at > self.REPEAT_WINDOW_S:   # a later one ends the process, as SIGTERM does
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
