"""Visit alignment (item 12): the statistic on known cases, and the per-visit decomposition."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from hrm.config import ArchConfig
from hrm.diagnostics import alignment, record_visit_gradients, sublayers, visit_alignment
from hrm.layers import Linear
from hrm.loss import ACTLossHead
from hrm.model import HRM


def test_alignment_of_known_vectors():
    g = torch.tensor([1.0, -2.0, 0.5])
    same = alignment([g, g, g])
    assert same["alignment"] == pytest.approx(1.0) and same["mean_cosine"] == pytest.approx(1.0)
    assert same["visits"] == 3
    basis = list(torch.eye(4))                            # orthogonal, equal norms
    ortho = alignment(basis)
    assert ortho["alignment"] == pytest.approx(1 / math.sqrt(4)) and ortho["mean_cosine"] == pytest.approx(0.0)
    opposite = alignment([g, -g])
    assert opposite["alignment"] == pytest.approx(0.0, abs=1e-12) and opposite["mean_cosine"] == pytest.approx(-1.0)
    # |(3,4) + (3,0)| / (5 + 3) = sqrt(36 + 16) / 8; cos = 9 / 15
    mixed = alignment([torch.tensor([3.0, 4.0]), torch.tensor([3.0, 0.0])])
    assert mixed["alignment"] == pytest.approx(math.sqrt(52) / 8) and mixed["mean_cosine"] == pytest.approx(0.6)
    # a visit that contributes nothing: no direction, so no cosine; the norms' ratio is unchanged,
    # |2g| / (|g| + 0 + |g|) = 1. Only the pair (g, g) is left: cos 1 (0/0 pairs would make it nan)
    idle = alignment([g, torch.zeros(3), g])
    assert idle["alignment"] == pytest.approx(1.0) and idle["mean_cosine"] == pytest.approx(1.0)
    silent = alignment([torch.zeros(3), torch.zeros(3)])
    assert math.isnan(silent["alignment"]) and math.isnan(silent["mean_cosine"])


class TwoVisits(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = Linear(3, 2)


def test_identical_visits_give_one():
    toy = TwoVisits()
    x = torch.randn(5, 3)

    def run():
        return toy.lin(x).sum() + toy.lin(x).sum()    # the same visit twice
    grads = record_visit_gradients({"toy": toy}, run)["toy"]
    assert len(grads) == 2 and torch.equal(grads[0], grads[1])
    assert alignment(grads)["alignment"] == pytest.approx(1.0)
    # each contribution is dL/dW of one visit: ones^T x
    assert torch.allclose(grads[0].view(2, 3), torch.ones(5, 2).T @ x)


def test_opposite_visits_cancel():
    toy = TwoVisits()
    x = torch.randn(5, 3)
    grads = record_visit_gradients({"toy": toy}, lambda: toy.lin(x).sum() - toy.lin(x).sum())["toy"]
    assert alignment(grads)["alignment"] == pytest.approx(0.0, abs=1e-6)


def tiny_model():
    torch.manual_seed(0)
    arch = ArchConfig(hidden_size=32, num_heads=2, expansion=2, H_layers=1, L_layers=2, H_cycles=2,
                      L_cycles=3, halt_max_steps=2, puzzle_emb_ndim=32, scaling=dict(rule="deeploop"))
    return HRM(arch, 12, 6, 4, verbose=False)


def batch():
    g = torch.Generator().manual_seed(1)
    return {"inputs": torch.randint(0, 12, (3, 6), generator=g),
            "labels": torch.randint(0, 12, (3, 6), generator=g),
            "puzzle_identifiers": torch.randint(0, 4, (3,), generator=g)}


def test_visit_contributions_sum_to_the_full_graph_gradient():
    model = tiny_model().train()
    head = ACTLossHead(model)
    b = batch()

    def full_graph_loss():
        model.full_graph_segments = True
        try:
            torch.manual_seed(5)
            return head(head.initial_carry(b), b).loss
        finally:
            model.full_graph_segments = False

    contributions = record_visit_gradients(sublayers(model), full_graph_loss)
    # Every visit of a segment: L blocks run H_cycles * L_cycles = 6 times, H blocks twice.
    assert {k: len(v) for k, v in contributions.items()} == {
        "H.0.attn": 2, "H.0.mlp": 2, "L.0.attn": 6, "L.0.mlp": 6, "L.1.attn": 6, "L.1.mlp": 6}
    model.zero_grad()
    full_graph_loss().backward()
    for name, module in sublayers(model).items():
        true_grad = torch.cat([p.grad.flatten() for p in module.parameters()])
        assert torch.allclose(sum(contributions[name]), true_grad, atol=1e-5, rtol=1e-4), name


def test_visit_alignment_report_leaves_training_state_alone():
    model = tiny_model().train()
    head = ACTLossHead(model)
    b = batch()
    carry = head(head.initial_carry(b), b).carry
    rows_before = model.puzzle_embedding.batch_rows
    weights_before = {k: v.clone() for k, v in model.state_dict().items()}
    rng_before = torch.get_rng_state()
    report = visit_alignment(head, b, carry=carry, max_rows=2)
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert model.puzzle_embedding.batch_rows is rows_before
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(v, weights_before[k]) for k, v in model.state_dict().items())
    assert model.full_graph_segments is False
    for name in ("H.0.attn", "L.1.mlp"):
        r = report[name]
        assert 0.0 <= r["alignment"] <= 1.0 + 1e-9 and -1.0 <= r["mean_cosine"] <= 1.0
    assert report["L.0.attn"]["visits"] == 6 and report["H.0.mlp"]["visits"] == 2
    assert set(report["summary"]) == {"mean_alignment", "min_alignment", "mean_cosine"}


def test_summary_leaves_out_sublayers_visited_once():
    """With H_cycles=1 the H sublayers are visited once: alignment 1 by definition, no cosine (nan).
    The summary is over the looped L sublayers alone, and finite."""
    def head(L_cycles):
        torch.manual_seed(0)
        arch = ArchConfig(hidden_size=32, num_heads=2, expansion=2, H_layers=1, L_layers=1, H_cycles=1,
                          L_cycles=L_cycles, halt_max_steps=2, puzzle_emb_ndim=32, scaling=dict(rule="deeploop"))
        return ACTLossHead(HRM(arch, 12, 6, 4, verbose=False).train())
    report = visit_alignment(head(3), batch())
    summary = report.pop("summary")
    assert report["H.0.attn"]["visits"] == 1 and report["H.0.attn"]["alignment"] == 1.0
    assert math.isnan(report["H.0.mlp"]["mean_cosine"])
    looped = [report["L.0.attn"], report["L.0.mlp"]]
    assert all(r["visits"] == 3 for r in looped)
    assert summary["mean_alignment"] == pytest.approx(sum(r["alignment"] for r in looped) / 2)
    assert summary["min_alignment"] == min(r["alignment"] for r in looped)
    assert summary["mean_cosine"] == pytest.approx(sum(r["mean_cosine"] for r in looped) / 2)
    # Nothing looped (one H and one L visit each): nothing to summarise.
    summary = visit_alignment(head(1), batch())["summary"]
    assert all(math.isnan(v) for v in summary.values())
