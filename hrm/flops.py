"""Model FLOPs per token of one training step, for throughput and MFU figures.

Counts matrix multiplies (2*m*n*k) and attention (q k^T and p v) of every block visit as executed:
the training segment (all visits), the no-grad target-Q segment (its last block for position 0
only, the one position the Q head reads; none when halt_max_steps is 1, where the model has no
Q target to compute), the backward (2x the forward) of the gradient-visible visits, and the LM
head forward and backward. Elementwise work is not counted.
"""
from __future__ import annotations

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
    forward = segment_visits * block_visit                                 # the training segment
    if arch.halt_max_steps > 1:   # the target-Q segment (hrm.model skips it with one ACT step)
        forward += (segment_visits - 1) * block_visit + first_only_visit
    backward = 2 * grad_visits * block_visit
    head = 3 * 2 * hidden * vocab * seq_len           # LM head forward + backward
    return (forward + backward + head) / seq_len
