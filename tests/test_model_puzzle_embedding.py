"""Puzzle embedding and its sign-SGD (item 3), including the all-gather across gloo ranks."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hrm.config import ArchConfig
from hrm.model import HRM
from hrm.puzzle_embedding import PuzzleEmbedding, PuzzleSignSGD

TABLE = torch.tensor([[0.0, 0.0, 0.0],
                      [1.0, -1.0, 0.5],
                      [2.0, 2.0, 2.0],
                      [-0.5, 0.25, 1.0],
                      [3.0, 0.0, -3.0]])


def expected_update(table, ids, grads, lr, wd):
    """Hand rule: per distinct id, sign of the summed gradient; decay only those rows."""
    out = table.clone()
    for i in sorted(set(ids)):
        g = sum(grads[j] for j, k in enumerate(ids) if k == i)
        out[i] = table[i] * (1 - lr * wd) - lr * torch.sign(g)
    return out


def backward_rows(emb, ids, grads):
    rows = emb(torch.tensor(ids, dtype=torch.int32))
    (rows * torch.stack(grads)).sum().backward()


def test_table_is_a_zero_initialised_buffer_outside_the_parameters():
    model = HRM(ArchConfig(hidden_size=32, num_heads=2, H_layers=1, L_layers=1, puzzle_emb_ndim=40),
                12, 4, 9, verbose=False)
    table = model.puzzle_embedding.table
    assert table.shape == (9, 40) and table.dtype == torch.float32 and table.eq(0).all()
    assert "puzzle_embedding.table" in model.state_dict()
    assert not any(p is table for p in model.parameters())
    assert not table.requires_grad


def test_sign_sgd_hand_worked_update_touches_only_batch_rows():
    emb = PuzzleEmbedding(5, 3).train()
    emb.table.copy_(TABLE)
    opt = PuzzleSignSGD(emb, lr=0.0, weight_decay=0.5)
    opt.param_groups[0]["lr"] = 0.1          # what a schedule does
    ids = [1, 3, 1]
    grads = [torch.tensor([1.0, -2.0, 0.0]), torch.tensor([0.5, 0.0, -1.0]), torch.tensor([-3.0, 1.0, 0.0])]
    backward_rows(emb, ids, grads)
    opt.step()
    # id 1: summed [-2, -1, 0] -> sign [-1, -1, 0]; id 3: sign [1, 0, -1]; factor 1 - 0.1*0.5
    assert torch.allclose(emb.table[1], torch.tensor([0.95 + 0.1, -0.95 + 0.1, 0.475]))
    assert torch.allclose(emb.table[3], torch.tensor([-0.475 - 0.1, 0.2375, 0.95 + 0.1]))
    assert torch.equal(emb.table[[0, 2, 4]], TABLE[[0, 2, 4]])
    assert torch.allclose(emb.table, expected_update(TABLE, ids, grads, 0.1, 0.5))
    opt.zero_grad()
    assert emb.batch_rows.grad is None
    before = emb.table.clone()
    opt.step()                               # no new gradient: nothing happens
    assert torch.equal(emb.table, before)


def test_no_gradient_rows_outside_training():
    emb = PuzzleEmbedding(5, 3)
    emb.table.copy_(TABLE)
    emb.eval()
    assert torch.equal(emb(torch.tensor([4, 2])), TABLE[[4, 2]]) and emb.batch_rows is None
    emb.train()
    with torch.no_grad():
        emb(torch.tensor([1]))
    assert emb.batch_rows is None


def _rank_main(rank, world, init_file, out_dir, ids_per_rank, grads_per_rank):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        emb = PuzzleEmbedding(5, 3).train()
        emb.table.copy_(TABLE)
        opt = PuzzleSignSGD(emb, lr=0.1, weight_decay=0.5)
        backward_rows(emb, ids_per_rank[rank], grads_per_rank[rank])
        opt.step()
        torch.save(emb.table.clone(), os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()   # nobody tears gloo down while the peer still talks to it
    finally:
        dist.destroy_process_group()


def test_all_gather_across_gloo_ranks(tmp_path):
    # Rank 0 alone would move row 1 by sign(+1); the other rank's larger opposite gradient on the
    # same id must win, which only happens when the gradients are gathered before the sign.
    ids = [[1, 2], [1, 4]]
    grads = [[torch.tensor([1.0, 1.0, 0.0]), torch.tensor([0.0, -1.0, 1.0])],
             [torch.tensor([-2.0, 0.5, 0.0]), torch.tensor([1.0, 1.0, 1.0])]]
    mp.spawn(_rank_main, args=(2, str(tmp_path / "init"), str(tmp_path), ids, grads), nprocs=2, join=True)
    expected = expected_update(TABLE, ids[0] + ids[1], grads[0] + grads[1], 0.1, 0.5)
    for rank in range(2):
        table = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert torch.allclose(table, expected), rank
    assert expected[1, 0] == TABLE[1, 0] * 0.95 + 0.1   # summed -1 -> moves up
