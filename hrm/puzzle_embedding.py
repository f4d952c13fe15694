"""Per-puzzle embeddings: a large table trained sparsely by sign-SGD, outside the dense optimizer.

The table ([num_puzzle_identifiers, ndim], zero-initialised, float32) is a persistent *buffer*, not
a parameter: AdamATan2 never sees it, and only the rows of the current batch change per step. In a
training forward (training mode and grad enabled) the looked-up rows have a zero leaf tensor of
their shape added; the leaf's .grad is then exactly the rows' gradient, and the optimizer reads it
and the ids it came from. The trainer makes that leaf before the (compiled) step with
``prepare_lookup``: a tensor made to require grad inside torch.compile breaks the graph, one made
outside is just another input, so the whole ACT step stays one graph. Without it (eager callers,
tests) the forward makes its own leaf.

Sign-SGD with decoupled weight decay, per unique id u of the (global) batch:
    g_u = sum of the gradients of every batch row with id u
    table[u] <- table[u] * (1 - lr * weight_decay) - lr * sign(g_u)
Under torch.distributed (NCCL or gloo) the (ids, gradients) of all ranks are all-gathered first,
so every rank applies the same update and the replicated tables stay identical. Every rank must
use the same local batch size. Gradient accumulation works the same way within a rank: every
training lookup since the last ``zero_grad`` joins the step (micro-batches in order), so k
micro-batches update the table exactly as k ranks would.

Public API
----------
``PuzzleEmbedding(num_identifiers, ndim)``    forward(ids [B]) -> rows [B, ndim] (float32);
                                              ``table`` buffer; ``batch_rows`` (the gradient leaf)
                                              and ``batch_ids`` of the latest training forward,
                                              ``lookups`` all of them since the optimizer's last
                                              zero_grad; ``prepare_lookup(B)`` makes the next
                                              training forward's (``prepared``).
``PuzzleSignSGD(embedding, lr=1e-2, weight_decay=0.1)``  a torch Optimizer (param_groups[0]["lr"]
                                              is what a schedule sets); step(), zero_grad().
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class PuzzleEmbedding(nn.Module):
    def __init__(self, num_identifiers: int, ndim: int):
        super().__init__()
        self.register_buffer("table", torch.zeros(num_identifiers, ndim))
        self.batch_rows: torch.Tensor | None = None
        self.batch_ids: torch.Tensor | None = None
        self.lookups: list[tuple[torch.Tensor, torch.Tensor]] = []   # (leaf, ids) per training forward
        self.prepared: tuple[torch.Tensor, torch.Tensor] | None = None

    def prepare_lookup(self, batch_size: int) -> None:
        """Make the next training forward's gradient leaf and ids buffer (for `batch_size` rows) here,
        outside any compiled region, and register them as a lookup: the forward then only reads the
        leaf and fills the ids in place, which torch.compile traces without a graph break and, for
        every micro-batch and step, without a recompile."""
        device = self.table.device
        leaf = torch.zeros(batch_size, self.table.shape[1], device=device, requires_grad=True)
        ids = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.prepared = (leaf, ids)
        self.batch_rows, self.batch_ids = leaf, ids
        self.lookups.append((leaf, ids))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.long()
        rows = self.table[ids]
        if self.training and torch.is_grad_enabled():
            # rows + a zero leaf: the same values, and the leaf's .grad is exactly the per-row
            # gradient the sparse optimizer needs; the table itself never enters autograd.
            if self.prepared is None or self.prepared[0].shape != rows.shape:
                self.prepare_lookup(len(ids))  # eager callers (under torch.compile this breaks the graph)
            (leaf, batch_ids), self.prepared = self.prepared, None
            batch_ids.copy_(ids)
            rows = rows + leaf
        return rows


def _all_gather(t: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts)


def sum_rows_by_slot(slot: torch.Tensor, rows: torch.Tensor, slots: int,
                     fixed_order: bool | None = None) -> torch.Tensor:
    """[slots, D]: row s is the sum of the `rows` whose `slot` is s.

    Every rank applies sign(sum) to its own copy of the table, so the sums must be bitwise equal on
    all ranks, or a sum within rounding of zero takes another sign on one rank and the tables drift
    apart for good (they are synchronised only at start-up). The CPU's index_add_ adds in row order;
    CUDA's adds with atomics, in no fixed order. There (`fixed_order`, the default off the CPU)
    index_put_ with accumulate=True is used: on CUDA it sorts the slots and adds each one's rows in
    turn, the same way every time (on the CPU it may split the work across threads)."""
    if fixed_order is None:
        fixed_order = rows.device.type != "cpu"
    summed = torch.zeros(slots, rows.shape[1], dtype=rows.dtype, device=rows.device)
    if fixed_order:
        return summed.index_put_((slot,), rows, accumulate=True)
    return summed.index_add_(0, slot, rows)


class PuzzleSignSGD(torch.optim.Optimizer):
    def __init__(self, embedding: PuzzleEmbedding, lr: float = 1e-2, weight_decay: float = 0.1):
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        super().__init__([embedding.table], dict(lr=lr, weight_decay=weight_decay))
        self.embedding = embedding

    @torch.no_grad()
    def step(self, closure=None):
        # Every lookup whose rows received a gradient (several under gradient accumulation).
        done = [(leaf, ids) for leaf, ids in self.embedding.lookups if leaf.grad is not None]
        if not done:
            return None  # no training forward/backward since the last step: nothing to update
        grads = torch.cat([leaf.grad for leaf, _ in done])
        ids = torch.cat([ids for _, ids in done]).long()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            ids, grads = _all_gather(ids), _all_gather(grads)
        unique_ids, slot = torch.unique(ids, return_inverse=True)
        summed = sum_rows_by_slot(slot, grads, len(unique_ids))
        group = self.param_groups[0]
        lr, weight_decay = group["lr"], group["weight_decay"]
        table = self.embedding.table  # read it here: .to(device) replaces buffer objects
        table[unique_ids] = table[unique_ids] * (1.0 - lr * weight_decay) - lr * torch.sign(summed)
        return None

    def zero_grad(self, set_to_none: bool = True):
        """Forget the looked-up rows and their gradients (either way: a row kept with a zeroed
        gradient would still be decayed by the next step)."""
        for leaf, _ in self.embedding.lookups:
            leaf.grad = None
        self.embedding.lookups.clear()
        # a lookup prepared but not yet used was registered above: its forward would go uncounted
        self.embedding.prepared = None
