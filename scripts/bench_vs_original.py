"""cpu-bench against the original HRM code, interleaved in one process; prints one JSON line.

The cpu-bench target (issue 3, item 13) is stated against the original code's speed measured once
on some 2-core machine (2,324 tokens/s). A shared VM's speed drifts by tens of percent over
minutes, so an absolute figure alone cannot tell a faster model from a quieter machine. This
script times our training step and the original one alternately, step by step, on the same batch,
so both see the same machine, and reports the ratio of their median step times.

The original code is imported from a checkout of https://github.com/sapientinc/HRM that you
provide (nothing of it is copied here). It imports FlashAttention at module level and has no CPU
path, so a stand-in ``flash_attn`` module that calls PyTorch's scaled_dot_product_attention is
installed first (the same kernel our model uses on CPU). Both sides use the same step: ACT forward
in training mode, loss / batch, backward, the pure-PyTorch AdamATan2 on dense weights (the fused
package is CUDA-only), each side's own sign-SGD for the puzzle rows, zero_grad.

Usage: python scripts/bench_vs_original.py --original PATH [--steps 10] [--warmup 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scripts.bench_model import (CPU_BENCH, NUM_PUZZLES, ORIGINAL_CPU_TOKENS_PER_S, SEQ_LEN,  # noqa: E402
                                 VOCAB, make_batch, training_step)
from hrm.config import ArchConfig  # noqa: E402
from hrm.optim import AdamATan2  # noqa: E402

BATCH = 8


def install_flash_attn_stand_in():
    """A ``flash_attn`` module whose flash_attn_func runs SDPA ([batch, seq, heads, dim] layout)."""
    def flash_attn_func(q, k, v, causal=False):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=causal)
        return out.transpose(1, 2)
    module = types.ModuleType("flash_attn")
    module.flash_attn_func = flash_attn_func
    sys.modules["flash_attn"] = module


def original_step(checkout: str, batch: dict):
    """The original model, loss head and optimizers for cpu-bench; returns step(carry) -> carry."""
    install_flash_attn_stand_in()
    sys.path.insert(0, checkout)
    try:
        from models.hrm.hrm_act_v1 import HierarchicalReasoningModel_ACTV1
        from models.losses import ACTLossHead as OriginalLossHead
        from models.sparse_embedding import CastedSparseEmbeddingSignSGD_Distributed
    except ImportError as error:
        raise SystemExit(f"--original {checkout}: cannot import the original HRM model code "
                         f"(models/hrm/hrm_act_v1.py): {error}")
    cfg = dict(batch_size=BATCH, seq_len=SEQ_LEN, puzzle_emb_ndim=CPU_BENCH["puzzle_emb_ndim"],
               num_puzzle_identifiers=NUM_PUZZLES, vocab_size=VOCAB, H_cycles=CPU_BENCH["H_cycles"],
               L_cycles=CPU_BENCH["L_cycles"], H_layers=CPU_BENCH["H_layers"],
               L_layers=CPU_BENCH["L_layers"], hidden_size=CPU_BENCH["hidden_size"],
               expansion=CPU_BENCH["expansion"], num_heads=CPU_BENCH["num_heads"],
               pos_encodings="rope", halt_max_steps=CPU_BENCH["halt_max_steps"],
               halt_exploration_prob=CPU_BENCH["halt_exploration_prob"], forward_dtype="float32",
               causal=False)
    torch.manual_seed(0)
    head = OriginalLossHead(HierarchicalReasoningModel_ACTV1(cfg), loss_type="stablemax_cross_entropy")
    head.train()
    sparse = CastedSparseEmbeddingSignSGD_Distributed(head.model.puzzle_emb.buffers(), lr=1e-2,
                                                      weight_decay=0.1, world_size=1)
    dense = AdamATan2(head.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)

    def step(carry):
        carry, loss, _, _, _ = head(carry=carry, batch=batch, return_keys=[])
        ((1 / BATCH) * loss).backward()
        for optimizer in (sparse, dense):
            optimizer.step()
            optimizer.zero_grad()
        return carry
    return step, head.initial_carry(batch)


def our_step(batch: dict):
    step, carry, _ = training_step(ArchConfig(**CPU_BENCH), batch, torch.device("cpu"))
    return step, carry


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--original", required=True, help="checkout of github.com/sapientinc/HRM")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0:   # no timed step has no median (a StatisticsError at the end, before)
        parser.error(f"--steps must be at least 1 and --warmup at least 0, got {args.steps} and {args.warmup}")
    if not os.path.isfile(os.path.join(args.original, "models", "hrm", "hrm_act_v1.py")):
        raise SystemExit(f"--original {args.original}: no models/hrm/hrm_act_v1.py there "
                         "(expected a checkout of github.com/sapientinc/HRM)")
    torch.set_num_threads(1)
    batch = make_batch(BATCH, torch.device("cpu"), torch.Generator().manual_seed(0))
    sides = {"ours": our_step(batch), "original": original_step(args.original, batch)}
    steps = {name: fn for name, (fn, _) in sides.items()}
    carries = {name: carry for name, (_, carry) in sides.items()}
    times = {name: [] for name in sides}
    for i in range(args.warmup + args.steps):
        for name, fn in steps.items():   # alternate, so both sides see the same machine
            start = time.perf_counter()
            carries[name] = fn(carries[name])
            if i >= args.warmup:
                times[name].append(time.perf_counter() - start)
    tokens = BATCH * SEQ_LEN
    median = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "config": "cpu-bench", "threads": torch.get_num_threads(), "steps": args.steps,
        "ours_tokens_per_s": round(tokens / median["ours"], 1),
        "original_tokens_per_s": round(tokens / median["original"], 1),
        "speedup": round(median["original"] / median["ours"], 3),
        # Per-step paired ratios: robust to drift between (not within) consecutive steps.
        "speedup_paired_median": round(statistics.median(
            o / u for o, u in zip(times["original"], times["ours"])), 3),
        "target_speedup": 1.2,
        "original_reference_tokens_per_s": ORIGINAL_CPU_TOKENS_PER_S,
        "load_average": round(os.getloadavg()[0], 2),
    }
    result["meets_target"] = result["speedup"] >= result["target_speedup"]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
