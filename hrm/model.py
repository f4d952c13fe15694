"""The Hierarchical Reasoning Model with adaptive computation time (ACT).

One *segment* (DESIGN.md, "Model (hrm)"): for h in H_cycles, for l in L_cycles:
z_L = L(z_L, z_H + x); after each h: z_H = H(z_H, z_L). Only the last L call and the last H call
build a graph (one-step gradient); the carry (z_H, z_L) is detached between segments.

ACT (training mode): a row halts when steps >= halt_max_steps or q_halt > q_continue, but with
probability halt_exploration_prob it must first reach randint(2, halt_max_steps + 1) steps. Halted
rows restart next call from H_init/L_init with fresh data from the batch. The q_continue target is
sigmoid of the next segment's q (halt if this was the last step, else max(halt, continue)), from one
extra no-grad segment. Evaluation mode: rows halt only at halt_max_steps.

Public API
----------
``HRM(arch, vocab_size, seq_len, num_puzzle_identifiers, verbose=True)``
    ``.scaling``                      derive_scaling(arch) (printed once here when verbose)
    ``.initial_carry(batch) -> Carry`` every row halted, so the first call loads and resets all
    ``.forward(carry, batch) -> (Carry, outputs)``  one ACT step; outputs: logits [B, seq, vocab],
        q_halt_logits [B], q_continue_logits [B] (float32), and target_q_continue [B] in training
    ``.predict(batch, segment=None) -> dict``  evaluation: every row reset once, exactly
        halt_max_steps segments, outputs of the last: logits, preds (argmax tokens), q_halt_logits,
        q_continue_logits; ``segment`` replaces ``.segment`` (a compiled copy)
    ``.embed(inputs, puzzle_identifiers, dtype)``, ``.segment(z_H, z_L, x, full_graph=False, q_only=False)``,
    ``.heads(z_H, with_logits=True)``  the pieces, for diagnostics and tests
    ``.compute_dtype(device)``        forward dtype on that device (auto: bf16 on CUDA, else fp32)
``Carry``  dataclass: z_H, z_L [B, puzzle_tokens + seq, hidden], steps int32 [B], halted bool [B],
           current_data {key: tensor} (the rows each slot is working on); ``.rows(slice)`` and
           ``Carry.concat([...])`` split and join it by rows (gradient accumulation)

Batch: ``inputs`` int [B, seq], ``labels`` int [B, seq] (-100 = ignored), ``puzzle_identifiers``
int [B]. Parameters stay float32; the compute dtype follows the inputs' device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hrm.config import ArchConfig, resolve_forward_dtype
from hrm.layers import Embedding, Linear, RotaryTable, rms_norm, truncated_normal_
from hrm.puzzle_embedding import PuzzleEmbedding
from hrm.reasoning import build_module
from hrm.scaling import derive_scaling, describe_scaling


@dataclass
class Carry:
    z_H: torch.Tensor
    z_L: torch.Tensor
    steps: torch.Tensor
    halted: torch.Tensor
    current_data: dict[str, torch.Tensor]

    def rows(self, index: slice) -> "Carry":
        """The carry of some rows (a micro-batch); views, no copies."""
        return Carry(self.z_H[index], self.z_L[index], self.steps[index], self.halted[index],
                     {k: v[index] for k, v in self.current_data.items()})

    @staticmethod
    def concat(parts: list["Carry"]) -> "Carry":
        """The micro-batches' carries back as one, rows in order."""
        if len(parts) == 1:
            return parts[0]
        return Carry(torch.cat([c.z_H for c in parts]), torch.cat([c.z_L for c in parts]),
                     torch.cat([c.steps for c in parts]), torch.cat([c.halted for c in parts]),
                     {k: torch.cat([c.current_data[k] for c in parts]) for k in parts[0].current_data})


class HRM(nn.Module):
    def __init__(self, arch: ArchConfig, vocab_size: int, seq_len: int, num_puzzle_identifiers: int,
                 verbose: bool = True):
        super().__init__()
        self.arch = arch
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.num_puzzle_identifiers = num_puzzle_identifiers
        self.scaling = derive_scaling(arch)
        if verbose:
            print(describe_scaling(self.scaling), flush=True)

        hidden = arch.hidden_size
        self.puzzle_tokens = arch.puzzle_tokens
        self.embed_scale = math.sqrt(hidden)
        # Construction order = order of random draws; it matches the published HRM, so the same
        # seed gives the same initial weights (a test pins it). H_init / L_init are drawn in float32
        # and cast; the original draws them in forward_dtype, so under bfloat16 a few of their
        # values differ from its (same stream, bf16 rounding of the draw).
        self.token_embedding = Embedding(vocab_size, hidden, init_std=1.0 / self.embed_scale)
        self.lm_head = Linear(hidden, vocab_size)
        self.q_head = Linear(hidden, 2, bias=True)
        if arch.puzzle_emb_ndim > 0:
            self.puzzle_embedding = PuzzleEmbedding(num_puzzle_identifiers, arch.puzzle_emb_ndim)
        positions = seq_len + self.puzzle_tokens
        if arch.pos_encodings == "rope":
            self.rope = RotaryTable(arch.head_dim, positions, arch.rope_theta)
        else:
            self.position_embedding = Embedding(positions, hidden, init_std=1.0 / self.embed_scale)
        self.H_module = build_module(arch, self.scaling["H"], arch.H_layers)
        self.L_module = build_module(arch, self.scaling["L"], arch.L_layers)
        # Start states of halted rows: one [hidden] vector each, broadcast to every position.
        self.register_buffer("H_init", truncated_normal_(torch.empty(hidden), std=1.0))
        self.register_buffer("L_init", truncated_normal_(torch.empty(hidden), std=1.0))
        # Q head starts (almost) at "never halt": zero weight, bias -5.
        with torch.no_grad():
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)
        # A pre-norm H module leaves its state unnormalised; normalise it before the heads.
        self.final_norm = self.scaling["H"]["eps"] is not None
        # Diagnostics only: backpropagate through every visit of the training segment.
        self.full_graph_segments = False

    # ----------------------------------------------------------------------------------- pieces
    def compute_dtype(self, device: torch.device) -> torch.dtype:
        return resolve_forward_dtype(self.arch, device)

    def embed(self, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor,
              dtype: torch.dtype) -> torch.Tensor:
        """Token embeddings with the puzzle tokens in front, times sqrt(hidden): [B, P + seq, hidden]."""
        x = self.token_embedding(inputs.long(), dtype)
        if self.puzzle_tokens:
            rows = self.puzzle_embedding(puzzle_identifiers).to(dtype)
            pad = self.puzzle_tokens * self.arch.hidden_size - rows.shape[-1]
            if pad:
                rows = F.pad(rows, (0, pad))
            x = torch.cat((rows.view(-1, self.puzzle_tokens, self.arch.hidden_size), x), dim=1)
        if self.arch.pos_encodings == "learned":
            # Token (+ puzzle) and position embeddings summed, scaled by 1/sqrt(2) to keep the variance.
            x = math.sqrt(0.5) * (x + self.position_embedding.weight[:x.shape[1]].to(dtype))
        return self.embed_scale * x

    def _rope(self, length: int):
        return self.rope(length) if self.arch.pos_encodings == "rope" else None

    def segment(self, z_H: torch.Tensor, z_L: torch.Tensor, x: torch.Tensor,
                full_graph: bool = False, q_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """One segment of H/L cycles. Only the final L and H calls record a graph unless
        ``full_graph`` (used by diagnostics to backpropagate through every visit). ``q_only``:
        the returned z_H holds position 0 alone, all the Q head reads (the target-Q pass)."""
        rope = self._rope(x.shape[1])
        H_cycles, L_cycles = self.arch.H_cycles, self.arch.L_cycles
        with torch.set_grad_enabled(full_graph and torch.is_grad_enabled()):
            for h in range(H_cycles):
                injection = z_H + x  # z_H is fixed during an H cycle: build the sum once
                for l in range(L_cycles):
                    if h == H_cycles - 1 and l == L_cycles - 1:
                        break
                    z_L = self.L_module(z_L, injection, rope)
                if h < H_cycles - 1:
                    z_H = self.H_module(z_H, z_L, rope)
        z_L = self.L_module(z_L, z_H + x, rope)
        z_H = self.H_module(z_H, z_L, rope, first_only=q_only)
        return z_H, z_L

    def heads(self, z_H: torch.Tensor, with_logits: bool = True):
        """(logits [B, seq, vocab] or None, q_halt [B], q_continue [B]) from the H state."""
        if self.final_norm:
            z_H = rms_norm(z_H, self.arch.rms_norm_eps)
        logits = self.lm_head(z_H[:, self.puzzle_tokens:]) if with_logits else None
        q = self.q_head(z_H[:, 0]).float()
        return logits, q[:, 0], q[:, 1]

    def _reset(self, halted: torch.Tensor, z_H: torch.Tensor, z_L: torch.Tensor):
        flag = halted.view(-1, 1, 1)
        return (torch.where(flag, self.H_init.to(z_H.dtype), z_H),
                torch.where(flag, self.L_init.to(z_L.dtype), z_L))

    # -------------------------------------------------------------------------------------- ACT
    def initial_carry(self, batch: dict[str, torch.Tensor]) -> Carry:
        inputs = batch["inputs"]
        size, device = inputs.shape[0], inputs.device
        shape = (size, self.puzzle_tokens + inputs.shape[1], self.arch.hidden_size)
        dtype = self.compute_dtype(device)
        return Carry(
            z_H=torch.zeros(shape, dtype=dtype, device=device),
            z_L=torch.zeros(shape, dtype=dtype, device=device),
            steps=torch.zeros(size, dtype=torch.int32, device=device),
            halted=torch.ones(size, dtype=torch.bool, device=device),  # all load on the first call
            current_data={k: torch.zeros_like(v) for k, v in batch.items()},
        )

    def forward(self, carry: Carry, batch: dict[str, torch.Tensor]):
        halted = carry.halted
        z_H, z_L = self._reset(halted, carry.z_H, carry.z_L)
        steps = torch.where(halted, 0, carry.steps)
        data = {k: torch.where(halted.view(-1, *([1] * (v.dim() - 1))), batch[k], v)
                for k, v in carry.current_data.items()}

        x = self.embed(data["inputs"], data["puzzle_identifiers"], z_H.dtype)
        z_H, z_L = self.segment(z_H, z_L, x, full_graph=self.full_graph_segments)
        logits, q_halt, q_continue = self.heads(z_H)
        outputs = {"logits": logits, "q_halt_logits": q_halt, "q_continue_logits": q_continue}
        z_H, z_L = z_H.detach(), z_L.detach()

        with torch.no_grad():
            steps = steps + 1
            last_step = steps >= self.arch.halt_max_steps
            halted = last_step
            if self.training and self.arch.halt_max_steps > 1:
                halted = halted | (q_halt > q_continue)
                # Exploration: some rows must run a random minimum number of steps.
                explore = torch.rand_like(q_halt) < self.arch.halt_exploration_prob
                min_steps = explore * torch.randint_like(steps, 2, self.arch.halt_max_steps + 1)
                halted = halted & (steps >= min_steps)
                # Bootstrapped target for q_continue from the next segment (no replay buffer,
                # no target network: the batch is many parallel environments).
                # Only the Q head reads the next segment: its last block computes position 0 only.
                next_H, _ = self.segment(z_H, z_L, x.detach(), q_only=True)
                _, next_halt, next_continue = self.heads(next_H, with_logits=False)
                outputs["target_q_continue"] = torch.sigmoid(
                    torch.where(last_step, next_halt, torch.maximum(next_halt, next_continue)))

        return Carry(z_H, z_L, steps, halted, data), outputs

    # ------------------------------------------------------------------------------- evaluation
    @torch.no_grad()
    def predict(self, batch: dict[str, torch.Tensor], segment=None) -> dict[str, torch.Tensor]:
        """Evaluation as published: reset every row once, run exactly halt_max_steps segments (no
        early halting, so rows stay in lockstep), report the last segment. Independent of
        train/eval mode; heads run once, at the end. ``segment``: a stand-in for ``self.segment``
        with the same signature (the trainer's compiled one)."""
        segment = segment or self.segment
        inputs = batch["inputs"]
        dtype = self.compute_dtype(inputs.device)
        x = self.embed(inputs, batch["puzzle_identifiers"], dtype)
        # Contiguous start states: every segment then sees the same strides (one compiled graph).
        z_H = self.H_init.to(dtype).expand_as(x).contiguous()
        z_L = self.L_init.to(dtype).expand_as(x).contiguous()
        for _ in range(self.arch.halt_max_steps):
            z_H, z_L = segment(z_H, z_L, x)
        logits, q_halt, q_continue = self.heads(z_H)
        return {"logits": logits, "preds": logits.argmax(-1), "q_halt_logits": q_halt,
                "q_continue_logits": q_continue}
