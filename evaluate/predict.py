"""Run a checkpoint over a build's test split and write the predictions files for vote.py.

    python evaluate/predict.py checkpoint=PATH [data_path=DIR] [output_dir=DIR] [batch_size=N]
                               [device=auto|cpu|cuda] [compile=auto|true|false]
    torchrun --nproc-per-node 8 evaluate/predict.py checkpoint=PATH

PATH is one of ours (a `step_<N>/` folder or its `model.pt`) or one written by the original HRM
code (a raw state-dict file such as `step_414456`, with `all_config.yaml` beside it). Every row is
reset once and runs exactly halt_max_steps segments; the last segment's argmax tokens and q_halt
logits are written, one `rank_<r>.npz` per rank plus `info.json` (DESIGN.md, "Predictions").
Default output: `<run>/predictions/<step>/` beside the checkpoint. `compile` (auto: on CUDA)
runs the segment under torch.compile, as training's evaluation does.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    # run as a script: make the repository importable, not evaluate/ itself
    _repo = str(Path(__file__).resolve().parents[1])
    sys.path[:] = [_repo] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402
import yaml  # noqa: E402

from arc_data.dataset import EvalBatches, load_split  # noqa: E402
from hrm.checkpoint import is_our_format, load_model, load_original_checkpoint  # noqa: E402
from hrm.distributed import check_device, init_distributed, shutdown, switch_on, uses_cuda  # noqa: E402
from hrm.evaluation import compiled_segment, evaluate, write_predictions  # noqa: E402
from hrm.loss import ACTLossHead  # noqa: E402

KEYS = {"checkpoint", "data_path", "output_dir", "batch_size", "device", "compile"}
SWITCH = {"auto": "auto", "true": True, "false": False}
EXPECTED = ("an hrm-deeploop step_<N>/ folder or its model.pt, or an original HRM checkpoint "
            "(a raw state dict with all_config.yaml beside it)")


class PredictError(ValueError):
    """Bad arguments or a checkpoint that cannot be evaluated; printed without a traceback."""


def parse_args(argv: list[str]) -> dict:
    args = {"device": "auto", "compile": "auto"}
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep or key not in KEYS:
            raise PredictError(f"expected key=value with key in {sorted(KEYS)}, got {item!r}")
        args[key] = value
    if "checkpoint" not in args:
        raise PredictError("checkpoint=PATH is required")
    if "batch_size" in args:
        if not args["batch_size"].isdigit() or int(args["batch_size"]) < 1:
            raise PredictError(f"batch_size must be a positive whole number, got {args['batch_size']!r}")
        args["batch_size"] = int(args["batch_size"])
    if str(args["compile"]).lower() not in SWITCH:
        raise PredictError(f"compile must be auto, true or false, got {args['compile']!r}")
    args["compile"] = SWITCH[str(args["compile"]).lower()]
    # checked here, not left to init_distributed and after: those run after the checkpoint (GBs) is read
    try:
        check_device(args["device"])
    except (ValueError, RuntimeError) as e:
        raise PredictError(str(e)) from None
    args.setdefault("batch_size", 768 if uses_cuda(args["device"]) else 32)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if args["batch_size"] % world_size:
        raise PredictError(f"batch_size={args['batch_size']} is not divisible by the world size {world_size}")
    return args


def read_torch_file(path: Path):
    """torch.load(weights_only=True), with any file torch cannot decode refused by name."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except OSError as e:   # unreadable (permissions, a disk error), whatever it holds
        raise PredictError(f"{path}: cannot read it ({e.strerror or e})") from None
    except MemoryError:    # a real checkpoint too large for this machine: not a format problem
        raise
    except Exception as e:
        # torch has no one error for foreign bytes: text gives KeyError, IndexError or
        # UnpicklingError, an empty file EOFError, a truncated one RuntimeError. Its messages run
        # to many lines: keep the first sentence, so the error stays one line
        reason = str(e).strip().splitlines()[0].split(". ")[0] if str(e).strip() else "no details"
        raise PredictError(f"{path} is not a checkpoint: torch cannot read it ({type(e).__name__}: {reason}); "
                           f"expected {EXPECTED}") from None


def load_checkpoint_for_eval(checkpoint: str, data_path: str | None):
    """-> (model, data_path, step, default output folder). Our format or the original HRM code's."""
    path = Path(checkpoint)
    if path.is_dir():
        path = path / "model.pt"
    if not path.is_file():
        raise PredictError(f"checkpoint {checkpoint}: no such file (expected {EXPECTED})")
    payload = read_torch_file(path)  # read once: the puzzle table can be GBs
    if not isinstance(payload, dict):   # e.g. a lone tensor: neither format is anything but a dict
        raise PredictError(f"{path} is not a checkpoint: it holds a {type(payload).__name__}, not a dict; "
                           f"expected {EXPECTED}")
    if is_our_format(payload):
        model, extra = load_model(str(path), payload=payload)
        step = extra.get("step")
        trainer_file = path.parent / "trainer.pt"
        if data_path is None and trainer_file.is_file():
            trainer = read_torch_file(trainer_file)
            config = trainer.get("config") if isinstance(trainer, dict) else None
            data_path = config.get("data_path") if isinstance(config, dict) else None   # else: asked for below
            # as typed for training, relative to where it ran: from elsewhere, its absolute form
            resolved = trainer.get("data_path_resolved") if isinstance(trainer, dict) else None
            if data_path and not Path(data_path).is_dir() and resolved and Path(resolved).is_dir():
                data_path = resolved
        out = path.parent.parent / "predictions" / path.parent.name
    else:  # the original code: a raw state dict, its config beside it
        config_file = path.parent / "all_config.yaml"
        if not config_file.is_file():
            raise PredictError(f"{path}: not one of our checkpoints, and no all_config.yaml beside it for an "
                               f"original HRM checkpoint")
        try:    # read here even with data_path given: load_original_checkpoint would fail on it unnamed
            config = yaml.safe_load(config_file.read_text())
        except yaml.YAMLError as e:
            raise PredictError(f"{config_file}: not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(config, dict):
            raise PredictError(f"{config_file}: not an HRM training config (expected a YAML mapping)")
        if data_path is None:
            data_path = config.get("data_path")
        seq_len = load_split(data_path, "test").metadata.seq_len if data_path else None
        model = load_original_checkpoint(str(path), str(config_file), seq_len=seq_len, raw=payload)
        step = int(path.name.split("_")[-1]) if path.name.split("_")[-1].isdigit() else None
        out = path.parent / "predictions" / path.name
    if data_path is None:
        raise PredictError(f"{checkpoint}: no data_path recorded with it; pass data_path=DIR")
    return model, data_path, step, out


def main(argv=None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        model, data_path, step, out = load_checkpoint_for_eval(args["checkpoint"], args.get("data_path"))
        test = load_split(data_path, "test")
    except (PredictError, ValueError, FileNotFoundError) as e:
        print(f"predict.py: error: {e}", file=sys.stderr)
        return 2
    if test.metadata.num_puzzle_identifiers != model.num_puzzle_identifiers:
        print(f"predict.py: error: the checkpoint's puzzle-embedding table has {model.num_puzzle_identifiers:,} "
              f"rows but the build {data_path} has {test.metadata.num_puzzle_identifiers:,} puzzle identifiers: "
              f"they do not belong together (for the released ARC-AGI-2 checkpoint, build with --listing-order "
              f"reverse)", file=sys.stderr)
        return 2
    if test.metadata.seq_len != model.seq_len or test.metadata.vocab_size != model.vocab_size:
        print(f"predict.py: error: the build {data_path} has seq_len {test.metadata.seq_len}, "
              f"vocab {test.metadata.vocab_size}; the checkpoint expects {model.seq_len}, {model.vocab_size}",
              file=sys.stderr)
        return 2

    try:
        info = init_distributed(args["device"])
    except RuntimeError as e:   # LOCAL_RANK beyond the visible GPUs
        print(f"predict.py: error: {e}", file=sys.stderr)
        return 2
    try:
        model.to(info.device)
        batches = EvalBatches(test, global_batch_size=args["batch_size"], rank=info.rank, world_size=info.world_size)
        compile_segment = switch_on(args["compile"], auto=info.device.type == "cuda")
        metrics, arrays = evaluate(ACTLossHead(model), batches, info, progress=True,
                                   segment=compiled_segment(model) if compile_segment else None)
        out_dir = Path(args.get("output_dir") or out)
        write_predictions(out_dir, arrays, info, data_path=data_path, step=step, checkpoint=str(args["checkpoint"]))
        if info.is_main:
            shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k != "count")
            print(f"{int(metrics.get('count', 0))} test rows: {shown}")
            print(f"predictions: {out_dir}  (next: python evaluate/vote.py --predictions {out_dir})")
    finally:
        shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
