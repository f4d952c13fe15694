"""The weight-tied reasoning modules of the HRM: a block and a stack of blocks.

Post-norm block (HRM, DeepNorm, DeepLoop), for each sublayer f in (attention, SwiGLU):
    x <- RMSNorm(alpha * x + f(x))
with the init gain beta applied once to the residual-branch matrices (value rows of qkv_proj,
o_proj, gate|up, down; q and k rows keep gain 1). alpha = beta = 1 is the published HRM, and then
no extra operation runs at all, so rule "none" is bit-for-bit the unscaled model.

Pre-norm block (ablation ``prenorm_1_over_n``): x <- x + eps * f(RMSNorm(x)).

Public API
----------
``ReasoningBlock(hidden_size, num_heads, mlp_hidden, norm_eps, alpha=1.0, beta=1.0, prenorm_eps=None)``
    forward(x, rope, first_only=False) -> x
``ReasoningModule(blocks)``  forward(state, injection, rope, first_only=False): state + injection,
    then every block.
``build_module(arch, module_scaling, num_blocks) -> ReasoningModule``  from one entry of
    ``hrm.scaling.derive_scaling``.
"""
from __future__ import annotations

import torch
from torch import nn

from hrm.attention import Attention
from hrm.config import ArchConfig
from hrm.layers import SwiGLU, add_rms_norm, rms_norm


class ReasoningBlock(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, mlp_hidden: int, norm_eps: float,
                 alpha: float = 1.0, beta: float = 1.0, prenorm_eps: float | None = None):
        super().__init__()
        self.attn = Attention(hidden_size, num_heads)
        self.mlp = SwiGLU(hidden_size, mlp_hidden)
        self.norm_eps = norm_eps
        self.alpha = float(alpha)
        # alpha again as a tensor (not saved: it comes from the config), which is what torch.compile
        # sees: runs that differ only in alpha (the p values of a sweep, hrm_v1 against hrm_deeploop)
        # then trace the same graph and share the compile cache. (alpha = 1 multiplies by exactly 1.)
        self.register_buffer("alpha_tensor", torch.tensor(self.alpha), persistent=False)
        self.prenorm_eps = prenorm_eps
        if beta != 1.0:
            with torch.no_grad():
                self.attn.qkv_proj.weight[2 * hidden_size:].mul_(beta)  # value rows only
                self.attn.o_proj.weight.mul_(beta)
                self.mlp.gate_up_proj.weight.mul_(beta)
                self.mlp.down_proj.weight.mul_(beta)

    def _add_norm(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        """RMSNorm(alpha * x + branch); with alpha = 1 a plain add, HRM exactly as published."""
        alpha = self.alpha_tensor if torch.compiler.is_compiling() else self.alpha
        return add_rms_norm(x, branch, alpha, self.norm_eps)

    def forward(self, x: torch.Tensor, rope, first_only: bool = False) -> torch.Tensor:
        """x [batch, seq, hidden] -> same; ``first_only`` returns position 0 alone ([batch, 1,
        hidden]), computing attention for that query only: enough when only the Q head reads it."""
        queries = 1 if first_only else None
        if self.prenorm_eps is not None:
            branch = self.attn(rms_norm(x, self.norm_eps), rope, queries)
            x = x[:, :queries] + self.prenorm_eps * branch
            return x + self.prenorm_eps * self.mlp(rms_norm(x, self.norm_eps))
        x = self._add_norm(x[:, :queries], self.attn(x, rope, queries))
        return self._add_norm(x, self.mlp(x))


class ReasoningModule(nn.Module):
    """A stack of blocks applied to (state + injection): HRM's H or L module."""

    def __init__(self, blocks: list[ReasoningBlock]):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, state: torch.Tensor, injection: torch.Tensor, rope,
                first_only: bool = False) -> torch.Tensor:
        """``first_only``: the last block computes position 0 alone (see ReasoningBlock)."""
        x = state + injection
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, rope, first_only=first_only and i == last)
        return x


def build_module(arch: ArchConfig, module_scaling: dict, num_blocks: int) -> ReasoningModule:
    """Blocks of one module, constructed in order (the order fixes which seed draws which weight)."""
    return ReasoningModule([
        ReasoningBlock(arch.hidden_size, arch.num_heads, arch.mlp_hidden, arch.rms_norm_eps,
                       alpha=module_scaling["alpha"], beta=module_scaling["beta"],
                       prenorm_eps=module_scaling["eps"])
        for _ in range(num_blocks)])
