"""Visit alignment of weight-tied sublayers (the kappa_R the DeepLoop paper leaves unmeasured).

A sublayer (attention or SwiGLU of one physical block) is visited R times per segment. Its
gradient is the sum of one contribution per visit, g = sum_r g_r. We report, per sublayer,
    alignment    ||sum_r g_r|| / sum_r ||g_r||   1 = all visits push the same way,
                                                 ~1/sqrt(R) = decorrelated, 0 = they cancel
    mean_cosine  mean over pairs r < s of cos(g_r, g_s), leaving out pairs with a zero g_r (a
                 visit that contributes nothing has no direction; nan when no pair is left)
on one diagnostic step whose forward keeps the graph through *every* visit of the segment (not the
one-step gradient used for training).

How the per-visit contributions are obtained: every weight of a block is used by one linear map
y = x W^T per visit, whose contribution to dL/dW is (dL/dy)^T x. Forward hooks record each visit's
input x and output y; one ``torch.autograd.grad`` of the loss with respect to all recorded outputs
gives every dL/dy at once; the products give g_r per matrix, concatenated per sublayer. Nothing
touches the parameters' ``.grad``, the optimizers, or the caller's carry, and the random state is
restored, so it can run between training steps. Memory grows with batch * visits: use ``max_rows``.

Public API
----------
``alignment(contributions: list[Tensor]) -> {"alignment", "mean_cosine", "visits"}``
``record_visit_gradients(modules: dict[str, nn.Module], run) -> {sublayer: [g_r, ...]}``
    ``run()`` computes and returns the loss; ``modules`` maps a sublayer name to the module whose
    ``hrm.layers.Linear`` children make up that sublayer.
``sublayers(model) -> {name: module}``  "H.0.attn", "H.0.mlp", ..., "L.1.mlp"
``visit_alignment(loss_head, batch, carry=None, max_rows=None) -> {sublayer: {...}, "summary": {...}}``
    ``loss_head`` is the eager ``ACTLossHead`` (not a compiled or DDP wrapper); run it between
    optimizer steps, every few hundred steps (it costs about one full-graph training step). The
    summary (mean and min alignment, mean cosine) covers the sublayers visited at least twice.
"""
from __future__ import annotations

import itertools

import torch
from torch import nn

from hrm.layers import Linear


def alignment(contributions: list[torch.Tensor]) -> dict:
    flat = torch.stack([g.detach().double().flatten() for g in contributions])
    norms = flat.norm(dim=1)
    total = norms.sum()
    ratio = (flat.sum(0).norm() / total).item() if total > 0 else float("nan")
    cosines = [torch.dot(flat[i], flat[j]) / (norms[i] * norms[j])
               for i, j in itertools.combinations(range(len(flat)), 2)
               if norms[i] > 0 and norms[j] > 0]
    mean_cos = torch.stack(cosines).mean().item() if cosines else float("nan")
    return {"alignment": ratio, "mean_cosine": mean_cos, "visits": len(contributions)}


def record_visit_gradients(modules: dict[str, nn.Module], run) -> dict[str, list[torch.Tensor]]:
    """Per sublayer, the list (one entry per visit) of its flattened weight-gradient contribution."""
    records: dict[str, list] = {}   # linear name -> [(input, output), ...] in visit order
    owners: dict[str, str] = {}     # linear name -> sublayer name
    handles = []

    def hook_for(name):
        def hook(module, inputs, output):
            if output.requires_grad:   # only visits that are part of the graph
                records.setdefault(name, []).append((inputs[0], output))
        return hook

    for sub_name, sub in modules.items():
        for lin_name, lin in sub.named_modules():
            if isinstance(lin, Linear):
                name = f"{sub_name}.{lin_name}"
                owners[name] = sub_name
                handles.append(lin.register_forward_hook(hook_for(name)))
    try:
        loss = run()
    finally:
        for h in handles:
            h.remove()
    names = [n for n in owners if n in records]   # module order, so slices line up with parameters()
    outputs = [y for n in names for _, y in records[n]]
    grads = torch.autograd.grad(loss, outputs, allow_unused=True)

    per_linear: dict[str, list[torch.Tensor]] = {}
    it = iter(grads)
    for n in names:
        for x, y in records[n]:
            dy = next(it)
            if dy is None:
                dy = torch.zeros_like(y)
            # dL/dW for y = x W^T, summed over every position of the batch.
            g = dy.reshape(-1, dy.shape[-1]).float().T @ x.detach().reshape(-1, x.shape[-1]).float()
            per_linear.setdefault(n, []).append(g.flatten())

    result: dict[str, list[torch.Tensor]] = {}
    for sub_name in modules:
        mine = [n for n in names if owners[n] == sub_name]
        if not mine:
            continue
        visits = {len(per_linear[n]) for n in mine}
        if len(visits) != 1:
            raise RuntimeError(f"sublayer {sub_name}: its matrices were visited {visits} times")
        result[sub_name] = [torch.cat([per_linear[n][r] for n in mine]) for r in range(visits.pop())]
    return result


def sublayers(model) -> dict[str, nn.Module]:
    out = {}
    for tag, module in (("H", model.H_module), ("L", model.L_module)):
        for i, block in enumerate(module.blocks):
            out[f"{tag}.{i}.attn"] = block.attn
            out[f"{tag}.{i}.mlp"] = block.mlp
    return out


def visit_alignment(loss_head, batch: dict, carry=None, max_rows: int | None = None) -> dict:
    """Alignment per sublayer on one full-graph training-mode ACT step (no parameter changes)."""
    model = loss_head.model
    if max_rows is not None:
        batch = {k: v[:max_rows] for k, v in batch.items()}
        if carry is not None:
            carry = carry.rows(slice(0, max_rows))
    if carry is None:
        carry = loss_head.initial_carry(batch)  # the forward never mutates a given carry
    devices = [batch["inputs"].device] if batch["inputs"].is_cuda else []

    def run():
        with torch.enable_grad():
            return loss_head(carry, batch).loss

    # The diagnostic forward must not disturb training: keep the puzzle rows the sparse
    # optimizer may still have to apply, and the random stream of the ACT exploration.
    puzzle = getattr(model, "puzzle_embedding", None)
    saved_rows = ((puzzle.batch_rows, puzzle.batch_ids, list(puzzle.lookups), puzzle.prepared)
                  if puzzle is not None else None)
    model.full_graph_segments = True
    try:
        with torch.random.fork_rng(devices=devices):
            contributions = record_visit_gradients(sublayers(model), run)
    finally:
        model.full_graph_segments = False
        if puzzle is not None:
            puzzle.batch_rows, puzzle.batch_ids, puzzle.lookups, puzzle.prepared = saved_rows
    report = {name: alignment(gs) for name, gs in contributions.items()}
    report["summary"] = _summary(report)
    return report


def _summary(report: dict) -> dict:
    """Mean and min alignment, mean cosine, over the sublayers visited at least twice. A sublayer
    visited once (H with H_cycles=1) has alignment 1 by definition and no pair to take a cosine of
    (nan): counted, it would raise the means and turn the mean cosine into nan. nan when no
    sublayer is visited twice: there is nothing to measure."""
    looped = [r for r in report.values() if r["visits"] > 1]
    if not looped:
        return {"mean_alignment": float("nan"), "min_alignment": float("nan"), "mean_cosine": float("nan")}
    values = [r["alignment"] for r in looped]
    return {"mean_alignment": sum(values) / len(values), "min_alignment": min(values),
            "mean_cosine": sum(r["mean_cosine"] for r in looped) / len(looped)}
