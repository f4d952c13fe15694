"""Did a training run train? The unigram floor of a build and the classification of a loss curve.

Unigram floor. The trainer's LM loss (hrm/loss.py) averages the token cross-entropy over each row's
labelled tokens, then over the rows of the batch. A model that ignores its input and predicts one
fixed distribution q at every position therefore has expected loss CE(m, q), where m is the
*row-weighted* label marginal: the mean over training rows of each row's label frequencies (a row
with 30 labelled cells weighs as much as one with 900). CE(m, q) is smallest at q = m, where it
equals the entropy H(m). That is the floor.

Stablemax or softmax? The floor is the same. Softmax reaches any distribution with positive entries
(logits log m). Stablemax, s(x) = x + 1 for x >= 0 and 1 / (1 - x) below, maps the real line onto
(0, inf), so it reaches them too: choose s_k = m_k / min(m), then x_k = s_k - 1 (>= 0).
`floor_logits` returns such logits and the tests put them through hrm.loss's own functions. What
the loss type changes is how quickly training gets there, not where "predicting the marginal" is.

Rows are weighted as the training reader draws them: every group (a task and its augmentations)
equally often, one of its puzzles at random, all of that puzzle's examples. (How long each row
stays in the ACT carry is ignored: it does not depend on its labels at the start of training.)

Classification of a run, from its exit code and its per-step LM loss (`train/lm_loss`):
  diverged  the trainer stopped with exit code 3 (non-finite loss or gradient), or a logged loss
            is non-finite;
  stuck     the run ends at the floor: the mean of its last `window` losses is not below
            floor * (1 - margin). This covers "never left the floor" and also "dipped below it and
            came back", which has not learned anything that lasts; single steps are noisy (a batch
            with more black cells has a lower loss), hence the window rather than one value;
  trained   the run ends below the floor by more than the margin;
  error     anything else (a crash, or no losses logged): not a result, and rerun on resume.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

TRAINED, DIVERGED, STUCK, ERROR = "trained", "diverged", "stuck", "error"
FINISHED = (TRAINED, DIVERGED, STUCK)    # statuses that are results; "error" is not
EXIT_DIVERGED = 3                        # pretrain.py's exit code for a non-finite loss or gradient
DEFAULT_MARGIN = 0.05                    # 5% below the floor counts as having left it
DEFAULT_WINDOW = 40                      # steps averaged for "final loss": on a small build a batch of
                                         # 8 rows holds ~2 puzzles, and 10-step means swing by +-0.4


# --------------------------------------------------------------------------------- the floor
def weighted_label_counts(labels: np.ndarray, row_weights: np.ndarray, vocab_size: int,
                          ignore_label: int | None) -> np.ndarray:
    """Sum over rows of weight * (the row's label frequencies), not normalised.

    labels: [rows, seq] integer tokens; tokens equal to `ignore_label` do not count; a row without
    any labelled token contributes nothing."""
    labels = np.asarray(labels)
    rows = np.repeat(np.arange(labels.shape[0]), labels.shape[1])
    flat = labels.reshape(-1).astype(np.int64)
    keep = flat != ignore_label if ignore_label is not None else slice(None)
    counts = np.bincount(rows[keep] * vocab_size + flat[keep],
                         minlength=labels.shape[0] * vocab_size).reshape(-1, vocab_size).astype(np.float64)
    per_row = counts.sum(1, keepdims=True)
    freqs = np.divide(counts, per_row, out=np.zeros_like(counts), where=per_row > 0)
    return (np.asarray(row_weights, np.float64)[:, None] * freqs).sum(0)


def row_weighted_marginal(labels: np.ndarray, row_weights: np.ndarray, vocab_size: int,
                          ignore_label: int | None) -> np.ndarray:
    """`weighted_label_counts` normalised to a distribution."""
    total = weighted_label_counts(labels, row_weights, vocab_size, ignore_label)
    if total.sum() <= 0:
        raise ValueError("no labelled tokens: the floor is undefined")
    return total / total.sum()


def entropy(distribution: np.ndarray) -> float:
    """Entropy in nats; zero-probability tokens contribute nothing."""
    p = np.asarray(distribution, np.float64)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def reader_row_weights(puzzle_indices: np.ndarray, group_indices: np.ndarray) -> np.ndarray:
    """How often the training reader draws each example row, up to a constant: 1 / (puzzles in its
    group), since a slot picks a group uniformly, then one of its puzzles, then all its rows."""
    examples = int(puzzle_indices[-1])
    weights = np.zeros(examples, np.float64)
    for g in range(len(group_indices) - 1):
        first, last = int(group_indices[g]), int(group_indices[g + 1])
        weights[puzzle_indices[first]:puzzle_indices[last]] = 1.0 / (last - first)
    return weights


def unigram_floor(build_dir: str | Path, chunk_rows: int = 4096) -> tuple[float, np.ndarray]:
    """(floor in nats, row-weighted label marginal) of a build's training split; the same for the
    stablemax and the softmax loss (module docstring). Reads the labels in chunks (memory-mapped)."""
    from arc_data.dataset import load_split
    split = load_split(build_dir, "train")
    meta = split.metadata
    weights = reader_row_weights(split.puzzle_indices, split.group_indices)
    total = np.zeros(meta.vocab_size, np.float64)
    for start in range(0, split.num_examples, chunk_rows):
        total += weighted_label_counts(split.labels[start:start + chunk_rows], weights[start:start + chunk_rows],
                                       meta.vocab_size, meta.ignore_label_id)
    if total.sum() <= 0:
        raise ValueError(f"{build_dir}: no labelled tokens in the training split")
    marginal = total / total.sum()
    return entropy(marginal), marginal


def floor_logits(marginal: np.ndarray, loss_type: str) -> np.ndarray:
    """Logits whose predicted distribution is `marginal` (all entries > 0) under `loss_type`."""
    m = np.asarray(marginal, np.float64)
    if loss_type == "softmax":
        return np.log(m)
    if loss_type == "stablemax":
        return m / m.min() - 1.0          # s(x) = x + 1 >= 1 on this branch, proportional to m
    raise ValueError(f"unknown loss_type {loss_type!r}")


# ---------------------------------------------------------------------------- classification
def classify_run(losses: list[float], floor: float, exit_code: int, margin: float = DEFAULT_MARGIN,
                 window: int = DEFAULT_WINDOW) -> str:
    """trained / diverged / stuck / error, from a run's per-step LM losses (module docstring)."""
    if exit_code == EXIT_DIVERGED or any(not math.isfinite(x) for x in losses):
        return DIVERGED
    if exit_code != 0 or not losses:
        return ERROR
    final = math.fsum(losses[-window:]) / len(losses[-window:])   # fsum: a flat curve averages to itself
    return TRAINED if final < floor * (1 - margin) else STUCK


def smoothed_min(losses: list[float], window: int = DEFAULT_WINDOW) -> float:
    """Lowest moving average (over `window` consecutive steps, or all when fewer) of a curve."""
    finite = [x for x in losses if math.isfinite(x)]
    if not finite:
        return math.nan
    w = min(window, len(finite))
    sums = np.convolve(np.asarray(finite, np.float64), np.ones(w), mode="valid")
    return float(sums.min() / w)
