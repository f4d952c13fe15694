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
    step_names        step_number (the N of `step_<N>` folders), unrenamed_saves; no torch, for vote.py
    diagnostics       visit_alignment (per-visit gradient alignment of weight-tied sublayers)
    flops             model FLOPs per token of a training step (the benchmarks' MFU)
    train             the trainer (pretrain.py), with pretrain_config, resume_settings, distributed,
                      compiled, evaluation, train_checkpoint, run_log, run_lock and sweep
    schedule          the lr schedule (warmup, cosine) and a run's estimated length in steps
    sigterm           StopOnSigterm (stop after the step, saved), TrainingStopped
    run_checks        the checks that a run's build and settings belong together (splits, ranks, resume)
    run_naming        a run's default name (one time stamp per sweep), project and folder
    run_folders       run folders, their checkpoints and the one resume= picks, by path; no torch
"""
import importlib

# Imported on first use: `from hrm.pretrain_config import ...` (pretrain.py's config checks) then
# does not load torch, which takes seconds, to refuse a bad value.
_EXPORTS = {"ArchConfig": "config", "ModuleScalingOverride": "config", "ScalingConfig": "config",
            "ACTLossHead": "loss", "HRM": "model", "Carry": "model", "AdamATan2": "optim",
            "PuzzleEmbedding": "puzzle_embedding", "PuzzleSignSGD": "puzzle_embedding",
            "derive_scaling": "scaling", "describe_scaling": "scaling"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"hrm.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'hrm' has no attribute {name!r}")
