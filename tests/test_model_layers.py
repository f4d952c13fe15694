"""Layers (items 2, 5): attention backends, RoPE, RMSNorm, SwiGLU, init, dtypes, no device code."""
from __future__ import annotations

import math
import pathlib
import re

import pytest
import torch
import torch.nn.functional as F

from hrm.attention import Attention, _RotaryProjection, attend, flash_attention_available
from hrm.layers import (Linear, RotaryTable, SwiGLU, _AddRMSNorm, _BlockedSwiGLU, add_rms_norm, apply_rope,
                        rms_norm, rms_norm_, truncated_normal_)
from tests.test_model_reference import ref_attention


def naive_attention(q, k, v):
    """softmax(q k^T / sqrt(d)) v in float64, [batch, heads, seq, dim] layout, by explicit sums."""
    q, k, v = q.double(), k.double(), v.double()
    scores = (q.unsqueeze(3) * k.unsqueeze(2)).sum(-1) / math.sqrt(q.shape[-1])   # [b, h, sq, sk]
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    return (weights.unsqueeze(-1) * v.unsqueeze(2)).sum(3)                       # [b, h, sq, d]


def test_sdpa_attention_matches_naive_reference_on_cpu():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 9, 8, generator=g) for _ in range(3))
    out = attend(q, k, v, backend="sdpa")
    assert out.shape == (2, 3, 9, 8)
    assert torch.allclose(out.double(), naive_attention(q, k, v), atol=1e-5)
    assert torch.equal(attend(q, k, v), out)  # auto on CPU is SDPA


def test_attention_backend_errors():
    q = torch.randn(1, 1, 2, 4)
    with pytest.raises(RuntimeError, match="flash attention needs"):
        attend(q, q, q, backend="flash")
    with pytest.raises(ValueError, match="unknown attention backend"):
        attend(q, q, q, backend="xformers")


def fussy_flash(supported: tuple[int, ...], calls: list):
    """A FlashAttention stand-in ([batch, seq, heads, head_dim] in and out) that refuses the head
    dims an old FA3 build refuses, as it does: a RuntimeError."""
    def flash_attn_func(q, k, v, causal=False):
        calls.append(tuple(q.shape))
        if q.shape[-1] not in supported:
            raise RuntimeError("Only support head size 64, 128, and 256 for now\nmore")
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    return flash_attn_func


def test_a_head_dim_flash_attention_cannot_run_takes_sdpa(monkeypatch, capsys):
    """FA2 raises on GPUs before Ampere, old FA3 builds take head_dim 64/128/256 only (hrm_tiny's
    is 32): tried once per head_dim (forward and backward), such a one takes SDPA, said once, rather
    than failing at the first step. Here on the CPU, with a stand-in and tensors that say they are CUDA."""
    from hrm import attention
    calls = []
    monkeypatch.setattr(attention, "_flash_lookup", (fussy_flash((64,), calls),))
    monkeypatch.setattr(attention, "_flash_head_dims", {})
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True), raising=False)
    g = torch.Generator().manual_seed(0)
    for head_dim, flash, first in ((32, False, True), (64, True, True), (32, False, False), (64, True, False)):
        q, k, v = (torch.randn(2, 3, 5, head_dim, generator=g).bfloat16() for _ in range(3))
        before = len(calls)
        out = attend(q, k, v)
        assert torch.equal(out, F.scaled_dot_product_attention(q, k, v))    # the stand-in computes SDPA too
        # the try ([1, 8, 1, head_dim]) the first time only; the attention itself ([batch 2, seq 5,
        # heads 3, head_dim]) by flash where the try passed
        assert calls[before:] == [(1, 8, 1, head_dim)] * first + [(2, 5, 3, head_dim)] * flash
    assert calls.count((1, 8, 1, 32)) == 1 and attention._flash_head_dims == {32: False, 64: True}
    err = capsys.readouterr().err
    assert err == ("[hrm] flash-attn cannot run attention with head_dim 32 here (RuntimeError: Only support head size "
                   "64, 128, and 256 for now); attention uses PyTorch's scaled_dot_product_attention instead\n")
    with pytest.raises(RuntimeError, match="flash attention needs"):
        attend(q[..., :32], k[..., :32], v[..., :32], backend="flash")


def test_flash_attention_is_tried_with_autograd_even_under_inference_mode(monkeypatch):
    """predict.py builds its model under inference mode: the try's backward must still run, or every
    head_dim would be judged one flash cannot run."""
    from hrm import attention
    calls = []
    monkeypatch.setattr(attention, "_flash_lookup", (fussy_flash((64,), calls),))
    monkeypatch.setattr(attention, "_flash_head_dims", {})
    with torch.inference_mode():
        assert attention.flash_runs(64, torch.device("cpu"))
    assert calls == [(1, 8, 1, 64)]


@pytest.mark.skipif(not (torch.cuda.is_available() and flash_attention_available()),
                    reason="needs CUDA and flash_attn")
def test_flash_and_sdpa_agree_on_gpu():
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 300, 64, generator=g, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    flash, sdpa = attend(q, k, v, backend="flash"), attend(q, k, v, backend="sdpa")
    assert torch.allclose(flash.float(), sdpa.float(), atol=2e-2)
    assert torch.allclose(flash.float(), naive_attention(q, k, v).float(), atol=2e-2)


def test_attention_module_matches_reference_with_rope():
    torch.manual_seed(0)
    attn = Attention(hidden_size=16, num_heads=4)
    x = torch.randn(2, 5, 16)
    table = RotaryTable(head_dim=4, positions=5, theta=10000.0)
    expected = ref_attention(x, attn.qkv_proj.weight, attn.o_proj.weight, heads=4, rope_theta=10000.0)
    assert torch.allclose(attn(x, table(5)), expected, atol=1e-5)
    with torch.no_grad():  # the no-graph path (contiguous rope output, dense v)
        assert torch.allclose(attn(x, table(5)), expected, atol=1e-5)


def test_rope_hand_worked():
    table = RotaryTable(head_dim=4, positions=3, theta=100.0)   # frequencies 1 and 0.1
    cos, sin = table(3)
    x = torch.zeros(1, 2, 3, 4)  # [batch, heads, seq, head_dim]
    x[0, 0, :, 0] = 1.0   # head 0: unit vector on dim 0 (paired with dim 2, frequency 1)
    x[0, 1, :, 1] = 1.0   # head 1: unit vector on dim 1 (paired with dim 3, frequency 0.1)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            out = apply_rope(x, cos, sin)
        for p in range(3):
            assert torch.allclose(out[0, 0, p], torch.tensor([math.cos(p), 0, math.sin(p), 0]), atol=1e-6)
            assert torch.allclose(out[0, 1, p], torch.tensor([0, math.cos(0.1 * p), 0, math.sin(0.1 * p)]),
                                  atol=1e-6)


def test_rope_runs_in_float32_for_bfloat16_inputs():
    """Rounded to bfloat16 once, at the end: the rotation x cos + rotate_half(x) sin written out in
    float64, then cast, in both branches (no-grad writes into a fresh buffer, the one most block
    visits take). Computed in bfloat16 the no-grad branch rounds twice and differs."""
    torch.manual_seed(0)
    cos, sin = RotaryTable(8, 6, 10000.0)(6)
    x = torch.randn(2, 3, 6, 8).bfloat16()
    x64 = x.double()
    rotated_half = torch.cat((-x64[..., 4:], x64[..., :4]), dim=-1)
    expected = (x64 * cos.double() + rotated_half * sin.double()).bfloat16()
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            out = apply_rope(x, cos, sin)
        assert out.dtype == torch.bfloat16
        assert torch.equal(out, expected), grad


def test_rms_norm_hand_worked_and_in_place_variant():
    x = torch.tensor([[3.0, 4.0]])
    assert torch.allclose(rms_norm(x, 0.0), torch.tensor([[3 / math.sqrt(12.5), 4 / math.sqrt(12.5)]]))
    assert torch.allclose(rms_norm(x, 1e-5), x / math.sqrt(12.5 + 1e-5), atol=1e-7)
    y = torch.randn(4, 7, 32) * 3
    expected = rms_norm(y, 1e-5)
    buffer = y.clone()
    out = rms_norm_(buffer, 1e-5)
    assert out.data_ptr() == buffer.data_ptr()   # float32: normalised in place
    assert torch.allclose(out, expected, atol=1e-6)
    low = rms_norm_(y.bfloat16(), 1e-5)
    assert low.dtype == torch.bfloat16
    assert torch.allclose(low.float(), expected, atol=2e-2)


def test_swiglu_hand_worked_and_no_grad_path():
    mlp = SwiGLU(hidden_size=2, inner_size=2)
    with torch.no_grad():
        mlp.gate_up_proj.weight.copy_(torch.tensor([[1.0, 0], [0, 1], [2, 0], [0, 3]]))  # gate=x, up=(2x0, 3x1)
        mlp.down_proj.weight.copy_(torch.tensor([[1.0, 1], [0, -1]]))
    x = torch.tensor([[0.5, -1.0]])
    silu = lambda t: t / (1 + math.exp(-t))  # noqa: E731
    h = [silu(0.5) * 1.0, silu(-1.0) * -3.0]
    expected = torch.tensor([[h[0] + h[1], -h[1]]])
    assert torch.allclose(mlp(x), expected, atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(mlp(x), expected, atol=1e-6)


def test_truncated_normal_statistics():
    torch.manual_seed(0)
    t = truncated_normal_(torch.empty(200_000), std=0.5)
    assert abs(t.mean().item()) < 0.005
    assert t.std().item() == pytest.approx(0.5, rel=0.01)   # the std of the truncated samples
    assert truncated_normal_(torch.empty(3), std=0.0).eq(0).all()


def test_linear_casts_weights_to_the_input_dtype():
    torch.manual_seed(0)
    lin = Linear(8, 4, bias=True)
    assert lin.weight.dtype == torch.float32 and lin.bias.eq(0).all()
    assert lin.weight.std().item() == pytest.approx(8 ** -0.5, rel=0.35)
    x = torch.randn(3, 8)
    assert lin(x.bfloat16()).dtype == torch.bfloat16
    assert torch.allclose(lin(x), x @ lin.weight.T)


def test_no_device_hard_coding_in_the_package():
    """The device is chosen in exactly one place, hrm/distributed.py (from availability and the
    `device` setting); nothing else names CUDA."""
    root = pathlib.Path(__file__).resolve().parent.parent / "hrm"
    for path in root.glob("*.py"):
        if path.name == "distributed.py":
            continue
        text = path.read_text()
        assert not re.search(r"\.cuda\(|device=[\"']cuda|torch\.device\([\"']cuda", text), path.name


def test_swiglu_blocked_no_grad_path_equals_the_autograd_path():
    torch.manual_seed(0)
    mlp = SwiGLU(hidden_size=16, inner_size=256)
    x = torch.randn(3, 700, 16)            # 2100 rows: two full blocks of 1024 and a partial one
    expected = mlp(x)
    with torch.no_grad():
        out = mlp(x)
    assert out.shape == x.shape and torch.allclose(out, expected, atol=1e-6)


def test_swiglu_blocked_backward_equals_the_autograd_path():
    """The CPU path's hand-written blocked backward against plain autograd of the same formula."""
    torch.manual_seed(0)
    mlp = SwiGLU(hidden_size=16, inner_size=256)
    weights = (mlp.gate_up_proj.weight, mlp.down_proj.weight)
    x = torch.randn(3, 700, 16, requires_grad=True)   # 2100 rows: a partial last block
    grad_out = torch.randn(3, 700, 16)
    gate, up = F.linear(x, weights[0]).chunk(2, dim=-1)
    expected = F.linear(F.silu(gate) * up, weights[1])
    expected_grads = torch.autograd.grad(expected, (x, *weights), grad_out)
    out = mlp(x)
    grads = torch.autograd.grad(out, (x, *weights), grad_out)
    assert torch.allclose(out, expected, atol=1e-6)
    for got, want in zip(grads, expected_grads):  # float32 sums over 2100 rows in another order
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * want.abs().max().item())
    # And the formulas themselves, in float64 with blocks of 5 rows (the last one partial).
    args = (torch.randn(2, 6, 4, dtype=torch.float64, requires_grad=True),
            torch.randn(16, 4, dtype=torch.float64, requires_grad=True),
            torch.randn(4, 8, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(lambda a, w1, w2: _BlockedSwiGLU.apply(a, w1, w2, 5), args)


def test_swiglu_bfloat16_weight_gradients_are_as_precise_as_autograds(monkeypatch):
    """A bfloat16 forward on CPU: the row-blocked backward summed d(W) block by block in bfloat16
    (addmm_ into a bfloat16 buffer), an 8-bit mantissa rounding at every block, so its error grew
    with the number of rows (3% at 780 blocks of 512, where autograd's one product stays at 0.5%).
    Many small blocks show it quickly."""
    monkeypatch.setattr(SwiGLU, "CPU_GRAD_BLOCK_ROWS", 8)
    torch.manual_seed(0)
    mlp = SwiGLU(hidden_size=16, inner_size=256)
    weights = (mlp.gate_up_proj.weight, mlp.down_proj.weight)
    x, grad_out = torch.randn(8, 512, 16), torch.randn(8, 512, 16)     # 4096 rows: 512 blocks
    gate, up = F.linear(x, weights[0]).chunk(2, dim=-1)
    exact = torch.autograd.grad(F.linear(F.silu(gate) * up, weights[1]), weights, grad_out)
    got = torch.autograd.grad(mlp(x.bfloat16()), weights, grad_out.bfloat16())
    for g, want in zip(got, exact):   # autograd's bfloat16 product: ~0.006
        assert ((g - want).norm() / want.norm()).item() < 0.01


def general_path(attn: Attention):
    """Force the general (autograd, whole-batch) path: a forward hook on qkv_proj does."""
    return attn.qkv_proj.register_forward_hook(lambda module, inputs, output: None)


def test_attention_row_paths_equal_the_general_path():
    """On CPU (eager) the projection and RoPE run one batch row at a time, with a hand-written
    backward under autograd; both agree with the general path in outputs and gradients."""
    torch.manual_seed(0)
    attn = Attention(32, 4)
    rope = RotaryTable(8, 50, 10000.0)(50)
    x = torch.randn(3, 50, 32, requires_grad=True)
    grad_out = torch.randn(3, 50, 32)
    params = (x, attn.qkv_proj.weight, attn.o_proj.weight)
    handle = general_path(attn)
    expected = attn(x, rope)
    expected_grads = torch.autograd.grad(expected, params, grad_out)
    handle.remove()
    out = attn(x, rope)
    grads = torch.autograd.grad(out, params, grad_out)
    assert torch.allclose(out, expected, atol=1e-6)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        out = attn(x, rope)
        first = attn(x, rope, queries=1)
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.allclose(first, expected[:, :1], atol=1e-6)


def test_rotary_projection_backward_against_finite_differences():
    """The inverse rotation in the hand-written backward, checked numerically in float64."""
    g = torch.Generator().manual_seed(0)
    cos, sin = (t.double() for t in RotaryTable(4, 5, 10.0)(5))
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(24, 8, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: _RotaryProjection.apply(a, b, cos, sin, 2), (x, w))


def test_add_rms_norm_hand_worked_and_backward():
    x, branch = torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 0.0]])
    # alpha 2: t = (3, 4), rms = sqrt(12.5)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            out = add_rms_norm(x, branch.clone(), 2.0, 0.0)
        assert torch.allclose(out, torch.tensor([[3.0, 4.0]]) / math.sqrt(12.5))
    # The closed-form backward against finite differences, alpha 1 and not.
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(3, 4, 6, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(2)]
    for alpha in (1.0, 4.9):
        assert torch.autograd.gradcheck(lambda a, b: _AddRMSNorm.apply(a, b, alpha, 1e-5), args)
    # The float32 path used in training agrees with autograd of the plain formula.
    a, b = (t.detach().float().requires_grad_() for t in args)
    expected = rms_norm(torch.add(b, a, alpha=4.9), 1e-5)
    out = add_rms_norm(a, b, 4.9, 1e-5)
    grad_out = torch.randn(3, 4, 6)
    for got, want in zip(torch.autograd.grad(out, (a, b), grad_out),
                         torch.autograd.grad(expected, (a, b), grad_out)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert torch.allclose(out, expected, atol=1e-6)
