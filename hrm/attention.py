"""Full (non-causal) multi-head self-attention with a fused qkv projection and RoPE.

Backends: FlashAttention (``flash_attn_interface`` = FA3, else ``flash_attn`` = FA2) when it
imports, the tensors are CUDA half/bfloat16 and it runs their head_dim on this GPU (tried once per
head_dim: ``flash_runs``); otherwise PyTorch's
``scaled_dot_product_attention`` (its own flash/efficient/math kernels, CPU included). Both compute
softmax(q k^T / sqrt(head_dim)) v.

Public API
----------
``attend(q, k, v, backend="auto") -> out``   q, k, v, out: [batch, heads, seq, head_dim]
``flash_attention_available() -> bool``
``flash_runs(head_dim, device) -> bool``
``Attention(hidden_size, num_heads)``        forward(x, rope: (cos, sin) | None, queries=None)
                                             -> [batch, seq (or queries), hidden]
    ``qkv_proj.weight`` is [3*hidden, hidden]: rows of q, then k, then v, heads contiguous inside
    each block; ``o_proj.weight`` is [hidden, hidden]. No biases.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import nn

from hrm.layers import Linear, apply_rope


_flash_lookup: tuple | None = None   # (flash_attn_func or None,) once looked up


def _flash_attn_func():
    """The FlashAttention entry point, imported on first use; None when neither FA3 nor FA2 is there.

    Kept in a plain global rather than a functools.cache: torch.compile traces through a cache
    wrapper into the imports, and a failed one (no FA3, the usual case) breaks the graph at every
    attention call. Attention.__init__ looks it up eagerly, so a compiled step only reads it."""
    global _flash_lookup
    if _flash_lookup is None:
        _flash_lookup = (_import_flash_attn_func(),)
    return _flash_lookup[0]


def _import_flash_attn_func():
    try:
        from flash_attn_interface import flash_attn_func  # FA3 (Hopper)
        return flash_attn_func
    except ImportError:  # no FA3: try FA2 below
        pass
    try:
        from flash_attn import flash_attn_func  # FA2
        return flash_attn_func
    except ImportError:
        return None


def flash_attention_available() -> bool:
    return _flash_attn_func() is not None


# head_dim -> whether the installed FlashAttention runs it on this machine's GPU, probed once. What
# it runs depends on its version and the GPU: FA2 raises on GPUs before Ampere (a T4, a V100); FA3
# builds before 2025 take head_dim 64, 128 and 256 only (hrm_tiny's is 32). Such a head_dim, or
# GPU, takes SDPA instead of failing at the first step.
_flash_head_dims: dict[int, bool] = {}


@torch.compiler.assume_constant_result
def flash_runs(head_dim: int, device: torch.device) -> bool:
    """Whether FlashAttention runs attention with this head_dim on `device` (a CUDA device): the
    first ask per head_dim tries it (a forward and a backward of a few bfloat16 rows), later ones
    read the answer. Asked at the first attention call, on the device the model runs on (not at
    construction: predict.py builds its model before choosing each rank's GPU); a compiled step
    asks while it is traced, outside the graph, which keeps the answer as a constant."""
    known = _flash_head_dims.get(head_dim)
    if known is None:
        known = _flash_head_dims[head_dim] = _try_flash(head_dim, device)
    return known


def _try_flash(head_dim: int, device: torch.device) -> bool:
    try:
        # with autograd on whatever the caller's mode (predict.py builds its model for inference)
        with torch.inference_mode(False), torch.enable_grad():
            x = torch.zeros(1, 8, 1, head_dim, device=device, dtype=torch.bfloat16, requires_grad=True)
            out = _flash_attn_func()(x, x, x, causal=False)
            (out[0] if isinstance(out, tuple) else out).float().sum().backward()
        return True
    except Exception as e:   # flash-attn's refusals are RuntimeErrors, its own asserts AssertionErrors
        print(f"[hrm] flash-attn cannot run attention with head_dim {head_dim} here ({type(e).__name__}: "
              f"{str(e).strip().splitlines()[0] if str(e).strip() else 'no message'}); attention uses PyTorch's "
              f"scaled_dot_product_attention instead", file=sys.stderr, flush=True)
        return False


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """Non-causal attention on [batch, heads, seq, head_dim] tensors, scale 1/sqrt(head_dim).

    ``backend``: "auto" (flash when usable, else SDPA), "flash" (error when unusable) or "sdpa".
    """
    flash_ok = (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and flash_attention_available()
                and flash_runs(q.shape[-1], q.device))
    if backend == "flash" and not flash_ok:
        raise RuntimeError("flash attention needs flash_attn installed, CUDA fp16/bf16 tensors and a GPU and "
                           "head_dim it runs")
    if backend not in ("auto", "flash", "sdpa"):
        raise ValueError(f"unknown attention backend {backend!r}")
    if flash_ok and backend != "sdpa":
        # FlashAttention wants seq before heads; transposed views do (it needs unit last stride).
        out = _flash_attn_func()(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=False)
        out = out[0] if isinstance(out, tuple) else out  # FA3 also returns the softmax LSE
        return out.transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v)


class Attention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.qkv_proj = Linear(hidden_size, 3 * hidden_size)
        self.o_proj = Linear(hidden_size, hidden_size)
        if torch.cuda.is_available():   # only CUDA runs flash: a CPU process imports none of it
            _flash_attn_func()          # looked up here, eagerly, not inside a compiled step

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None,
                queries: int | None = None) -> torch.Tensor:
        """Self-attention of x [batch, seq, hidden]; with ``queries`` only the first that many
        positions ask (all positions still serve as keys and values)."""
        batch, seq, hidden = x.shape
        if rope is not None and self._rows_path(x):
            weight = self.qkv_proj.weight.to(x.dtype)
            if torch.is_grad_enabled():
                q, k, v = _RotaryProjection.apply(x, weight, *rope, self.num_heads)
            else:
                q, k, v = _project_and_rotate_rows(x, weight, *rope, self.num_heads)
        else:
            # [3, batch, heads, seq, head_dim] view of the fused projection.
            qkv = self.qkv_proj(x).view(batch, seq, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            if rope is not None:
                q, k = apply_rope(qkv[:2], *rope).unbind(0)  # q and k rotated in one pass
            else:
                q, k = qkv[0], qkv[1]
            v = qkv[2]
            if not torch.is_grad_enabled():
                v = v.contiguous()  # the SDPA CPU kernel runs measurably faster on dense inputs
        if queries is not None:
            q = q[:, :, :queries]
        out = attend(q, k, v)
        return self.o_proj(out.transpose(1, 2).reshape(batch, q.shape[2], hidden))

    def _rows_path(self, x: torch.Tensor) -> bool:
        """Whether the projection and RoPE take the CPU row-by-row path (eager CPU only: CUDA and
        torch.compile fuse the general path themselves, and forward hooks on qkv_proj, which
        hrm.diagnostics uses, need the module called)."""
        return not (x.is_cuda or torch.compiler.is_compiling() or self.qkv_proj._forward_hooks)


def _project_and_rotate_rows(x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor,
                             sin: torch.Tensor, num_heads: int):
    """q (rotated), k (rotated), v as dense [batch, heads, seq, head_dim] in x's dtype (RoPE itself
    in float32 at least), from x [batch, seq, hidden] and the fused qkv weight.

    The same products and RoPE as the general path, one batch row at a time: the row's
    [seq, 3*hidden] projection stays in cache while RoPE and the copy of v into the heads-first
    layout read it (~7% off the attention sublayer here, most of it in RoPE).
    """
    batch, seq, hidden = x.shape
    head_dim = hidden // num_heads
    row_qkv = torch.empty(seq, 3 * hidden, dtype=x.dtype, device=x.device)
    heads = torch.empty(3, batch, num_heads, seq, head_dim, device=x.device,
                        dtype=torch.promote_types(x.dtype, torch.float32))  # RoPE in float32 at least
    for b in range(batch):
        torch.mm(x[b], weight.t(), out=row_qkv)
        qkv = row_qkv.view(seq, 3, num_heads, head_dim).permute(1, 2, 0, 3)
        apply_rope(qkv[:2], cos, sin, out=heads[:2, b])
        heads[2, b].copy_(qkv[2])
    heads = heads.to(x.dtype)
    return heads[0], heads[1], heads[2]


class _RotaryProjection(torch.autograd.Function):
    """``_project_and_rotate_rows`` with a hand-written backward (CPU, eager).

    Autograd through the general path materialises zero-filled gradients for the q|k slice and the
    v slice of the projection, adds them, and copies the permuted result back into the projection
    layout before the two weight products. Here the gradient of each batch row is assembled in
    place in the [seq, 3*hidden] layout: RoPE inverted for q and k (a rotation by -angle:
    dx1 = g1 cos + g2 sin, dx2 = g2 cos - g1 sin), v copied, then one product each for d(x) and
    d(W). Only x and W are saved; RoPE needs no saved activations.
    """

    @staticmethod
    def forward(ctx, x, weight, cos, sin, num_heads):
        ctx.save_for_backward(x, weight, cos, sin)
        ctx.num_heads = num_heads
        return _project_and_rotate_rows(x, weight, cos, sin, num_heads)

    @staticmethod
    def backward(ctx, grad_q, grad_k, grad_v):
        x, weight, cos, sin = ctx.saved_tensors
        batch, seq, hidden = x.shape
        heads, head_dim, half = ctx.num_heads, hidden // ctx.num_heads, hidden // ctx.num_heads // 2
        grad_qkv = torch.empty(batch, seq, 3 * hidden, dtype=x.dtype, device=x.device)
        grads = (grad_q, grad_k, grad_v)
        for b in range(batch):
            # The row's [3, heads, seq, head_dim] view of its [seq, 3*hidden] gradient.
            row = grad_qkv[b].view(seq, 3, heads, head_dim).permute(1, 2, 0, 3)
            for i, grad in enumerate(grads):
                if grad is None:
                    row[i].zero_()
                elif i == 2:
                    row[2].copy_(grad[b])
                else:
                    g = grad[b]
                    torch.mul(g, cos, out=row[i])
                    row[i, ..., :half].addcmul_(g[..., half:], sin[..., half:])
                    row[i, ..., half:].addcmul_(g[..., :half], sin[..., :half], value=-1.0)
        flat = grad_qkv.view(-1, 3 * hidden)
        grad_x = torch.mm(flat, weight).view_as(x) if ctx.needs_input_grad[0] else None
        # d(W) = d(qkv)^T x, formed as (x^T d(qkv))^T: MKL runs that orientation ~25% faster.
        grad_w = (torch.mm(x.reshape(-1, hidden).t(), flat).t().contiguous()
                  if ctx.needs_input_grad[1] else None)
        return grad_x, grad_w, None, None, None
