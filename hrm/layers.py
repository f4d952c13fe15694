"""Building blocks of the HRM: initialisation, RMSNorm, linear and embedding layers, RoPE, SwiGLU.

Weights are kept in float32 and cast to the compute dtype where they are used (a no-op on CPU), so
the same module runs in float32 on CPU and bfloat16 on CUDA without any device code here.

Public API
----------
``truncated_normal_(tensor, std, bound=2.0)``  in-place truncated normal whose real std is ``std``
``rms_norm(x, eps)``                            x * rsqrt(mean(x^2) + eps), in float32, no gain
``rms_norm_(x, eps)``                           the same in place, for tensors outside autograd
``add_rms_norm(x, branch, alpha, eps)``         rms_norm(alpha * x + branch), the post-norm residual
``Linear(in_features, out_features, bias=False)``  weight [out, in], LeCun truncated-normal init
``Embedding(num, dim, init_std)``               a lookup table with truncated-normal init
``RotaryTable(head_dim, positions, theta)``     cos/sin tables (float32, non-persistent buffers)
``apply_rope(x, cos, sin)``                     rotate-half RoPE in float32, x [..., seq, head_dim]
``SwiGLU(hidden, inner)``                        down(silu(gate) * up), gate|up fused, gate first
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


@torch.no_grad()
def truncated_normal_(tensor: torch.Tensor, std: float, bound: float = 2.0) -> torch.Tensor:
    """Fill ``tensor`` with a normal truncated at +-``bound`` standard deviations.

    ``torch.nn.init.trunc_normal_`` keeps the std of the *untruncated* normal, so its samples come
    out ~12% narrower than asked at +-2. Here the std of the truncated distribution itself equals
    ``std``: the unit normal truncated at +-b has variance 1 - 2 b phi(b) / (Phi(b) - Phi(-b)), and we
    widen the draw by its inverse square root. Sampling is by inverse CDF (uniform in erf space, then
    erfinv), the same draw order as the published HRM so that equal seeds give equal weights.
    """
    if std == 0:
        return tensor.zero_()
    erf_bound = math.erf(bound / math.sqrt(2))          # P(|Z| < bound)
    density = math.exp(-0.5 * bound * bound) / math.sqrt(2 * math.pi)
    scale = std / math.sqrt(1 - 2 * bound * density / erf_bound)
    tensor.uniform_(-erf_bound, erf_bound)
    tensor.erfinv_()
    tensor.mul_(math.sqrt(2) * scale)
    return tensor.clamp_(-bound * scale, bound * scale)


def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without gain, computed in float32 whatever the input dtype (post-norm needs it)."""
    if x.dtype == torch.float32:
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)).to(x.dtype)


def rms_norm_(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``rms_norm`` for tensors outside autograd, overwriting ``x`` when it is float32.

    The sum of squares comes from one fused reduction (vector_norm) instead of square + mean, and
    the scaling happens in place: two passes over x instead of four, and no temporaries. The
    no-grad segments run most block visits, so this is where elementwise time goes.
    """
    x32 = x if x.dtype == torch.float32 else x.float()
    norm = torch.linalg.vector_norm(x32, dim=-1, keepdim=True)
    x32.mul_(torch.rsqrt(norm.square_().div_(x.shape[-1]).add_(eps)))
    return x32 if x.dtype == torch.float32 else x32.to(x.dtype)


def add_rms_norm(x: torch.Tensor, branch: torch.Tensor, alpha: float | torch.Tensor, eps: float) -> torch.Tensor:
    """rms_norm(alpha * x + branch): the residual update of a post-norm block.

    Outside autograd ``branch`` is scratch and is overwritten. With a graph on CPU in float32
    (eager), a hand-written backward replaces autograd's chain of elementwise ops. alpha = 1 adds
    plainly, so the published HRM is computed exactly as written. A 0-dim tensor alpha (what
    ReasoningBlock passes under torch.compile) is an input of the graph rather than a constant in it.
    """
    if isinstance(alpha, torch.Tensor):
        return rms_norm(torch.addcmul(branch, x, alpha), eps)
    if not torch.is_grad_enabled():
        total = branch.add_(x) if alpha == 1.0 else branch.add_(x, alpha=alpha)
        return rms_norm_(total, eps)
    if x.dtype == branch.dtype == torch.float32 and not (x.is_cuda or torch.compiler.is_compiling()):
        return _AddRMSNorm.apply(x, branch, alpha, eps)
    total = x + branch if alpha == 1.0 else torch.add(branch, x, alpha=alpha)
    return rms_norm(total, eps)


class _AddRMSNorm(torch.autograd.Function):
    """y = t * r with t = alpha * x + branch and r = rsqrt(mean(t^2) + eps), float32.

    Backward from y alone (y = t r): dt = r * (g - y * mean(g * y)), per row; then d(branch) = dt
    and d(x) = alpha * dt. Four passes over the activations instead of autograd's ~ten, and only
    y and r are kept (y is also the next sublayer's input, so it costs no extra memory).
    """

    @staticmethod
    def forward(ctx, x, branch, alpha, eps):
        total = torch.add(branch, x, alpha=alpha)
        inv_rms = torch.linalg.vector_norm(total, dim=-1, keepdim=True)
        inv_rms.square_().div_(total.shape[-1]).add_(eps).rsqrt_()
        y = total.mul_(inv_rms)
        ctx.save_for_backward(y, inv_rms)
        ctx.alpha = alpha
        return y

    @staticmethod
    def backward(ctx, grad):
        y, inv_rms = ctx.saved_tensors
        mean_gy = torch.mul(grad, y).sum(-1, keepdim=True).div_(y.shape[-1])
        grad_total = torch.addcmul(grad, y, mean_gy, value=-1.0).mul_(inv_rms)
        grad_x = grad_total if ctx.alpha == 1.0 else grad_total * ctx.alpha
        return grad_x, grad_total, None, None


class Linear(nn.Module):
    """y = x W^T (+ b); W [out, in] in float32, LeCun truncated-normal init, bias zero."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        self.weight = nn.Parameter(truncated_normal_(torch.empty(out_features, in_features),
                                                     std=in_features ** -0.5))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.linear(x, self.weight.to(x.dtype), bias)


class Embedding(nn.Module):
    """A [num, dim] float32 table, looked up and cast to the compute dtype."""

    def __init__(self, num_embeddings: int, embedding_dim: int, init_std: float):
        super().__init__()
        self.weight = nn.Parameter(truncated_normal_(torch.empty(num_embeddings, embedding_dim),
                                                     std=init_std))

    def forward(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return F.embedding(ids, self.weight.to(dtype))


class RotaryTable(nn.Module):
    """cos and sin of cat(freqs, freqs) for positions 0..positions-1 (rotate-half convention)."""

    def __init__(self, head_dim: int, positions: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(positions, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        # Derived from the config, so kept out of checkpoints.
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[:length], self.sin[:length]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1), in float32.

    ``x`` is [..., seq, head_dim] (heads-major, as attention uses it); ``cos``/``sin`` are
    [seq, head_dim] and broadcast from the right. Written as one multiply and two in-place fused
    multiply-adds on the halves of the output instead of materialising rotate_half: this runs at
    every block visit and is memory bound, so the saved passes are most of its cost. Outside
    autograd the result is written to a fresh contiguous tensor (or to ``out``, float32 and x's
    shape), the layout attention reads fastest.
    """
    dtype = x.dtype
    x = x.to(torch.promote_types(dtype, torch.float32))  # float64 stays float64 (gradcheck)
    if torch.is_grad_enabled():
        out = x * cos
    else:
        out = torch.mul(x, cos, out=torch.empty(x.shape, dtype=x.dtype, device=x.device)
                        if out is None else out)
    half = x.shape[-1] // 2
    out[..., :half].addcmul_(x[..., half:], sin[..., :half], value=-1.0)
    out[..., half:].addcmul_(x[..., :half], sin[..., half:])
    return out.to(dtype)


class SwiGLU(nn.Module):
    """down(silu(gate) * up) with gate|up as one [2*inner, hidden] matrix, gate rows first."""

    def __init__(self, hidden_size: int, inner_size: int):
        super().__init__()
        self.gate_up_proj = Linear(hidden_size, 2 * inner_size)
        self.down_proj = Linear(inner_size, hidden_size)

    # Rows per block of the CPU path: the [rows, 2*inner] intermediate then stays in L2. With a
    # graph the backward's blocks carry more buffers per row, and half the rows measured ~4% faster.
    CPU_BLOCK_ROWS = 1024
    CPU_GRAD_BLOCK_ROWS = 512

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Forward hooks on the two Linear modules (hrm.diagnostics records each visit's matrix
        # products through them) need the modules called: then take the general path.
        hooked = bool(self.gate_up_proj._forward_hooks or self.down_proj._forward_hooks)
        grad = torch.is_grad_enabled()
        # Under torch.compile the graph path stays plain autograd: inductor fuses it itself (and
        # measured no faster with the hand-written backward traced in). The blocked backward sums
        # d(W) block by block in x's dtype: in bfloat16/float16 that rounds at every block, so those
        # take autograd's single product (which accumulates in float32) when there is a graph.
        low_precision = x.dtype in (torch.bfloat16, torch.float16)
        if x.is_cuda or hooked or (grad and (torch.compiler.is_compiling() or low_precision)):
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            if grad:
                return self.down_proj(F.silu(gate) * up)
            return self.down_proj(F.silu(gate).mul_(up))  # no graph: multiply into the silu buffer
        # On CPU go through the rows in blocks, so the wide intermediate never leaves the cache
        # between the passes over it (~10% faster per MLP); with a graph, backward too.
        w_gate_up = self.gate_up_proj.weight.to(x.dtype)
        w_down = self.down_proj.weight.to(x.dtype)
        if grad:
            return _BlockedSwiGLU.apply(x, w_gate_up, w_down, self.CPU_GRAD_BLOCK_ROWS)
        return _swiglu_blocks(x, w_gate_up, w_down, self.CPU_BLOCK_ROWS, keep_gate_up=False)[0]


def _swiglu_blocks(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, block_rows: int,
                   keep_gate_up: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """down(silu(gate) * up) of x [..., hidden], ``block_rows`` rows at a time.

    Returns the output and, with ``keep_gate_up``, the whole [rows, 2*inner] pre-activation (what
    the backward needs); without it one block-sized buffer is reused, so it stays in cache.
    """
    rows = x.reshape(-1, x.shape[-1])
    n, inner = rows.shape[0], w_down.shape[1]
    # MKL runs these products ~10% (gate|up) and ~25% (down) faster with the weight as a dense
    # [in, out] matrix than as the transposed view of [out, in]: transpose once per call.
    w_gate_up_t, w_down_t = w_gate_up.t().contiguous(), w_down.t().contiguous()
    out = torch.empty(n, w_down.shape[0], dtype=x.dtype, device=x.device)
    gate_up = torch.empty(n if keep_gate_up else min(n, block_rows), 2 * inner, dtype=x.dtype,
                          device=x.device)
    for start in range(0, n, block_rows):
        block = slice(start, start + block_rows)
        size = min(block_rows, n - start)
        gu = gate_up[block] if keep_gate_up else gate_up[:size]
        torch.mm(rows[block], w_gate_up_t, out=gu)
        gate, up = gu.chunk(2, dim=-1)
        # With a graph gate|up is kept for the backward; without, silu overwrites the gate half.
        hidden = F.silu(gate) if keep_gate_up else F.silu(gate, inplace=True)
        torch.mm(hidden.mul_(up), w_down_t, out=out[block])
    return out.view(*x.shape[:-1], out.shape[-1]), (gate_up if keep_gate_up else None)


class _BlockedSwiGLU(torch.autograd.Function):
    """SwiGLU with a hand-written, row-blocked backward (CPU).

    Plain autograd keeps silu(gate) and the product as well as gate|up, runs silu_backward and the
    multiplies over the full [rows, inner] tensors, concatenates d(gate) and d(up) into a fresh
    [rows, 2*inner] tensor, and forms d(W_gate_up) as one long-K product (slow in MKL here). This
    saves x and gate|up only and, per block of rows, recomputes silu(gate) and the product in cache,
    writes d(gate) and d(up) straight into one buffer and accumulates the weight gradients. Same
    formulas as autograd (silu'(g) via aten's silu_backward); only the summation order differs.
    """

    @staticmethod
    def forward(ctx, x, w_gate_up, w_down, block_rows):
        out, gate_up = _swiglu_blocks(x, w_gate_up, w_down, block_rows, keep_gate_up=True)
        ctx.save_for_backward(x, gate_up, w_gate_up, w_down)
        ctx.block_rows = block_rows
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, gate_up, w_gate_up, w_down = ctx.saved_tensors
        block_rows = ctx.block_rows
        rows = x.reshape(-1, x.shape[-1])
        grad_rows = grad_out.reshape(-1, grad_out.shape[-1])
        n, inner = rows.shape[0], w_down.shape[1]
        grad_x = torch.empty_like(rows)
        # d(W_gate_up) is accumulated transposed, x^T d(gate|up): MKL is faster at it that way.
        grad_w_gate_up_t = torch.zeros(w_gate_up.shape[1], w_gate_up.shape[0], dtype=x.dtype,
                                       device=x.device)
        grad_w_down = torch.zeros_like(w_down)
        d_gate_up = torch.empty(min(n, block_rows), 2 * inner, dtype=x.dtype, device=x.device)
        for start in range(0, n, block_rows):
            block = slice(start, start + block_rows)
            size = min(block_rows, n - start)
            gate, up = gate_up[block].chunk(2, dim=-1)
            act = F.silu(gate)
            grad_block = grad_rows[block]
            grad_w_down.addmm_(grad_block.t(), act * up)           # d(down) = g^T (silu(gate) * up)
            d_hidden = torch.mm(grad_block, w_down)                 # d(silu(gate) * up)
            d_gu = d_gate_up[:size]
            d_gate, d_up = d_gu.chunk(2, dim=-1)
            torch.mul(d_hidden, act, out=d_up)
            d_gate.copy_(torch.ops.aten.silu_backward(d_hidden.mul_(up), gate))
            grad_w_gate_up_t.addmm_(rows[block].t(), d_gu)
            torch.mm(d_gu, w_gate_up, out=grad_x[block])
        return grad_x.view_as(x), grad_w_gate_up_t.t().contiguous(), grad_w_down, None
