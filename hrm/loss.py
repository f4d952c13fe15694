"""Losses and metrics of the ACT-trained HRM.

Per row: the language-model loss averaged over its labelled tokens (labels != -100), then summed
over rows; plus 0.5 * (BCE(q_halt, row exactly correct) + BCE(q_continue, target_q_continue)), both
summed over rows. The trainer divides the returned loss by the *global* batch size.

Metrics are summed counts over the rows that halted this step (and have at least one label):
count, accuracy (sum of per-row token accuracy), exact_accuracy, q_halt_accuracy (q_halt >= 0 agrees
with exactness), steps; plus the summed losses lm_loss, q_halt_loss and, in training,
q_continue_loss. All are float32 scalars, so they stack into one tensor for a single all-reduce.

Public API
----------
``stablemax_cross_entropy(logits, labels) -> [B, seq]``  float64, 0 where ignored
``softmax_cross_entropy(logits, labels) -> [B, seq]``    float32, 0 where ignored
``IGNORE_LABEL = -100``
``ACTLossHead(model, loss_type=None)``  (loss_type defaults to model.arch.loss_type)
    ``initial_carry(batch)``
    ``forward(carry, batch) -> ACTStep(carry, loss, metrics, outputs, all_halted)``
        outputs are detached; all_halted is a bool tensor (no host sync)
    ``evaluate(batch, segment=None) -> (metrics, outputs)``  one evaluation batch: every row reset
        once, exactly halt_max_steps segments; metrics and outputs (with preds) of the final segment
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_LABEL = -100


def _stablemax_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """log of s(x) / sum s(x), s(x) = x + 1 for x >= 0 and 1 / (1 - x) below (arXiv 2501.04697).

    The negative branch reads min(x, 0), so the branch torch.where discards never divides by zero
    (at x = 1 it would give an infinite derivative, and 0 * inf poisons the gradient)."""
    s = torch.where(logits >= 0, logits + 1, 1 / (1 - logits.clamp(max=0)))
    return torch.log(s) - torch.log(s.sum(-1, keepdim=True))


def stablemax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    log_probs = _stablemax_log_probs(logits.double())
    valid = labels != IGNORE_LABEL
    picked = log_probs.gather(-1, torch.where(valid, labels, 0).long().unsqueeze(-1)).squeeze(-1)
    return torch.where(valid, -picked, 0.0)


def softmax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    flat = F.cross_entropy(logits.float().flatten(0, -2), labels.long().flatten(),
                           ignore_index=IGNORE_LABEL, reduction="none")
    return flat.view(labels.shape)


LOSSES = {"stablemax": stablemax_cross_entropy, "softmax": softmax_cross_entropy}


class ACTStep(NamedTuple):
    carry: object
    loss: torch.Tensor
    metrics: dict
    outputs: dict
    all_halted: torch.Tensor


class ACTLossHead(nn.Module):
    def __init__(self, model: nn.Module, loss_type: str | None = None):
        super().__init__()
        self.model = model
        self.loss_type = loss_type or model.arch.loss_type
        if self.loss_type not in LOSSES:
            raise ValueError(f"loss_type must be one of {sorted(LOSSES)}, got {self.loss_type!r}")
        self.token_loss = LOSSES[self.loss_type]

    def initial_carry(self, batch):
        return self.model.initial_carry(batch)

    def forward(self, carry, batch) -> ACTStep:
        carry, outputs = self.model(carry, batch)
        loss, metrics = self.loss_and_metrics(outputs, carry.current_data["labels"], carry.halted,
                                              carry.steps)
        detached = {k: v.detach() for k, v in outputs.items()}
        return ACTStep(carry, loss, metrics, detached, carry.halted.all())

    def loss_and_metrics(self, outputs: dict, labels: torch.Tensor, halted: torch.Tensor,
                         steps: torch.Tensor):
        logits, q_halt = outputs["logits"], outputs["q_halt_logits"]
        with torch.no_grad():
            labelled = labels != IGNORE_LABEL
            label_counts = labelled.sum(-1)
            divisor = label_counts.clamp_min(1)  # rows without labels contribute 0, not NaN
            correct = labelled & (logits.argmax(-1) == labels)
            row_exact = correct.sum(-1) == label_counts
            counted = halted & (label_counts > 0)
            metrics = {
                "count": counted.sum(),
                "accuracy": torch.where(counted, correct.sum(-1) / divisor, 0.0).sum(),
                "exact_accuracy": (counted & row_exact).sum(),
                "q_halt_accuracy": (counted & ((q_halt >= 0) == row_exact)).sum(),
                "steps": torch.where(counted, steps, 0).sum(),
            }

        lm_loss = (self.token_loss(logits, labels).sum(-1) / divisor).sum()
        q_halt_loss = F.binary_cross_entropy_with_logits(q_halt, row_exact.to(q_halt.dtype),
                                                         reduction="sum")
        metrics["lm_loss"] = lm_loss.detach()
        metrics["q_halt_loss"] = q_halt_loss.detach()
        q_loss = q_halt_loss
        if "target_q_continue" in outputs:
            q_continue_loss = F.binary_cross_entropy_with_logits(
                outputs["q_continue_logits"], outputs["target_q_continue"], reduction="sum")
            metrics["q_continue_loss"] = q_continue_loss.detach()
            q_loss = q_loss + q_continue_loss
        loss = lm_loss + 0.5 * q_loss
        metrics = {k: v.float() for k, v in metrics.items()}
        return loss, metrics

    @torch.no_grad()
    def evaluate(self, batch, segment=None):
        """Metrics (summed counts, as in training) and outputs of one evaluation batch
        (``segment``: see ``HRM.predict``)."""
        outputs = self.model.predict(batch, segment)
        size = batch["inputs"].shape[0]
        device = batch["inputs"].device
        steps = torch.full((size,), self.model.arch.halt_max_steps, dtype=torch.int32, device=device)
        halted = torch.ones(size, dtype=torch.bool, device=device)
        _, metrics = self.loss_and_metrics(outputs, batch["labels"], halted, steps)
        return metrics, outputs
