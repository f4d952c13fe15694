"""Throughput of full HRM training steps; prints one JSON line per configuration.

A step is what the trainer runs: ACT forward in training mode (segment with one-step gradient plus
the no-grad target-Q segment), loss, backward, AdamATan2 on the dense weights, sign-SGD on the
puzzle rows, zero_grad. Tokens are batch * 900 (puzzle tokens not counted).

Configurations:
  cpu-bench  hidden 128, 4 heads, expansion 4, H/L layers 2/2, H/L cycles 2/2, halt_max_steps 4,
             puzzle_emb_ndim 128, batch 8, float32, stablemax, torch.set_num_threads(1).
             Reference: the original HRM code ran it at 2,324 tokens/s on a 2-core x86 machine;
             target >= 1.2x = 2,789 tokens/s.
  hrm_v1     the published architecture (configs/arch/hrm_v1.yaml), on CUDA only, bfloat16, batch
             96: one GPU's share of the published global batch 768 on 8 GPUs (768 on one GPU would
             save ~140 GB of activations for the backward by estimate, about an H200's memory).

FLOPs per token (hrm.flops): the matrix multiplies and attention the step executes, per token:
every block visit of both segments once (the target-Q one only when halt_max_steps > 1, its last
block for position 0 only), the gradient-visible visits twice more for their backward, the LM and
Q heads forward and backward; elementwise work not counted. achieved_flops_per_s = flops_per_token
* tokens_per_s.

Usage: python scripts/bench_model.py [--config cpu-bench|hrm_v1|all] [--steps 6] [--warmup 2]
                                     [--batch N] [--compile]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hrm.compiled import compile_fixed_shapes  # noqa: E402
from hrm.config import ArchConfig  # noqa: E402
from hrm.flops import H200_BF16_DENSE_TFLOPS, cuda_figures, flops_per_token  # noqa: E402
from hrm.loss import ACTLossHead  # noqa: E402
from hrm.model import HRM  # noqa: E402
from hrm.optim import AdamATan2  # noqa: E402
from hrm.puzzle_embedding import PuzzleSignSGD  # noqa: E402

SEQ_LEN, VOCAB, NUM_PUZZLES = 900, 12, 1000
ORIGINAL_CPU_TOKENS_PER_S = 2324
CPU_BENCH = dict(name="cpu-bench", hidden_size=128, num_heads=4, expansion=4, H_layers=2, L_layers=2,
                 H_cycles=2, L_cycles=2, halt_max_steps=4, halt_exploration_prob=0.1,
                 puzzle_emb_ndim=128, forward_dtype="float32", loss_type="stablemax")


def make_batch(size: int, device: torch.device, generator: torch.Generator):
    inputs = torch.randint(0, VOCAB, (size, SEQ_LEN), generator=generator)
    labels = torch.randint(0, VOCAB, (size, SEQ_LEN), generator=generator)
    labels[:, SEQ_LEN // 2:] = -100  # as on ARC, part of every canvas is padding
    ids = torch.randint(1, NUM_PUZZLES, (size,), generator=generator, dtype=torch.int32)
    return {"inputs": inputs.to(device), "labels": labels.to(device),
            "puzzle_identifiers": ids.to(device)}


def training_step(arch: ArchConfig, batch: dict, device: torch.device, compile_model: bool = False):
    """The benchmarked step for ``arch`` on a fixed batch: returns (step(carry) -> carry, the
    initial carry, the model). Weights from seed 0."""
    torch.manual_seed(0)
    model = HRM(arch, VOCAB, SEQ_LEN, NUM_PUZZLES, verbose=False).to(device)
    head = ACTLossHead(model).train()
    dense = AdamATan2(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    # puzzle_emb_ndim 0 has no puzzle table, so no sparse optimizer (as in the trainer)
    table = getattr(model, "puzzle_embedding", None)
    sparse = PuzzleSignSGD(table, lr=1e-2, weight_decay=0.1) if table is not None else None
    forward = compile_fixed_shapes(head) if compile_model else head   # as the trainer compiles it
    batch_size = batch["inputs"].shape[0]

    def step(carry):
        if table is not None:
            table.prepare_lookup(batch_size)  # as the trainer does: one graph when compiled
        result = forward(carry, batch)
        (result.loss / batch_size).backward()
        dense.step()
        dense.zero_grad(set_to_none=True)
        if sparse is not None:  # the table's rows: a gradient leaf apart from the dense parameters
            sparse.step()
            sparse.zero_grad()
        return result.carry
    return step, head.initial_carry(batch), model


def bench(arch: ArchConfig, batch_size: int, device: torch.device, steps: int, warmup: int,
          compile_model: bool, peak_tflops: float = H200_BF16_DENSE_TFLOPS) -> dict:
    batch = make_batch(batch_size, device, torch.Generator().manual_seed(0))
    train_step, carry, model = training_step(arch, batch, device, compile_model)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        carry = train_step(carry)
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)   # the timed steps' peak, not the warm-up's
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        carry = train_step(carry)
        sync()
        times.append(time.perf_counter() - start)
    step_time = sum(times) / len(times)
    tokens = batch_size * SEQ_LEN
    tokens_per_s = tokens / step_time
    fpt = flops_per_token(arch, SEQ_LEN, VOCAB)
    result = dict(
        config=arch.name, device=str(device), dtype=str(model.compute_dtype(device)).replace("torch.", ""),
        threads=torch.get_num_threads(), batch=batch_size, seq_len=SEQ_LEN, steps=steps,
        compiled=compile_model, params=sum(p.numel() for p in model.parameters()),
        step_time_s=round(step_time, 4), median_step_time_s=round(statistics.median(times), 4),
        best_step_time_s=round(min(times), 4),
        tokens_per_s=round(tokens_per_s, 1), median_tokens_per_s=round(tokens / statistics.median(times), 1),
        best_tokens_per_s=round(tokens / min(times), 1),
        flops_per_token=round(fpt), achieved_flops_per_s=round(fpt * tokens_per_s),
        # Other processes share the CPU: the 1-minute load average puts the numbers in context.
        load_average=round(os.getloadavg()[0], 2),
    )
    if device.type == "cuda":   # as bench_train.py reports them
        result.update(cuda_figures(fpt, tokens_per_s, peak_tflops))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="all", choices=["all", "cpu-bench", "hrm_v1"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=None, help="override the batch size")
    parser.add_argument("--compile", action="store_true", help="torch.compile the loss head")
    parser.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS,
                        help="for MFU on CUDA (default: H200 bf16 dense)")
    args = parser.parse_args()
    # no timed step is no figure (a ZeroDivisionError after the warm-up, before)
    if args.steps < 1 or args.warmup < 0:
        parser.error(f"--steps must be at least 1 and --warmup at least 0, got {args.steps} and {args.warmup}")
    if args.batch is not None and args.batch < 1:
        parser.error(f"--batch must be at least 1, got {args.batch}")
    if not args.peak_tflops > 0:
        parser.error(f"--peak-tflops must be > 0, got {args.peak_tflops}")

    if args.config in ("all", "cpu-bench"):
        torch.set_num_threads(1)
        result = bench(ArchConfig(**CPU_BENCH), args.batch or 8, torch.device("cpu"), args.steps,
                       args.warmup, args.compile)
        result["original_tokens_per_s"] = ORIGINAL_CPU_TOKENS_PER_S
        result["target_tokens_per_s"] = round(1.2 * ORIGINAL_CPU_TOKENS_PER_S)
        result["meets_target"] = result["tokens_per_s"] >= result["target_tokens_per_s"]
        print(json.dumps(result), flush=True)
    if args.config in ("all", "hrm_v1"):
        if not torch.cuda.is_available():
            print(json.dumps({"config": "hrm_v1", "skipped": "no CUDA device"}), flush=True)
        else:
            torch.set_num_threads(os.cpu_count() or 1)
            arch = ArchConfig(name="hrm_v1")  # the defaults are the published architecture
            print(json.dumps(bench(arch, args.batch or 96, torch.device("cuda"), args.steps,
                                   args.warmup, args.compile, args.peak_tflops)), flush=True)


if __name__ == "__main__":
    main()
