"""Model FLOPs per token of one training step, for throughput and MFU figures.

The convention: the model FLOPs one training step actually executes (ACT forward in training
mode, loss, backward), divided by its tokens. Counted are the matrix multiplies (2*m*n*k) and
attention (q k^T and p v):
  - the training segment, every block visit once; of those, the gradient-visible ones (the last L
    call and the last H call: the one-step gradient) again twice for the backward (d-input and
    d-weight), so three times in all, and the no-grad H/L iterations once;
  - the no-grad target-Q segment, every visit once, its last block for position 0 only (the one
    position the Q head reads); none when halt_max_steps is 1, where the model computes no Q target;
  - the LM head (forward and backward) and the Q head (forward and backward on the training
    segment, forward on the target-Q segment).
The puzzle embedding is a lookup (no multiplies), but its positions go through every block, so
their work is counted. Elementwise work (norms, RoPE, SwiGLU's gate, softmax, the loss, the
optimizers) is not. Recomputation a kernel may do in its backward (FlashAttention) is not counted.

Tokens are the seq_len input positions of every row, padding included, puzzle positions not: a
step of batch B has B * seq_len tokens, and FLOPs per token times tokens/s is the FLOP/s achieved.
"""
from __future__ import annotations

import torch

from hrm.config import ArchConfig


def flops_per_token(arch: ArchConfig, seq_len: int, vocab: int) -> float:
    hidden, inner = arch.hidden_size, arch.mlp_hidden
    positions = seq_len + arch.puzzle_tokens
    per_position = (2 * hidden * 3 * hidden + 2 * hidden * hidden          # qkv, o
                    + 2 * hidden * 2 * inner + 2 * inner * hidden           # gate|up, down
                    + 4 * positions * hidden)                               # q k^T, p v
    block_visit = per_position * positions                                  # one block, one row
    # The target-Q segment's last block answers position 0 only: full qkv (keys and values),
    # then attention, o_proj and the MLP for one query.
    first_only_visit = (2 * hidden * 3 * hidden * positions + 4 * positions * hidden
                        + 2 * hidden * hidden + 2 * hidden * 2 * inner + 2 * inner * hidden)
    segment_visits = arch.H_cycles * (arch.L_cycles * arch.L_layers + arch.H_layers)
    grad_visits = arch.L_layers + arch.H_layers
    q_head = 2 * hidden * 2                                                 # one row: (halt, continue)
    forward = segment_visits * block_visit + q_head                        # the training segment
    if arch.halt_max_steps > 1:   # the target-Q segment (hrm.model skips it with one ACT step)
        forward += (segment_visits - 1) * block_visit + first_only_visit + q_head
    backward = 2 * (grad_visits * block_visit + q_head)
    lm_head = 3 * 2 * hidden * vocab * seq_len        # forward + backward
    return (forward + backward + lm_head) / seq_len


H200_BF16_DENSE_TFLOPS = 989.0  # vendor peak, dense bf16: the default MFU reference


def cuda_figures(flops_per_tok: float, tokens_per_s: float, peak_tflops: float) -> dict:
    """MFU against `peak_tflops` and the peak GPU memory since the last reset (the benchmarks reset
    it after their warm-up), as bench_model.py and bench_train.py report them on CUDA."""
    return {"mfu": round(flops_per_tok * tokens_per_s / (peak_tflops * 1e12), 4),
            "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
