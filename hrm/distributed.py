"""Process group setup and the few collectives the trainer needs.

`torchrun` sets RANK/WORLD_SIZE/LOCAL_RANK; a plain `python pretrain.py` is a world of one and
never touches torch.distributed. NCCL on CUDA, gloo on CPU: the same code path either way.
A stage that can fail on one rank alone ends with the ranks agreeing on its outcome
(`agree_on_outcome`), so that no rank goes on into a collective a failed one never reaches.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


DEVICES = ("auto", "cpu", "cuda")


def check_device(device: str) -> None:
    """ValueError for an unknown device, RuntimeError for device=cuda without CUDA."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda but CUDA is not available on this machine (use device=cpu or device=auto)")


def uses_cuda(device: str) -> bool:
    """Whether `device` (auto, cpu or cuda) means CUDA on this machine."""
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def switch_on(setting, auto: bool) -> bool:
    """An `auto | true | false` setting (compile, compile_eval): `auto` takes the given default."""
    return setting is True or (setting == "auto" and auto)


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the process group if launched by torchrun; pick this process's device."""
    check_device(device)
    use_cuda = uses_cuda(device)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if world_size > 1 and missing:   # e.g. WORLD_SIZE exported by hand: torch would fail with "RANK expected"
        raise RuntimeError(f"WORLD_SIZE={world_size} is set but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                           f"not: start several processes with torchrun (--nproc-per-node), or unset WORLD_SIZE")
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        visible = torch.cuda.device_count()
        if local_rank >= visible:   # e.g. --nproc-per-node 8 with CUDA_VISIBLE_DEVICES naming 4
            raise RuntimeError(f"LOCAL_RANK {local_rank} but only {visible} GPU(s) are visible to this process: "
                               f"start at most {visible} processes per node (torchrun --nproc-per-node), or "
                               f"check CUDA_VISIBLE_DEVICES")
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistInfo(rank, world_size, local_rank, dev)


def shutdown(wait_for_peers: bool = False) -> None:
    """Leave the process group. ``wait_for_peers`` (after a clean run) first waits at a barrier,
    so that no rank tears gloo down while a peer still talks to it (that aborts the peer with
    "terminate called without an active exception"); after an error a barrier could hang."""
    if dist.is_initialized():
        if wait_for_peers:
            dist.barrier()
        dist.destroy_process_group()


def broadcast_object(obj, info: DistInfo):
    """Rank 0's value of `obj` on every rank (e.g. a run name containing a time stamp)."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj, info: DistInfo) -> list:
    """Every rank's value of `obj`, in rank order, on every rank."""
    if not info.enabled:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_module_(module: torch.nn.Module, info: DistInfo) -> None:
    """Start every rank from rank 0's parameters and buffers."""
    if not info.enabled:
        return
    with torch.no_grad():
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor, src=0)


def all_reduce_grads_(params, info: DistInfo) -> None:
    """Sum the gradients over ranks, in one flat buffer (one collective instead of one per tensor).
    The loss is already divided by the *global* batch size, so the sum is the global mean."""
    if not info.enabled:
        return
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n


def all_reduce_sum_(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(tensor)
    return tensor


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


class AgreedOnEveryRank(Exception):
    """An error every rank raised with the same message (`agree_on_outcome`): pretrain.py says it
    once per machine rather than once per rank. Caught as such by a caller that words any failed
    stage alike, whether refused or missing."""


class RefusedOnEveryRank(AgreedOnEveryRank, ValueError):
    """A stage refused on some rank (a bad setting, a damaged or foreign checkpoint), raised by all."""


class MissingOnEveryRank(AgreedOnEveryRank, FileNotFoundError):
    """A stage failed on some ranks, each for a missing file, raised by all."""


def rank_span(ranks: list[int]) -> str:
    """`rank 3`, `ranks 0-3, 6`: sorted ranks, runs of consecutive ones as ranges (8 nodes of 8
    GPUs missing one file name a range per node, not 64 numbers)."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    spans = [str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(spans)


def merge_rank_messages(messages: dict[int, str], world_size: int) -> str:
    """One message for every rank from the failed ranks' (rank -> message): each distinct message
    once, after the ranks it came from, unless every rank failed alike (then it is the message)."""
    by_message: dict[str, list[int]] = {}
    for rank in sorted(messages):
        by_message.setdefault(messages[rank], []).append(rank)
    if len(by_message) == 1 and len(messages) == world_size:
        return next(iter(by_message))
    return "\n".join(f"{rank_span(ranks)}: {message}" for message, ranks in by_message.items())


def agree_on_outcome(stage, info: DistInfo, refusals=(ValueError, FileNotFoundError)):
    """Run `stage()` on every rank (collective; `stage` itself must hold no collective) and return
    its result. If it raised one of `refusals` on any rank, every rank raises the same error, with
    the failed ranks' messages (merge_rank_messages): a check that fails on one rank only (a file
    missing on one node) stops all of them, instead of leaving the others waiting in their next
    collective. The error is a MissingOnEveryRank when every failure was a FileNotFoundError, else a
    RefusedOnEveryRank; this rank's own error, if any, is its cause. Other exceptions (bugs)
    propagate from their rank as they are."""
    try:
        result, outcome, own = stage(), None, None
    except refusals as e:
        result, outcome, own = None, (isinstance(e, FileNotFoundError), str(e)), e
    failed = {rank: o for rank, o in enumerate(gather_objects(outcome, info)) if o is not None}
    if not failed:
        return result
    message = merge_rank_messages({rank: text for rank, (_, text) in failed.items()}, info.world_size)
    all_missing = all(missing for missing, _ in failed.values())
    raise (MissingOnEveryRank if all_missing else RefusedOnEveryRank)(message) from own
