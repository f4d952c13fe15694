"""Training checkpoints: everything needed to continue a run exactly, written atomically.

Layout, under the run's checkpoint folder:

    step_<N>/model.pt        the model alone, in hrm.checkpoint's format (what predict.py loads)
    step_<N>/trainer.pt      step, both optimizers, data-reader position, config, scaling
    step_<N>/rank_<r>.pt     per rank: the ACT carry (rows in flight) and the RNG states
    latest                   text file naming the newest complete step folder

A checkpoint is written into `.step_<N>.tmp/` and renamed once every rank has written its part, so
a killed run never leaves a half-written `step_<N>/`. A step saved again (a resumed run re-reaching
it) takes two renames, `step_<N>` -> `.step_<N>.old` then `.step_<N>.tmp` -> `step_<N>`: a kill
between them leaves no `step_<N>/`, but a complete `.step_<N>.tmp/`, which counts as step N (see
unrenamed_saves) until the next start puts it in place. keep_checkpoints renames a step it prunes
to `.step_<N>.pruned` before deleting it. A save that fails on any rank (a full disk) fails on every
rank (CheckpointNotSaved), its `.tmp` removed; every file is fsync'd before the renames. Every file holds only tensors and plain
containers and loads with `torch.load(weights_only=True)`.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import torch

from hrm.checkpoint import (CheckpointError, load_state_strict, read_torch_file, recorded_build, save_model,
                            write_atomic)
from hrm.distributed import (AgreedOnEveryRank, DistInfo, MissingOnEveryRank, RefusedOnEveryRank, agree_on_outcome,
                             broadcast_object)
from hrm.model import Carry
from hrm.run_folders import list_checkpoints, previous_checkpoint_hint
from hrm.step_names import checkpoint_step, unrenamed_saves

FORMAT = "hrm-deeploop/train-v1"


def _carry_to_dict(carry) -> dict | None:
    if carry is None:
        return None
    return {"z_H": carry.z_H.cpu(), "z_L": carry.z_L.cpu(), "steps": carry.steps.cpu(),
            "halted": carry.halted.cpu(), "current_data": {k: v.cpu() for k, v in carry.current_data.items()}}


def _carry_from_dict(state: dict | None, device: torch.device, dtype: torch.dtype):
    """The saved carry on `device`, its states in the model's compute dtype there: the forward runs
    in the carry's dtype, so a CPU (float32) checkpoint resumed on CUDA would otherwise stay float32."""
    if state is None:
        return None
    return Carry(z_H=state["z_H"].to(device, dtype), z_L=state["z_L"].to(device, dtype), steps=state["steps"].to(device),
                 halted=state["halted"].to(device),
                 current_data={k: v.to(device) for k, v in state["current_data"].items()})


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class CheckpointNotSaved(RuntimeError):
    """A save that failed on some rank (a full disk, a quota, a write error), raised by every rank:
    nothing of it is kept, and the run's earlier checkpoints are as they were."""


def _remove(folder: Path, aside: Path | None = None) -> bool:
    """Delete a folder no longer wanted, renamed to `aside` first when given (one step, so that a
    kill during the slow deletion leaves no half-deleted `step_<N>/`, which could still look like a
    checkpoint, or no longer be one that pruning finds); whether it is gone. A failure (a file held
    open on NFS, one owned by another user) is said, not raised: losing the run over housekeeping
    would be worse than a folder left behind, which the run's next start or save tries again."""
    try:
        if aside is not None:
            if aside.exists():   # one an earlier removal could not finish
                shutil.rmtree(aside, ignore_errors=True)
            os.replace(folder, aside)
            folder = aside
        shutil.rmtree(folder)
    except OSError as e:
        print(f"warning: could not remove {folder} ({e}); the run's next start or save tries again, or delete "
              f"it by hand", file=sys.stderr, flush=True)
        return False
    return True


SHARED_FOLDER_REMEDY = ("every rank saves its part of each checkpoint into the run folder, so with several nodes it "
                        "must be on a filesystem they all share (set checkpoint_path to a folder there)")


def save_checkpoint(run_dir: str | Path, *, step: int, model, optimizers: dict, reader_state: dict, carry,
                    config: dict, info: DistInfo, keep: int = 0, evaluated_iterations: int | None = None,
                    final_evaluation_pending: bool = False, data: dict | None = None,
                    run_name: str | None = None, wandb_id: str | None = None) -> Path:
    """Collective: every rank must call it. Returns the final step folder. `evaluated_iterations`:
    how many of the reader's iterations have had their evaluation (a checkpoint written on an
    iteration's last batch, before its evaluation, leaves one pending); `final_evaluation_pending`:
    one written on the run's last step before its evaluation (a SIGTERM's). `data`: the training build's
    identity (arc_data.manifest.build_identity), kept in trainer.pt and model.pt so that resume and
    predict.py recognise another build of the same size. `run_name`: the run's name as it started
    (a default one holds its start time), kept so that a run resumed without run_name keeps it.
    `wandb_id`: its W&B run's id, kept so that every resume of the run logs to the same W&B run."""
    run_dir = Path(run_dir)
    final = run_dir / f"step_{step}"
    tmp = run_dir / f".step_{step}.tmp"
    latest_file = run_dir / "latest"

    def as_they_were() -> str:
        latest = f" (latest: {latest_file.read_text().strip()})" if latest_file.is_file() else ""
        return f"the run's checkpoints are as they were{latest}"

    def make_folder() -> None:
        if info.is_main:
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir(parents=True)

    # exchanged like the stages below: a disk already full refuses the folder itself, on rank 0 alone
    try:
        agree_on_outcome(make_folder, info, refusals=(OSError,))
    except AgreedOnEveryRank as e:
        raise CheckpointNotSaved(f"cannot save step {step} into {run_dir}: {e}; {as_they_were()}") from None

    def sees_folder() -> None:
        if not tmp.is_dir():
            # rank 0 made it and has told every rank so: this rank sees another filesystem (several
            # nodes, each with its own disk), where no checkpoint could be whole or resumed
            raise FileNotFoundError(f"{tmp.resolve()}, which rank 0 made, is not there on {socket.gethostname()}")

    # exchanged too: a rank raising alone would leave the others waiting in the next stage's
    # collective until its timeout (minutes), and no rank but it would say why
    try:
        agree_on_outcome(sees_folder, info, refusals=(FileNotFoundError,))
    except MissingOnEveryRank as e:
        if info.is_main:   # no rank writes into it
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointNotSaved(f"cannot save step {step} into {run_dir}: {e}: {SHARED_FOLDER_REMEDY}; "
                                 f"{as_they_were()}") from None

    def write_parts() -> None:
        write_atomic(tmp / f"rank_{info.rank}.pt", {"format": FORMAT, "carry": _carry_to_dict(carry),
                                                    "rng": _rng_state()})
        if info.is_main:
            save_model(str(tmp / "model.pt"), model, extra={"step": step, "data": data})
            write_atomic(tmp / "trainer.pt", {
                "format": FORMAT, "step": step, "world_size": info.world_size, "config": config,
                "scaling": model.scaling, "reader": reader_state, "evaluated_iterations": evaluated_iterations,
                "final_evaluation_pending": final_evaluation_pending, "data": data, "run_name": run_name,
                "wandb_id": wandb_id,
                # the config keeps data_path as typed (often relative to where training ran); this one
                # finds the build from anywhere (predict.py)
                "data_path_resolved": str(Path(config["data_path"]).resolve()) if config.get("data_path") else None,
                "optimizers": {name: opt.state_dict() for name, opt in optimizers.items()},
            })

    def put_in_place() -> None:
        if not info.is_main:
            return
        stale = None
        if final.exists():  # the same step written again (e.g. a resumed run re-reaching it)
            # set aside, not deleted first: the new one takes its place at once, and the deletion
            # (seconds for a large checkpoint, which a SIGKILL could cut) comes after
            stale = run_dir / f".step_{step}.old"
            if stale.exists():
                shutil.rmtree(stale)
            os.replace(final, stale)
        os.replace(tmp, final)
        pointer = run_dir / ".latest.tmp"
        pointer.write_text(final.name)
        os.replace(pointer, run_dir / "latest")
        if stale is not None:
            _remove(stale)
        if keep > 0:
            # this step and the keep-1 before it; never the one just written, nor the later steps
            # of a line this run branched off in its own folder (resumed from an earlier step): by
            # step number they would be the newest, and the new `latest` would name a pruned folder
            earlier = [c for c in list_checkpoints(run_dir) if checkpoint_step(c) < step]
            for old in earlier[:max(len(earlier) - (keep - 1), 0)]:
                _remove(old, aside=run_dir / f".step_{checkpoint_step(old)}.pruned")

    # Each stage's outcome is exchanged (in place of a barrier): a rank whose write fails (a full
    # disk, a quota) would otherwise leave the others waiting in the next collective until a timeout
    try:
        agree_on_outcome(write_parts, info, refusals=(OSError,))
    except AgreedOnEveryRank as e:
        if info.is_main:   # every rank is done with it; on a full disk, the space it took is needed
            shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointNotSaved(f"cannot save step {step} into {run_dir}: {e}; what it had written is removed, "
                                 f"and {as_they_were()}") from None
    try:
        agree_on_outcome(put_in_place, info, refusals=(OSError,))
    except AgreedOnEveryRank as e:
        raise CheckpointNotSaved(f"cannot put the save of step {step} in place in {run_dir}: {e}; resume=latest "
                                 f"continues from the newest complete checkpoint there") from None
    return final


def finish_unrenamed_saves(run_dir: str | Path) -> dict[Path, Path]:
    """Complete the saves unrenamed_saves finds, as they would have ended: `latest` names the step,
    the `.tmp` becomes `step_<N>`, the `.old` goes. Rank 0, holding the run folder, once every rank
    has loaded what it resumes (which may be that `.tmp`). Returns {.tmp folder: step folder}.
    `latest` is written first: a kill before the rename leaves the `.tmp` still found as the newest."""
    run_dir = Path(run_dir)
    finished = {}
    for tmp in unrenamed_saves(run_dir):
        final = run_dir / f"step_{checkpoint_step(tmp)}"
        pointer = run_dir / ".latest.tmp"
        pointer.write_text(final.name)
        os.replace(pointer, run_dir / "latest")
        os.replace(tmp, final)
        shutil.rmtree(run_dir / f".{final.name}.old")
        finished[tmp] = final
    return finished


def remove_unfinished_saves(run_dir: str | Path) -> list[str]:
    """Remove the `.step_<N>.tmp/` folders (and `.latest.tmp`, the `.step_<N>.old/` of a step saved
    again, the `.step_<N>.pruned/` of one keep_checkpoints removes) that a run killed while saving
    or pruning left behind, and return the names of those gone (one that cannot be removed is a
    warning). Each is as big
    as a checkpoint, never read, and otherwise only replaced if the run saves that same step again.
    Only for the process holding the run folder, after finish_unrenamed_saves (or a complete save
    left unrenamed would go too)."""
    run_dir = Path(run_dir)
    removed = []
    for leftover in (sorted(run_dir.glob(".step_*.tmp")) + sorted(run_dir.glob(".step_*.old"))
                     + sorted(run_dir.glob(".step_*.pruned")) + sorted(run_dir.glob(".latest.tmp"))):
        if leftover.is_dir():
            gone = _remove(leftover)     # one still held open (NFS) is said, not fatal to the start
        else:
            leftover.unlink(missing_ok=True)
            gone = True
        if gone:
            removed.append(leftover.name)
    return removed


def check_run_folder_usable(run_dir: str | Path) -> None:
    """Refuse, at start-up, a run folder that cannot be made: a file where it would go, or in its
    path (`checkpoint_path=` pointed at a file by mistake). Found late, it would stop the run with
    mkdir's traceback after the model was built."""
    from evaluate.outputs import nearest_existing
    folder = nearest_existing(Path(run_dir))
    if not folder.is_dir():
        where = "is" if folder == Path(run_dir) else "has in its path"
        raise ValueError(f"the run folder {run_dir} {where} {folder}, which is not a folder; "
                         f"choose another checkpoint_path / run_name")


def unwritable_run_folder(run_dir: str | Path, error: OSError) -> ValueError:
    """The start-up refusal for a run folder this process cannot write into."""
    where = f"{error.strerror}: {error.filename}" if error.filename else str(error)
    return ValueError(f"cannot write into the run folder {run_dir} ({where}); its checkpoints and log go there: "
                      f"make it writable, or choose another checkpoint_path / run_name")


def check_run_folder_writable(run_dir: str | Path) -> None:
    """Refuse, at start-up, a run folder that exists but cannot be written (read-only, on a
    read-only mount, or with an unwritable log.jsonl / all_config.yaml): found at the first save,
    it would stop the run with a traceback and lose every step since its start. The test writes
    and removes a probe file, and opens the files a resumed run appends to or rewrites without
    changing them. Rank 0, once it holds the folder (nobody else writes there)."""
    run_dir = Path(run_dir)
    probe = run_dir / f".write_probe.{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
        for name in ("log.jsonl", "all_config.yaml"):
            if (run_dir / name).exists():
                open(run_dir / name, "a").close()
    except OSError as e:
        raise unwritable_run_folder(run_dir, e) from None


def _sees(path: Path) -> bool:
    """Whether `path`, which another node has just made, is there. NFS may answer from a lookup
    cached before it existed (this rank looked for the run folder before rank 0 made it): opening
    each folder above it, top down, has the client ask the server again (close-to-open). A folder
    this user may pass through but not list (a shared /project of mode 711) is skipped, not the
    end: the folders below it, the run folder's parent above all, are the ones that matter."""
    if path.exists():
        return True
    for folder in reversed(path.absolute().parents):
        try:
            os.listdir(folder)
        except OSError:
            continue
    return path.exists()


def check_run_folder_shared(run_dir: str | Path, info: DistInfo) -> None:
    """Collective; nothing for one process. Refuse, at start-up, ranks that do not see the run
    folder rank 0 holds (several nodes, each with the folder on its own disk): found at the first
    save, hours in, it would stop the run there. Rank 0 writes a file of a new name into its run
    folder (a folder that exists on every node, a resumed run's, or a lock file left there, proves
    nothing), every rank looks for it in its own run folder; rank 0 then removes it."""
    if not info.enabled:
        return
    run_dir = Path(run_dir)
    # rank 0's probe name, host and folder: every rank looks for that name, and names rank 0's folder
    name, host, folder = broadcast_object((f".shared_probe.{uuid.uuid4().hex}", socket.gethostname(),
                                           str(run_dir.absolute())), info)
    probe = run_dir / name

    def make_probe() -> None:
        if info.is_main:
            probe.write_bytes(b"")

    def sees_probe() -> None:
        if not _sees(probe):   # said alike by the ranks of one node (merge_rank_messages groups them)
            raise FileNotFoundError(f"{run_dir.absolute()} on {socket.gethostname()} is not the run folder rank 0 "
                                    f"holds ({folder} on {host}): a file rank 0 has just written there is not in it")
    try:
        try:
            agree_on_outcome(make_probe, info, refusals=(OSError,))
        except AgreedOnEveryRank as e:   # a folder rank 0 had just checked
            raise RefusedOnEveryRank(f"cannot write into the run folder {run_dir}: {e}") from None
        try:
            agree_on_outcome(sees_probe, info, refusals=(FileNotFoundError,))
        except MissingOnEveryRank as e:
            raise RefusedOnEveryRank(f"{e}; {SHARED_FOLDER_REMEDY}") from None
    finally:
        if info.is_main:
            with contextlib.suppress(OSError):
                probe.unlink(missing_ok=True)


def trained_data_path(trainer: dict) -> str | None:
    """The build a trainer.pt's run trained on, as this process finds it: its recorded absolute path
    while a build is there (data_path as typed is relative to where the run started, and from
    elsewhere may name another build, or none), else data_path as typed (None when not recorded)."""
    config = trainer.get("config") if isinstance(trainer, dict) else None
    typed = config.get("data_path") if isinstance(config, dict) else None
    resolved = trainer.get("data_path_resolved") if isinstance(trainer, dict) else None
    if isinstance(resolved, str) and resolved and (Path(resolved) / "train" / "dataset.json").is_file():
        return resolved
    return typed


def load_checkpoint(step_dir: str | Path, *, model, optimizers: dict | Callable[[], dict], info: DistInfo,
                    check_config=None) -> dict:
    """Restore model, optimizers and this rank's RNG; returns {"step", "reader", "carry", "config",
    "evaluated_iterations" (None in checkpoints that predate it), "final_evaluation_pending" (False
    in those), "run_name" and "wandb_id" (None in those), "world_size" (the saving run's)}.
    `check_config(saved_config, saved_data)` runs before anything is restored (the weights can be
    GBs) and may refuse the checkpoint; `saved_data` is the build identity (None in checkpoints
    that predate it). `optimizers` may be a function that builds them, called once `check_config`
    has accepted the checkpoint (a refused resume then does not wait for their construction).

    The carry is restored only when the world size is unchanged (each rank's rows in flight are
    its own); otherwise every rank starts from a fresh carry. A file that cannot be read is named,
    with the previous checkpoint suggested.

    Not collective: each rank reads its own rank file, so one rank can fail where the others
    succeed; the caller exchanges the outcome (Trainer: hrm.distributed.agree_on_outcome), or
    the others would go on into a collective the failed rank never reaches."""
    step_dir = Path(step_dir)
    hint = previous_checkpoint_hint(step_dir)
    trainer = read_torch_file(step_dir / "trainer.pt", hint)
    if not isinstance(trainer, dict) or trainer.get("format") != FORMAT:
        raise CheckpointError(f"{step_dir / 'trainer.pt'}: not a {FORMAT} checkpoint")
    if check_config is not None:
        check_config(trainer["config"], recorded_build(trainer.get("data"), step_dir / "trainer.pt"))
    if callable(optimizers):
        optimizers = optimizers()
    weights = read_torch_file(step_dir / "model.pt", hint)
    load_state_strict(model, weights["state"])
    if set(trainer["optimizers"]) != set(optimizers):
        raise ValueError(f"{step_dir}: optimizers {sorted(trainer['optimizers'])} in the checkpoint, "
                         f"{sorted(optimizers)} in this run")
    for name, opt in optimizers.items():
        opt.load_state_dict(trainer["optimizers"][name])
    carry = None
    rank_file = step_dir / f"rank_{info.rank}.pt"
    same_world = trainer["world_size"] == info.world_size
    if same_world:
        if not rank_file.is_file():   # written by every rank: its absence is damage, not a new world
            raise CheckpointError(f"{rank_file}: missing (the checkpoint was written by {info.world_size} "
                                  f"ranks, each with its rows in flight and random state){hint}")
        per_rank = read_torch_file(rank_file, hint)
        carry = _carry_from_dict(per_rank["carry"], info.device, model.compute_dtype(info.device))
        _set_rng_state(per_rank["rng"])
    elif info.is_main:
        print(f"resume: world size {trainer['world_size']} -> {info.world_size}; rows in flight restart "
              f"from a fresh carry", flush=True)
    return {"step": trainer["step"], "reader": trainer["reader"], "carry": carry, "config": trainer["config"],
            "evaluated_iterations": trainer.get("evaluated_iterations"),
            "final_evaluation_pending": trainer.get("final_evaluation_pending", False),
            "run_name": trainer.get("run_name"), "wandb_id": trainer.get("wandb_id"),
            "world_size": trainer["world_size"]}
