"""hrm.flops.flops_per_token against torch's own FLOP counter on the benchmarked training step."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import hrm.attention
from hrm.config import ArchConfig
from hrm.flops import flops_per_token
from hrm.layers import Linear
from scripts import bench_model


def _matmul_attention(q, k, v, backend="auto"):
    """softmax(q k^T / sqrt(d)) v as two batched matmuls, forward and backward both visible to the
    counter (it has no formula for the CPU kernel of scaled_dot_product_attention)."""
    return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1) @ v


@pytest.mark.parametrize("arch", [
    # one ACT step: no target-Q segment; one cycle: every visit is gradient-visible
    dict(H_layers=1, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1, puzzle_emb_ndim=32),
    # no puzzle table: no puzzle tokens and no sign-SGD optimizer
    dict(H_layers=1, L_layers=1, H_cycles=2, L_cycles=1, halt_max_steps=2, puzzle_emb_ndim=0),
    # no-grad iterations, the target-Q segment (last H block for position 0 only), and two puzzle
    # tokens (40 wide on hidden 32: zero-padded to 64)
    dict(H_layers=2, L_layers=1, H_cycles=2, L_cycles=3, halt_max_steps=3, puzzle_emb_ndim=40),
])
def test_flops_per_token_is_what_a_training_step_executes(arch, monkeypatch):
    """bench_model's whole step (ACT forward, loss, backward, both optimizers) under FlopCounterMode:
    the no-grad visits counted once, the gradient-visible ones three times, the heads, nothing else.
    No-op forward hooks on the Linear layers send the CPU through the general path, the plain
    autograd arithmetic CUDA runs (the row-blocked CPU paths accumulate weight gradients with
    in-place addmm_, which the counter does not see)."""
    seq_len, batch_size = 20, 3
    monkeypatch.setattr(bench_model, "SEQ_LEN", seq_len)   # 900 positions: a slow test, same count
    monkeypatch.setattr(hrm.attention, "attend", _matmul_attention)
    arch = ArchConfig(hidden_size=32, num_heads=2, expansion=2, forward_dtype="float32", **arch)
    batch = bench_model.make_batch(batch_size, torch.device("cpu"), torch.Generator().manual_seed(0))
    step, carry, model = bench_model.training_step(arch, batch, torch.device("cpu"))
    for module in model.modules():
        if isinstance(module, Linear):
            module.register_forward_hook(lambda *args: None)
    for _ in range(2):   # the first step loads every row; the second continues some (same work)
        with FlopCounterMode(display=False) as counter:
            carry = step(carry)
        expected = flops_per_token(arch, seq_len, bench_model.VOCAB) * batch_size * seq_len
        assert expected == pytest.approx(counter.get_total_flops(), rel=1e-12)
