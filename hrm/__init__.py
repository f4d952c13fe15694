"""HRM with DeepLoop residual scaling: model, losses, optimizers, checkpoints, diagnostics.

Modules (each documents its public API):
    config            ArchConfig, ScalingConfig (pydantic, extra="forbid")
    scaling           derive_scaling(arch) -> per-module M, N, alpha, beta (and eps for pre-norm)
    layers            init, RMSNorm, Linear, Embedding, RoPE, SwiGLU
    attention         SDPA / FlashAttention backends, fused-qkv Attention
    reasoning         ReasoningBlock (post-norm with alpha/beta, or pre-norm), ReasoningModule
    model             HRM (segments, one-step gradient, ACT, predict), Carry
    loss              stablemax / softmax CE, ACTLossHead (loss, metrics, evaluate)
    puzzle_embedding  PuzzleEmbedding (buffer table), PuzzleSignSGD (all-gathered sign-SGD)
    optim             AdamATan2 (fused CUDA kernel when available, exact PyTorch fallback)
    checkpoint        save_model / load_model, load_original_checkpoint (sapientinc/HRM format)
    diagnostics       visit_alignment (per-visit gradient alignment of weight-tied sublayers)
    train             the trainer (separate issue)
"""
from hrm.config import ArchConfig, ModuleScalingOverride, ScalingConfig
from hrm.loss import ACTLossHead
from hrm.model import HRM, Carry
from hrm.optim import AdamATan2
from hrm.puzzle_embedding import PuzzleEmbedding, PuzzleSignSGD
from hrm.scaling import derive_scaling, describe_scaling

__all__ = ["ArchConfig", "ScalingConfig", "ModuleScalingOverride", "HRM", "Carry", "ACTLossHead",
           "AdamATan2", "PuzzleEmbedding", "PuzzleSignSGD", "derive_scaling", "describe_scaling"]
