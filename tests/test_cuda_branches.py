"""The CUDA branches of the model, run on the CPU.

hrm.layers and hrm.attention pick their hand-written CPU paths with `x.is_cuda` checks; on CUDA the
general code (plain autograd, the fused-projection view, RoPE through apply_rope's autograd path)
runs instead, and tests/test_gpu.py checks it only where a GPU is. Here every tensor reports itself
as CUDA, so those branches run on the CPU: a mistake in them (a shape, a dtype, a missed transpose)
shows up in the CPU suite rather than in a GPU lease that gets one try.
"""
from __future__ import annotations

import contextlib
import copy

import pytest
import torch

from hrm import attention, layers
from hrm.config import ArchConfig
from hrm.loss import ACTLossHead
from hrm.model import HRM

VOCAB, SEQ, IDS, ROWS = 12, 24, 5, 3
ARCH = dict(name="branches", hidden_size=32, num_heads=2, expansion=2, H_layers=1, L_layers=1, H_cycles=2,
            L_cycles=2, halt_max_steps=3, halt_exploration_prob=0.0, puzzle_emb_ndim=48,
            scaling=dict(rule="deeploop"))


@contextlib.contextmanager
def cuda_branches():
    """Every tensor answers is_cuda=True (flash-attn stays off: its kernels are CUDA-only), and
    the CPU-only paths fail loudly if they are reached anyway. Undone on exit."""
    def cpu_only(*args, **kwargs):
        raise AssertionError("a CPU-only path ran under the CUDA branches")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(attention, "flash_attention_available", lambda: False)
        for owner, name in ((attention._RotaryProjection, "apply"), (attention, "_project_and_rotate_rows"),
                            (layers._BlockedSwiGLU, "apply"), (layers, "_swiglu_blocks"),
                            (layers._AddRMSNorm, "apply")):
            mp.setattr(owner, name, cpu_only)
        # torch.Tensor inherits is_cuda from torch._C.TensorBase: undoing removes this override
        mp.setattr(torch.Tensor, "is_cuda", property(lambda self: True), raising=False)
        yield
    assert not torch.zeros(1).is_cuda


def make_batch():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(2, VOCAB, (ROWS, SEQ), generator=g)
    labels[:, -5:] = -100
    return {"inputs": torch.randint(2, VOCAB, (ROWS, SEQ), generator=g), "labels": labels,
            "puzzle_identifiers": torch.tensor([1, 3, 1], dtype=torch.int32)}


def step(model: HRM) -> dict:
    """One training-mode ACT step with backward, and a prediction (the no-grad branches)."""
    head = ACTLossHead(model).train()
    batch = make_batch()
    result = head(head.initial_carry(batch), batch)
    result.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    grads["puzzle rows"] = model.puzzle_embedding.batch_rows.grad.clone()
    return {"result": result, "grads": grads, "predict": model.predict(batch)}


def twins(**overrides) -> tuple[HRM, HRM]:
    torch.manual_seed(0)
    model = HRM(ArchConfig(**{**ARCH, **overrides}), VOCAB, SEQ, IDS, verbose=False)
    return model, copy.deepcopy(model)


def run_with_cuda_branches(model: HRM) -> dict:
    with cuda_branches():
        return step(model)


def close(a: torch.Tensor, b: torch.Tensor, rel: float) -> bool:
    return bool((a.double() - b.double()).abs().max() <= rel * b.double().abs().max().clamp_min(1e-12))


def test_cuda_branches_compute_what_the_cpu_branches_do():
    cpu_model, cuda_model = twins(forward_dtype="float32")
    cpu = step(cpu_model)
    cuda = run_with_cuda_branches(cuda_model)
    assert close(cuda["result"].loss, cpu["result"].loss, 1e-6)
    for key in ("logits", "q_halt_logits", "q_continue_logits", "target_q_continue"):
        assert close(cuda["result"].outputs[key], cpu["result"].outputs[key], 1e-5), key
    assert close(cuda["result"].carry.z_H, cpu["result"].carry.z_H, 1e-5)
    for name, grad in cpu["grads"].items():
        assert close(cuda["grads"][name], grad, 1e-4), f"gradient of {name}"
    assert close(cuda["predict"]["logits"], cpu["predict"]["logits"], 1e-5)
    assert torch.equal(cuda["predict"]["preds"], cpu["predict"]["preds"])


def test_cuda_branches_in_bfloat16_keep_float32_where_it_matters():
    """forward_dtype bfloat16 (auto on CUDA): states and logits in bf16, but the Q head, its
    targets, the loss (stablemax in float64) and every gradient of the float32 weights are not."""
    _, model = twins(forward_dtype="bfloat16")
    out = run_with_cuda_branches(model)
    result = out["result"]
    assert result.carry.z_H.dtype == result.carry.z_L.dtype == torch.bfloat16
    assert result.outputs["logits"].dtype == torch.bfloat16
    for key in ("q_halt_logits", "q_continue_logits", "target_q_continue"):
        assert result.outputs[key].dtype == torch.float32, key
    assert result.loss.dtype == torch.float64 and torch.isfinite(result.loss)
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in out["grads"].values())
    assert out["grads"]["puzzle rows"].abs().sum() > 0
    assert out["predict"]["logits"].dtype == torch.bfloat16
