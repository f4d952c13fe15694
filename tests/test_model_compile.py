"""torch.compile traces the training ACT step (with the trainer's prepare_lookup) and the evaluation
segment as single graphs, for architectures covering each code path the options choose between
(position encodings, losses, scaling rules, puzzle tokens): a graph break, anywhere, raises here
(fullgraph=True). Dynamo only (backend "eager"): numbers against eager are checked in
test_model_puzzle_embedding.py, test_predict.py and, with inductor on CUDA, test_gpu.py."""
from __future__ import annotations

import pytest
import torch

from hrm.compiled import compile_fixed_shapes
from hrm.config import ArchConfig
from hrm.loss import ACTLossHead
from hrm.model import HRM

# The fewest calls that still trace every branch of HRM.segment (tracing time grows with them):
# H_cycles=2, L_cycles=1 runs the no-grad L and H calls of the first H cycle, the `break` of the
# last, and the final L and H calls; H_layers=2 keeps a block before the last under `first_only`.
BASE = dict(hidden_size=32, num_heads=2, expansion=2, H_layers=2, L_layers=1, H_cycles=2, L_cycles=1,
            halt_max_steps=3, halt_exploration_prob=0.1, puzzle_emb_ndim=32, scaling={"rule": "deeploop"})


# Two architectures between them take every option's other value (each compile costs seconds): the
# first learned positions, softmax, post-norm and two puzzle tokens, the second padded (a superset
# of one unpadded token's ops); the second RoPE, stablemax, pre-norm and no puzzle embedding. (A
# post-norm block traces one graph for every rule: alpha is a graph input, see hrm/reasoning.py.)
@pytest.mark.parametrize("options", [
    dict(pos_encodings="learned", loss_type="softmax", scaling={"rule": "none"}, puzzle_emb_ndim=40),
    dict(scaling={"rule": "prenorm_1_over_n"}, puzzle_emb_ndim=0),
], ids=["learned-softmax-none-padded-puzzle-tokens", "prenorm-no-puzzle-embedding"])
def test_training_step_and_evaluation_segment_compile_without_graph_breaks(options):
    import torch._dynamo
    torch.manual_seed(0)
    arch = ArchConfig(**{**BASE, **options})
    model = HRM(arch, 12, 16, 5, verbose=False)
    head = ACTLossHead(model).train()
    g = torch.Generator().manual_seed(0)
    batch = {"inputs": torch.randint(0, 12, (4, 16), generator=g), "labels": torch.randint(0, 12, (4, 16), generator=g),
             "puzzle_identifiers": torch.randint(0, 5, (4,), generator=g, dtype=torch.int32)}
    torch._dynamo.reset()
    try:
        step = compile_fixed_shapes(head, backend="eager", fullgraph=True)
        carry = head.initial_carry(batch)
        for _ in range(2):
            if arch.puzzle_emb_ndim:
                model.puzzle_embedding.prepare_lookup(4)
            carry, loss, _, _, _ = step(carry, batch)
            loss.backward()
        assert torch.isfinite(loss)
        segment = compile_fixed_shapes(model.segment, backend="eager", fullgraph=True)
        with torch.inference_mode():
            assert model.predict(batch, segment)["preds"].shape == (4, 16)
    finally:
        torch._dynamo.reset()


def test_flash_attention_lookup_stays_inside_one_compiled_graph(monkeypatch):
    """On CUDA in bf16, `attend` asks `flash_attention_available()` and calls `_flash_attn_func()`
    inside the compiled step. Dynamo traced through a functools.cache into the imports, and the
    failed FA3 import (FA2 only, or no flash-attn at all) broke the graph at every attention call.
    The model's construction looks FlashAttention up eagerly; a compiled call then only reads it.
    Whether it runs the head_dim on this GPU is tried while the step is traced, outside the graph.
    The stand-in mirrors flash-attn 2.x: flash_attn.flash_attn_func(q, k, v, dropout_p=0.0,
    softmax_scale=None, causal=False, ...) -> out, all [batch, seq, heads, head_dim]."""
    import sys
    import types

    import torch._dynamo
    import torch.nn.functional as F

    from hrm import attention

    calls = []

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False):
        calls.append(q.shape)
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)

    fa2 = types.ModuleType("flash_attn")
    fa2.flash_attn_func = flash_attn_func
    monkeypatch.setitem(sys.modules, "flash_attn", fa2)
    monkeypatch.setitem(sys.modules, "flash_attn_interface", None)   # no FA3: its import fails
    monkeypatch.setattr(attention, "_flash_lookup", None, raising=False)   # nothing looked up yet
    monkeypatch.setattr(attention, "_flash_head_dims", {})                 # no head_dim tried yet
    with monkeypatch.context() as cuda:   # only while the model is built: Dynamo reads CUDA's state
        cuda.setattr(torch.cuda, "is_available", lambda: True)
        attention.Attention(16, 2)   # as every block of a model does

    def flash_branch(q):   # what `attend` runs on CUDA half tensors
        if attention.flash_attention_available() and attention.flash_runs(q.shape[-1], q.device):
            return attention._flash_attn_func()(q, q, q, causal=False)
        return q

    q = torch.randn(2, 7, 2, 8)
    torch._dynamo.reset()
    try:
        out = torch.compile(flash_branch, backend="eager", fullgraph=True, dynamic=False)(q)
    finally:
        torch._dynamo.reset()
    # the head_dim tried while the step was traced (a [1, 8, 1, head_dim] forward and backward,
    # run, not traced), then the step's own call, in the one graph
    assert calls == [(1, 8, 1, 8), q.shape] and attention._flash_head_dims == {8: True}
    assert torch.allclose(out, flash_attn_func(q, q, q))
