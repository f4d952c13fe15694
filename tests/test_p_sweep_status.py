"""Run classification on synthetic loss curves, and the unigram floor against hand-made marginals."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from hrm.loss import IGNORE_LABEL, softmax_cross_entropy, stablemax_cross_entropy
from scripts.run_status import (DIVERGED, ERROR, STUCK, TRAINED, classify_run, entropy, floor_logits,
                                reader_row_weights, smoothed_min, unigram_floor, weighted_label_counts)

FLOOR = 1.5   # with the default margin 0.05 a run must end below 1.425


def decaying(start: float, end: float, steps: int) -> list[float]:
    return [end + (start - end) * math.exp(-5 * i / steps) for i in range(steps)]


def noisy(level: float, steps: int, amplitude: float = 0.1) -> list[float]:
    # deterministic +-amplitude zig-zag: the mean of any even window is exactly `level`
    return [level + (amplitude if i % 2 else -amplitude) for i in range(steps)]


# ------------------------------------------------------------------------------ classification
def test_a_curve_that_falls_well_below_the_floor_trained():
    assert classify_run(decaying(2.5, 0.8, 150), FLOOR, 0) == TRAINED


def test_a_flat_curve_at_the_floor_is_stuck():
    assert classify_run(noisy(1.5, 150), FLOOR, 0) == STUCK


def test_a_curve_that_never_even_reaches_the_floor_is_stuck():
    assert classify_run(noisy(2.4, 150), FLOOR, 0) == STUCK


def test_dipping_below_the_floor_and_coming_back_is_stuck():
    curve = decaying(2.5, 1.0, 100) + [1.55] * 40
    assert min(curve) < 1.1
    assert classify_run(curve, FLOOR, 0) == STUCK


def test_one_low_step_at_the_end_does_not_make_a_run_trained():
    curve = [1.52] * 149 + [0.5]              # window mean (19 * 1.52 + 0.5) / 20 = 1.469
    assert classify_run(curve, FLOOR, 0, window=20) == STUCK
    assert classify_run(curve, FLOOR, 0, window=1) == TRAINED


def test_the_margin_is_strict():
    at_edge = [FLOOR * 0.95] * 30
    assert classify_run(at_edge, FLOOR, 0) == STUCK
    assert classify_run([FLOOR * 0.95 - 1e-9] * 30, FLOOR, 0) == TRAINED
    assert classify_run([1.45] * 30, FLOOR, 0, margin=0.0) == TRAINED
    assert classify_run([1.45] * 30, FLOOR, 0, margin=0.1) == STUCK


def test_exit_code_3_is_diverged_even_with_finite_losses():
    assert classify_run(decaying(2.5, 0.8, 50), FLOOR, 3) == DIVERGED
    assert classify_run([], FLOOR, 3) == DIVERGED


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_anywhere_is_diverged(bad):
    curve = decaying(2.5, 0.8, 50)
    curve[20] = bad
    assert classify_run(curve, FLOOR, 0) == DIVERGED
    assert classify_run(curve, FLOOR, 1) == DIVERGED


def test_crashes_and_empty_logs_are_errors_not_results():
    assert classify_run(decaying(2.5, 0.8, 50), FLOOR, 1) == ERROR
    assert classify_run(decaying(2.5, 0.8, 50), FLOOR, -9) == ERROR   # killed by a signal
    assert classify_run([], FLOOR, 0) == ERROR


def test_a_curve_shorter_than_the_window_uses_all_its_steps():
    assert classify_run([1.0, 1.2, 1.1], FLOOR, 0) == TRAINED
    assert classify_run([1.0, 2.0, 2.0], FLOOR, 0, window=20) == STUCK   # mean 1.667


def test_smoothed_min_hand_values():
    assert smoothed_min([3.0, 1.0, 2.0, 0.0, 4.0], window=2) == pytest.approx(1.0)   # (2 + 0) / 2
    assert smoothed_min([3.0, 1.0], window=20) == pytest.approx(2.0)
    assert smoothed_min([3.0, math.nan, 1.0], window=1) == pytest.approx(1.0)
    assert math.isnan(smoothed_min([], window=3))


# ----------------------------------------------------------------------------------- the floor
def test_weighted_label_counts_by_hand():
    # row 0: tokens 2, 2, 3 (0 is ignored) -> 2/3, 1/3; row 1: tokens 1, 2 -> 1/2, 1/2
    labels = np.array([[2, 2, 3, 0], [1, 2, 0, 0], [0, 0, 0, 0]])
    counts = weighted_label_counts(labels, np.ones(3), vocab_size=4, ignore_label=0)
    np.testing.assert_allclose(counts, [0, 1 / 2, 7 / 6, 1 / 3])
    # weights 3:1 -> 3 * [0, 0, 2/3, 1/3] + [0, 1/2, 1/2, 0]; the row without labels adds nothing
    counts = weighted_label_counts(labels, np.array([3.0, 1.0, 5.0]), vocab_size=4, ignore_label=0)
    np.testing.assert_allclose(counts, [0, 1 / 2, 5 / 2, 1])
    np.testing.assert_array_equal(weighted_label_counts(labels[2:], np.ones(1), vocab_size=4, ignore_label=0), 0)


def test_entropy_by_hand():
    assert entropy([0.5, 0.5, 0.0]) == pytest.approx(math.log(2))
    assert entropy([1.0]) == 0.0
    assert entropy(np.full(12, 1 / 12)) == pytest.approx(math.log(12))


def test_reader_row_weights_follow_groups_then_puzzles():
    # group 0 = puzzles 0, 1 (rows 0-1 and 2-4); group 1 = puzzle 2 (row 5)
    weights = reader_row_weights(np.array([0, 2, 5, 6]), np.array([0, 2, 3]))
    np.testing.assert_allclose(weights, [0.5, 0.5, 0.5, 0.5, 0.5, 1.0])


@pytest.mark.parametrize("loss", [stablemax_cross_entropy, softmax_cross_entropy])
def test_floor_logits_reach_the_entropy_under_both_losses(loss):
    marginal = np.array([0, 3, 6, 1, 2], np.float64) / 12        # token 0 never a label
    logits = floor_logits(marginal[1:], "stablemax" if loss is stablemax_cross_entropy else "softmax")
    logits = np.concatenate([[-1e12], logits])                    # ~zero probability for token 0
    labels = torch.tensor([[1] * 3 + [2] * 6 + [3] + [4] * 2 + [IGNORE_LABEL] * 4])
    per_token = loss(torch.tensor(logits).expand(1, labels.shape[1], -1), labels)
    mean = float(per_token.sum() / (labels != IGNORE_LABEL).sum())
    assert mean == pytest.approx(entropy(marginal), rel=1e-6)


def test_floor_logits_reject_an_unknown_loss():
    with pytest.raises(ValueError, match="unknown loss_type"):
        floor_logits(np.array([0.5, 0.5]), "hinge")


def test_unigram_floor_of_a_real_build(small_build):
    floor, marginal = unigram_floor(small_build, chunk_rows=7)   # odd chunks: the sum must not depend on them
    # independent recount: every group once, each of its puzzles 1/P, every row's label frequencies
    labels = np.load(small_build / "train" / "all__labels.npy")
    puzzles = np.load(small_build / "train" / "all__puzzle_indices.npy")
    groups = np.load(small_build / "train" / "all__group_indices.npy")
    total = np.zeros(12)
    for g in range(len(groups) - 1):
        for p in range(groups[g], groups[g + 1]):
            for row in labels[puzzles[p]:puzzles[p + 1]]:
                counts = Counter(int(t) for t in row if t != 0)
                n = sum(counts.values())
                for token, c in counts.items():
                    total[token] += c / n / (groups[g + 1] - groups[g])
    expected = total / total.sum()
    np.testing.assert_allclose(marginal, expected, rtol=1e-12)
    assert floor == pytest.approx(entropy(expected))
    assert marginal[0] == 0 and marginal[2] == marginal.max()     # PAD ignored; black is the commonest
    assert 0.5 < floor < math.log(11)
