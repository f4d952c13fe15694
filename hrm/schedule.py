"""A run's length and its learning-rate schedule: HRM's estimate of the steps its epochs make, the
refusal of a run that would train none, and the lr at each step (linear warmup, then cosine)."""
from __future__ import annotations

import math

from hrm.pretrain_config import PretrainConfig


def lr_at(step: int, base_lr: float, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warmup from 0, then cosine from base_lr to base_lr * min_ratio at `total` steps, and
    base_lr * min_ratio after (the trainer stops at `total`; past it the cosine would climb back)."""
    if step < warmup:
        return base_lr * step / max(1, warmup)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def estimated_total_steps(config: PretrainConfig, train_split) -> int:
    """HRM's estimate: epochs * groups * mean examples per puzzle / global batch."""
    meta = train_split.metadata
    return int(config.epochs * meta.total_groups * meta.mean_puzzle_examples / config.global_batch_size)


def check_some_steps(config: PretrainConfig, train_split, total_steps: int) -> None:
    """A run whose estimate rounds down to 0 steps (epochs=1 on a small build) would train nothing,
    save a step_0 checkpoint and report itself as 'already finished': refuse it, with the sum. So
    would one whose evaluation interval draws less than a batch: the reader drops each iteration's
    incomplete last batch, here its only one (epochs=4 eval_interval=1 with a batch above an epoch)."""
    meta = train_split.metadata
    per_epoch = meta.total_groups * meta.mean_puzzle_examples / config.global_batch_size
    if total_steps < 1:
        raise ValueError(f"the run would train 0 steps: its length is estimated as epochs={config.epochs} x "
                         f"{meta.total_groups} puzzle groups x {meta.mean_puzzle_examples:g} mean examples per "
                         f"puzzle / global_batch_size={config.global_batch_size} = {config.epochs * per_epoch:.3g}, "
                         f"rounded down; raise epochs (or lower global_batch_size)")
    if int(config.epochs_per_iteration * per_epoch) < 1:
        raise ValueError(f"the run would train 0 steps: each evaluation interval (eval_interval="
                         f"{config.eval_interval} epochs) draws about {config.epochs_per_iteration} x "
                         f"{meta.total_groups} puzzle groups x {meta.mean_puzzle_examples:g} mean examples per "
                         f"puzzle = {config.epochs_per_iteration * per_epoch * config.global_batch_size:.3g} examples, "
                         f"less than one global_batch_size={config.global_batch_size}, and an interval's incomplete "
                         f"last batch is dropped; raise eval_interval (or lower global_batch_size)")
