"""Puzzle embedding and its sign-SGD (item 3), including the all-gather across gloo ranks."""
from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hrm.compiled import compile_fixed_shapes
from hrm.config import ArchConfig
from hrm.model import HRM
from hrm.puzzle_embedding import PuzzleEmbedding, PuzzleSignSGD, sum_rows_by_slot

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


def test_fixed_order_row_sums_equal_hand_sums():
    """CUDA's path (index_put_ with accumulate, taken here on the CPU) and the CPU's index_add_ give
    the hand-worked per-slot sums; a slot with no row sums to zero. (That CUDA's repeats bit for bit
    is tests/test_gpu.py's.)"""
    slot = torch.tensor([2, 0, 2, 2, 0])
    rows = torch.tensor([[1.0, -2.0], [0.5, 0.25], [3.0, 2.5], [-4.0, 0.5], [-0.5, 0.0]])
    hand = torch.tensor([[0.0, 0.25], [0.0, 0.0], [0.0, 1.0]])
    assert torch.equal(sum_rows_by_slot(slot, rows, 3, fixed_order=True), hand)
    assert torch.equal(sum_rows_by_slot(slot, rows, 3), hand)            # the CPU's default


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
    torch.set_num_threads(1)    # a forked child keeps out of the parent's OpenMP pool (as DataLoader workers do)
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
    # Two real processes, forked: spawned ones spent seconds importing torch again. A bounded wait, so
    # that a child stuck after the fork fails the test rather than hanging the suite.
    ranks = mp.start_processes(_rank_main, args=(2, str(tmp_path / "init"), str(tmp_path), ids, grads), nprocs=2,
                               join=False, start_method="fork")
    deadline = time.monotonic() + 120
    while not ranks.join(timeout=1):
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            pytest.fail("the gloo ranks did not finish in 120 s")
    expected = expected_update(TABLE, ids[0] + ids[1], grads[0] + grads[1], 0.1, 0.5)
    for rank in range(2):
        table = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert torch.allclose(table, expected), rank
    assert expected[1, 0] == TABLE[1, 0] * 0.95 + 0.1   # summed -1 -> moves up


def test_prepared_leaf_receives_the_rows_gradient_and_is_used_once():
    emb = PuzzleEmbedding(5, 3).train()
    emb.table.copy_(TABLE)
    emb.prepare_lookup(2)
    leaf, ids = emb.prepared
    rows = emb(torch.tensor([4, 1], dtype=torch.int32))
    assert torch.equal(rows, TABLE[[4, 1]])           # rows + zero leaf: the same values
    assert emb.batch_rows is leaf and emb.prepared is None and ids.tolist() == [4, 1]
    (rows * torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 0.5]])).sum().backward()
    assert torch.equal(leaf.grad, torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 0.5]]))
    # a lookup prepared for another batch size is not used (no gradient: the optimizer skips
    # it); the forward makes its own
    emb.prepare_lookup(3)
    rows = emb(torch.tensor([0, 2]))
    rows.sum().backward()
    assert emb.batch_rows.shape == (2, 3) and emb.prepared is None
    assert [(leaf.grad is not None, tuple(ids.tolist())) for leaf, ids in emb.lookups] == \
        [(True, (4, 1)), (False, (0, 0, 0)), (True, (0, 2))]
    before = emb.table.clone()
    opt = PuzzleSignSGD(emb, lr=0.1, weight_decay=0.0)
    opt.step()
    assert torch.equal(emb.table[3], before[3]) and not torch.equal(emb.table[0], before[0])
    # zero_grad forgets a lookup prepared but not yet used: the next forward makes its own leaf
    # and registers it, so its gradient is not lost
    emb.prepare_lookup(1)
    opt.zero_grad()
    assert emb.prepared is None and emb.lookups == []
    emb(torch.tensor([3])).sum().backward()
    assert len(emb.lookups) == 1 and emb.lookups[0][0].grad is not None


def test_compiled_act_step_is_one_graph_and_matches_eager():
    """With the trainer's prepare_lookup, torch.compile traces the whole training ACT step
    (embedding lookup, segment, heads, target-Q pass, loss) as one graph (fullgraph=True would
    raise at a graph break), does not recompile for the next step's new leaf, and gives eager's
    loss, gradients, puzzle rows' gradients and ids, and sparse updates of the table. Rows halt
    after 2 steps, so steps 3 and 4 look up the rows of new batches."""
    import copy

    import torch._dynamo
    import torch._dynamo.testing

    from hrm.loss import ACTLossHead

    # H_cycles=2, L_cycles=1: the fewest calls that still run the segment's no-grad and grad parts
    # (as test_model_compile.py's; tracing time grows with the calls)
    arch = ArchConfig(hidden_size=32, num_heads=2, expansion=2, H_layers=1, L_layers=1, H_cycles=2,
                      L_cycles=1, halt_max_steps=2, halt_exploration_prob=0.0, puzzle_emb_ndim=32)
    torch.manual_seed(0)
    eager_model = HRM(arch, 12, 8, 9, verbose=False)
    compiled_model = copy.deepcopy(eager_model)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    try:
        results = {}
        for name, model in (("eager", eager_model), ("compiled", compiled_model)):
            head = ACTLossHead(model).train()
            step = compile_fixed_shapes(head, backend=counter, fullgraph=True) if name == "compiled" else head
            sparse = PuzzleSignSGD(model.puzzle_embedding, lr=0.1, weight_decay=0.1)
            g = torch.Generator().manual_seed(3)
            batches = [{"inputs": torch.randint(0, 12, (4, 8), generator=g),
                        "labels": torch.randint(0, 12, (4, 8), generator=g),
                        "puzzle_identifiers": torch.randint(1, 9, (4,), generator=g, dtype=torch.int32)}
                       for _ in range(4)]
            carry, out = head.initial_carry(batches[0]), []
            for b in batches:
                model.puzzle_embedding.prepare_lookup(4)
                carry, loss, _, _, _ = step(carry, b)
                loss.backward()
                emb = model.puzzle_embedding
                out.append((loss.detach(), emb.batch_rows.grad.clone(), emb.batch_ids.clone(),
                            {k: p.grad.clone() for k, p in model.named_parameters()}))
                assert len(emb.lookups) == 1
                sparse.step()
                sparse.zero_grad()
                model.zero_grad()
                out[-1] += (emb.table.clone(),)
            results[name] = out
        assert counter.frame_count == 1            # one graph, traced once for all steps
        eager, compiled = results["eager"], results["compiled"]
        assert eager[0][2].tolist() != eager[2][2].tolist()     # new rows were looked up after halting
        for (loss_e, rows_e, ids_e, grads_e, table_e), (loss_c, rows_c, ids_c, grads_c, table_c) in zip(eager, compiled):
            torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(rows_c, rows_e, rtol=1e-4, atol=1e-6)
            assert rows_e.abs().sum() > 0
            assert torch.equal(ids_c, ids_e)
            assert torch.equal(table_c, table_e)
            for k in grads_e:
                torch.testing.assert_close(grads_c[k], grads_e[k], rtol=1e-4, atol=1e-6, msg=k)
    finally:
        torch._dynamo.reset()
