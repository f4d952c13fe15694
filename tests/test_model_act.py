"""ACT, losses and metrics (items 1, 5) on hand-worked cases; the full forward against the reference
lives in test_model_checkpoint.py."""
from __future__ import annotations

import math

import pytest
import torch

from hrm.config import ArchConfig
from hrm.loss import ACTLossHead, softmax_cross_entropy, stablemax_cross_entropy
from hrm.model import HRM

VOCAB, SEQ, IDS = 12, 8, 5


def tiny(**kw):
    base = dict(hidden_size=32, num_heads=2, expansion=2, H_layers=1, L_layers=1, H_cycles=2,
                L_cycles=2, halt_max_steps=3, halt_exploration_prob=0.0, puzzle_emb_ndim=32,
                scaling=dict(rule="deeploop"))
    base.update(kw)
    torch.manual_seed(0)
    return HRM(ArchConfig(**base), VOCAB, SEQ, IDS, verbose=False)


def batch(seed=0, size=4):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, VOCAB, (size, SEQ), generator=g)
    labels[:, -2:] = -100
    return {"inputs": torch.randint(0, VOCAB, (size, SEQ), generator=g),
            "labels": labels,
            "puzzle_identifiers": torch.randint(0, IDS, (size,), generator=g)}


# ------------------------------------------------------------------------------------- losses
def test_stablemax_cross_entropy_hand_worked():
    logits = torch.tensor([[[1.0, 0.0, -1.0], [0.0, 0.0, 3.0]]])     # s = [2, 1, .5]; [1, 1, 4]
    labels = torch.tensor([[0, -100]])
    ce = stablemax_cross_entropy(logits, labels)
    assert ce.dtype == torch.float64
    assert ce[0, 0].item() == pytest.approx(-math.log(2 / 3.5), rel=1e-12)
    assert ce[0, 1].item() == 0.0
    ce = stablemax_cross_entropy(logits, torch.tensor([[2, 1]]))
    assert ce[0, 0].item() == pytest.approx(-math.log(0.5 / 3.5), rel=1e-12)
    assert ce[0, 1].item() == pytest.approx(-math.log(1 / 6), rel=1e-12)


def test_stablemax_gradient_is_finite_at_logit_one():
    logits = torch.tensor([[[1.0, -2.0, 0.5]]], requires_grad=True)
    stablemax_cross_entropy(logits, torch.tensor([[1]])).sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_softmax_cross_entropy_hand_worked():
    logits = torch.tensor([[[1.0, 0.0, -1.0], [2.0, 2.0, 2.0]]])
    ce = softmax_cross_entropy(logits, torch.tensor([[0, -100]]))
    lse = math.log(math.e + 1 + math.exp(-1))
    assert ce[0, 0].item() == pytest.approx(lse - 1.0, rel=1e-6) and ce[0, 1].item() == 0.0


def test_loss_and_metrics_hand_worked():
    head = ACTLossHead(tiny())
    # Row 0: labels [0, 2, ignored], predicted [0, 2, .] -> exact. Row 1: labels [1, 1, 1],
    # predicted [1, 0, 1] -> 2/3. Row 2 has no labels. Row 3 did not halt.
    logits = torch.tensor([
        [[1.0, 0.0, -1.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]],
        [[0.0, 1.0, 0.0], [2.0, 1.0, 0.0], [0.0, 3.0, 0.0]],
        [[0.0, 0.0, 0.0]] * 3,
        [[0.0, 1.0, 0.0]] * 3,
    ])
    labels = torch.tensor([[0, 2, -100], [1, 1, 1], [-100] * 3, [1, 1, 1]])
    outputs = {"logits": logits, "q_halt_logits": torch.tensor([0.5, 0.2, -1.0, 3.0]),
               "q_continue_logits": torch.tensor([0.0, 1.0, 0.0, 0.0]),
               "target_q_continue": torch.tensor([0.25, 0.5, 0.75, 1.0])}
    halted = torch.tensor([True, True, True, False])
    steps = torch.tensor([3, 1, 2, 2], dtype=torch.int32)
    loss, m = head.loss_and_metrics(outputs, labels, halted, steps)

    def sm(row, label):  # stablemax probability by hand
        s = [x + 1 if x >= 0 else 1 / (1 - x) for x in row]
        return s[label] / sum(s)
    rows = [(-math.log(sm([1, 0, -1], 0)) - math.log(sm([0, 0, 1], 2))) / 2,
            (-math.log(sm([0, 1, 0], 1)) - math.log(sm([2, 1, 0], 1)) - math.log(sm([0, 3, 0], 1))) / 3,
            0.0,
            -3 * math.log(sm([0, 1, 0], 1)) / 3]
    lm = sum(rows)
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    exact = [1, 0, 1, 1]          # a row without labels counts as exactly right (0 of 0)
    q_halt = -sum(math.log(sig(z)) if e else math.log(1 - sig(z))
                  for z, e in zip([0.5, 0.2, -1.0, 3.0], exact))
    q_cont = -sum(t * math.log(sig(z)) + (1 - t) * math.log(1 - sig(z))
                  for z, t in zip([0.0, 1.0, 0.0, 0.0], [0.25, 0.5, 0.75, 1.0]))
    assert loss.item() == pytest.approx(lm + 0.5 * (q_halt + q_cont), rel=1e-6)
    expected = {"count": 2, "accuracy": 1 + 2 / 3, "exact_accuracy": 1, "q_halt_accuracy": 1,
                "steps": 4, "lm_loss": lm, "q_halt_loss": q_halt, "q_continue_loss": q_cont}
    assert set(m) == set(expected)
    for k, v in expected.items():
        assert m[k].dtype == torch.float32 and m[k].item() == pytest.approx(v, rel=1e-6), k


# ---------------------------------------------------------------------------------------- ACT
def test_evaluation_mode_halts_exactly_at_max_steps_and_predict_agrees():
    model = tiny().eval()
    head = ACTLossHead(model)
    b = batch()
    carry = head.initial_carry(b)
    with torch.no_grad():
        for step in range(1, 4):
            result = head(carry, b)
            carry = result.carry
            assert bool(result.all_halted) == (step == 3)
            assert "target_q_continue" not in result.outputs and "q_continue_loss" not in result.metrics
        predicted = model.predict(b)
        metrics, outputs = head.evaluate(b)
    assert torch.allclose(predicted["logits"], result.outputs["logits"], atol=1e-6)
    assert torch.equal(predicted["preds"], result.outputs["logits"].argmax(-1))
    assert torch.allclose(predicted["q_halt_logits"], result.outputs["q_halt_logits"], atol=1e-6)
    for k in result.metrics:
        assert metrics[k].item() == pytest.approx(result.metrics[k].item(), rel=1e-5), k
    assert metrics["count"].item() == 4 and metrics["steps"].item() == 12


def test_predict_ignores_train_mode():
    model = tiny()
    b = batch(1)
    model.eval()
    a = model.predict(b)["logits"]
    model.train()
    assert torch.equal(model.predict(b)["logits"], a)


def _set_q_bias(model, halt, cont):
    with torch.no_grad():
        model.q_head.bias.copy_(torch.tensor([halt, cont]))


def test_training_halts_when_q_halt_beats_q_continue():
    model = tiny().train()
    _set_q_bias(model, 5.0, -5.0)   # q_head weight is zero at init: q = bias for every row
    carry = model.initial_carry(batch())
    carry, _ = model(carry, batch())
    assert carry.halted.all() and carry.steps.eq(1).all()


def test_exploration_forces_a_random_minimum_of_steps():
    model = tiny(halt_exploration_prob=1.0, halt_max_steps=6).train()
    _set_q_bias(model, 5.0, -5.0)
    b = batch(size=64)
    carry = model.initial_carry(b)
    torch.manual_seed(3)
    halted_at = torch.zeros(64, dtype=torch.int32)
    for step in range(1, 7):
        carry, _ = model(carry, b)
        newly = carry.halted & (halted_at == 0)
        halted_at[newly] = step
        if step == 1:
            assert not carry.halted.any()         # every row explores: minimum >= 2
    assert halted_at.min() >= 2 and halted_at.max() <= 6
    assert len(set(halted_at.tolist())) >= 3      # randint(2, 7): several different minimums


def test_target_q_continue_uses_the_next_segment():
    model = tiny(halt_max_steps=2).train()
    _set_q_bias(model, -1.0, 2.0)    # never halts by Q; q = bias everywhere
    b = batch()
    carry, out = model(model.initial_carry(b), b)
    assert torch.allclose(out["target_q_continue"], torch.full((4,), 1 / (1 + math.exp(-2.0))))
    assert not carry.halted.any()
    carry, out = model(carry, b)     # last step: the target is the next q_halt
    assert torch.allclose(out["target_q_continue"], torch.full((4,), 1 / (1 + math.exp(1.0))))
    assert carry.halted.all()


def test_target_q_continue_with_real_q_head_equals_manual_next_segment():
    model = tiny(halt_max_steps=4).train()
    with torch.no_grad():
        model.q_head.weight.normal_(std=0.5)
    b = batch(2)
    carry = model.initial_carry(b)
    carry, _ = model(carry, b)
    start_H, start_L = carry.z_H.clone(), carry.z_L.clone()
    torch.manual_seed(0)
    new_carry, out = model(carry, b)
    with torch.no_grad():
        x = model.embed(carry.current_data["inputs"], carry.current_data["puzzle_identifiers"], torch.float32)
        reset = carry.halted.view(-1, 1, 1)
        z_H = torch.where(reset, model.H_init, start_H)
        z_L = torch.where(reset, model.L_init, start_L)
        z_H, z_L = model.segment(z_H, z_L, x)
        assert torch.allclose(z_H, new_carry.z_H, atol=1e-6)
        z_H, _ = model.segment(z_H, z_L, x)
        _, q_halt, q_cont = model.heads(z_H)
    last = new_carry.steps >= 4
    expected = torch.sigmoid(torch.where(last, q_halt, torch.maximum(q_halt, q_cont)))
    assert torch.allclose(out["target_q_continue"], expected, atol=1e-6)


def test_halted_rows_restart_from_init_with_new_data():
    model = tiny().train()
    b0, b1 = batch(0), batch(1)
    carry, _ = model(model.initial_carry(b0), b0)
    carry.halted = torch.tensor([True, False, True, False])
    carry.steps = torch.tensor([1, 1, 1, 1], dtype=torch.int32)
    new, _ = model(carry, b1)
    for row in range(4):
        source = b1 if row in (0, 2) else b0
        for k in b0:
            assert torch.equal(new.current_data[k][row], source[k][row]), (row, k)
    assert new.steps.tolist() == [1, 2, 1, 2]
    # a restarted row computes exactly what a fresh carry computes for it
    fresh, _ = model(model.initial_carry(b1), b1)
    assert torch.allclose(new.z_H[0], fresh.z_H[0], atol=1e-6)
    assert not torch.allclose(new.z_H[1], fresh.z_H[1], atol=1e-3)


def test_carry_is_detached_and_gradients_reach_weights_and_puzzle_rows():
    model = tiny().train()
    head = ACTLossHead(model)
    b = batch()
    result = head(head.initial_carry(b), b)
    assert not result.carry.z_H.requires_grad and not result.carry.z_L.requires_grad
    result.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.puzzle_embedding.batch_rows.grad is not None
    assert "puzzle_embedding.table" not in dict(model.named_parameters())


def test_bfloat16_forward_on_cpu():
    model = tiny(forward_dtype="bfloat16").train()
    head = ACTLossHead(model)
    b = batch()
    carry = head.initial_carry(b)
    assert carry.z_H.dtype == torch.bfloat16
    result = head(carry, b)
    assert result.outputs["logits"].dtype == torch.bfloat16
    assert result.outputs["q_halt_logits"].dtype == torch.float32
    result.loss.backward()
    assert model.lm_head.weight.grad.dtype == torch.float32
    assert torch.isfinite(result.loss)
    assert model.predict(b)["logits"].dtype == torch.bfloat16


def test_float32_on_cpu_by_default():
    model = tiny()
    b = batch()
    assert model.initial_carry(b).z_H.dtype == torch.float32
    assert model.predict(b)["logits"].dtype == torch.float32


def test_model_without_puzzle_embedding_and_single_step():
    model = tiny(puzzle_emb_ndim=0, halt_max_steps=1).train()
    head = ACTLossHead(model)
    b = batch()
    result = head(head.initial_carry(b), b)
    assert result.outputs["logits"].shape == (4, SEQ, VOCAB)
    assert "target_q_continue" not in result.outputs   # ACT off with a single step, as published
    assert bool(result.all_halted)


@pytest.mark.parametrize("rule", ["deeploop", "prenorm_1_over_n"])
def test_first_position_only_module_equals_row_zero_of_the_full_module(rule):
    model = tiny(H_layers=2, scaling=dict(rule=rule))
    z, injection = torch.randn(3, 9, 32), torch.randn(3, 9, 32)
    rope = model.rope(9)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            full = model.H_module(z, injection, rope)
            first = model.H_module(z, injection, rope, first_only=True)
        assert first.shape == (3, 1, 32)
        assert torch.allclose(first[:, 0], full[:, 0], atol=1e-5)
