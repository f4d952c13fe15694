"""Run a checkpoint over a build's test split and write the predictions files for vote.py.

    python evaluate/predict.py checkpoint=PATH [data_path=DIR] [output_dir=DIR] [batch_size=N]
                               [device=auto|cpu|cuda] [compile=auto|true|false]
    torchrun --nproc-per-node 8 evaluate/predict.py checkpoint=PATH

PATH is one of ours (a `step_<N>/` folder or its `model.pt`; a run folder, `checkpoints/<project>/<run>`,
stands for its latest checkpoint, chosen as `pretrain.py resume=latest` chooses it and printed) or
one written by the original HRM code (a raw state-dict file such as `step_414456`, with
`all_config.yaml` beside it). Every row is
reset once and runs exactly halt_max_steps segments; the last segment's argmax tokens and q_halt
logits are written, one `rank_<r>.npz` per rank plus `info.json` (DESIGN.md, "Predictions").
Default output: `<run>/predictions/<step>/` beside the checkpoint; either output folder is checked
before the evaluation (an existing file there, or in its path, is refused; predictions already
there are replaced, with a note). `compile` (auto: on
CUDA) runs the segment under torch.compile, as training's evaluation does.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

if __package__ in (None, ""):
    # run as a script: make the repository importable, not evaluate/ itself
    _repo = str(Path(__file__).resolve().parents[1])
    sys.path[:] = [_repo] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import yaml  # noqa: E402

from arc_data.dataset import EvalBatches, NotABuild, load_split  # noqa: E402
from arc_data.manifest import build_identity  # noqa: E402
from evaluate.errors import EvaluationInputError  # noqa: E402
from evaluate.outputs import check_output_dir  # noqa: E402
from hrm.checkpoint import (CheckpointError, is_our_format, load_model, load_original_checkpoint,  # noqa: E402
                            recorded_build)
from hrm.checkpoint import read_torch_file as read_checkpoint_file  # noqa: E402
from hrm.distributed import check_device, init_distributed, shutdown, switch_on, uses_cuda  # noqa: E402
from hrm.evaluation import PredictionsNotWritten, compiled_segment, evaluate, write_predictions  # noqa: E402
from hrm.loss import ACTLossHead  # noqa: E402
from hrm.pretrain_config import command_line_arg, let_the_speaker_finish, say_once_per_node  # noqa: E402
from hrm.step_names import checkpoint_step, step_number, unrenamed_saves  # noqa: E402
from hrm.run_folders import (list_checkpoints, missing_step_hint, previous_checkpoint_hint,  # noqa: E402
                             resolve_resume, runs_inside_hint)
from hrm.train_checkpoint import trained_data_path  # noqa: E402

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
        if not value:
            # `output_dir=$OUT` with OUT unset: the default folder (training's predictions) would be
            # written over, `data_path=` would read ./test, `checkpoint=` the current folder
            raise PredictError(f"{key}= has no value (an unset shell variable?); give {key}=... or leave it out")
        args[key] = value
    if "checkpoint" not in args:
        raise PredictError("checkpoint=PATH is required")
    if "batch_size" in args:
        size = args["batch_size"]
        if not (size.isascii() and size.isdigit()) or int(size) < 1:     # isdigit() takes `²` too
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
    given = "batch_size" in args
    args.setdefault("batch_size", default_batch_size(args["device"]))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if args["batch_size"] % world_size:
        raise PredictError(f"{'' if given else 'the default '}batch_size={args['batch_size']} is not divisible by "
                           f"the world size {world_size}" + ("" if given else "; pass batch_size=N, a multiple of it"))
    if "output_dir" in args:   # here, not when the predictions are written: that is after every batch
        check_output_folder(Path(args["output_dir"]), "output_dir")
    return args


def default_batch_size(device: str) -> int:
    """batch_size when none is given: the published evaluation batch on CUDA, a small one on CPU.
    (scripts/compare_arms.py asks it too, to tell whether training evaluated as this script would.)"""
    return 768 if uses_cuda(device) else 32


def check_output_folder(folder: Path, what: str, hint: str = "") -> None:
    try:
        check_output_dir(folder, what)
    except EvaluationInputError as e:
        raise PredictError(f"{e}{hint}") from None


def earlier_predictions(folder: Path) -> str | None:
    """What an earlier evaluation left in ``folder`` (write_predictions replaces its info.json and
    rank files), in words for the note, or None when there is nothing."""
    info_file = folder / "info.json"
    if not info_file.is_file():
        return "the rank files of an evaluation that did not finish" if any(folder.glob("rank_*.npz")) else None
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):     # unreadable, or not JSON: replaced all the same
        info = None
    if not isinstance(info, dict):
        return "the predictions of an earlier evaluation"
    step = info.get("step")
    if not info.get("checkpoint"):    # training writes none: its own evaluation of the step
        return "the predictions of training's evaluation" + (f" of step {step}" if step is not None else "")
    return f"the predictions of checkpoint {info['checkpoint']}" + (f" (step {step})" if step is not None else "")


def note_replaced(out_dir: Path, default: bool) -> None:
    """Say, before the evaluation, that predictions already in the output folder are replaced, and
    whose they are: in the default folder, training's evaluation of the step as a rule (equal on the
    same device and settings, not with another batch size or compile: rounding); in output_dir=,
    whatever was written there last, e.g. another checkpoint's when one folder serves several.
    Said, not refused, alike for both."""
    held = earlier_predictions(out_dir)
    if held is not None:
        keep = "output_dir=DIR keeps them" if default else "give another output_dir to keep them"
        print(f"note: {out_dir} holds {held}: they are replaced; {keep}", flush=True)


def resolve_checkpoint(checkpoint: str) -> str:
    """A run folder (training's step_<N>/ folders and `latest`) stands for its latest checkpoint,
    chosen as `pretrain.py resume=latest` chooses it (the step `latest` names, else the newest
    complete one); any other path is returned as given. A folder holding no checkpoint, and a
    missing step of a run folder (removed by keep_checkpoints), are explained here, where the
    generic 'no model.pt' would not say what to pass instead."""
    path = Path(checkpoint)
    hint = "" if path.exists() else missing_step_hint(path, "checkpoint", "evaluates")
    if hint:
        raise PredictError(f"checkpoint {checkpoint}: no such file or folder{hint}")
    misplaced = not_a_checkpoint(path)
    if misplaced:
        raise PredictError(f"checkpoint {checkpoint} {misplaced}")
    if not path.is_dir() or (path / "model.pt").exists():
        return checkpoint
    if list_checkpoints(path):
        chosen = resolve_resume("latest", path)
        if int(os.environ.get("RANK", "0")) == 0:   # under torchrun, said once
            print(f"checkpoint: {chosen} (the latest of the run folder {path})")
        return str(chosen)
    originals = sorted((p for p in path.glob("step_*") if p.is_file() and step_number(p) is not None),
                       key=step_number)
    if originals and (path / "all_config.yaml").is_file():
        raise PredictError(f"checkpoint {checkpoint} is a run folder of the original HRM code: pass one of its "
                           f"checkpoint files, e.g. checkpoint={originals[-1]} (the newest of {len(originals)})")
    if (path / "latest").exists() or any(p.is_dir() for p in path.glob("step_*")):
        raise PredictError(f"checkpoint {checkpoint} is a run folder without a complete checkpoint (a step_<N>/ "
                           f"folder with model.pt and trainer.pt)")
    raise PredictError(f"checkpoint {checkpoint}: a folder without model.pt (expected {EXPECTED}, or a run "
                       f"folder of step_<N>/ checkpoints){runs_inside_hint(path, 'checkpoint', 'evaluates its latest')}")


def not_a_checkpoint(path: Path) -> str | None:
    """What `path` is, when it is a file or folder of a run that is not a checkpoint (the step's
    training state, predictions): read as one, it was called corrupt ('torch cannot read it') or
    'not one of our checkpoints', or a predictions folder 'a run folder without a checkpoint'."""
    vote = "which vote.py reads: python evaluate/vote.py --predictions"
    if path.is_file() and path.suffix == ".npz":
        return f"is a predictions file, {vote} {shlex.quote(str(path.parent))}"
    if (path.is_file() and (path.name == "trainer.pt" or (path.name.startswith("rank_") and path.suffix == ".pt"))
            and (path.parent / "model.pt").is_file()):
        return (f"is the training state saved beside the step's weights: pass the step folder, "
                f"{command_line_arg('checkpoint', path.parent, hydra=False)} (or its model.pt)")
    steps = sorted((p.parent for p in path.glob("step_*/info.json") if step_number(p.parent) is not None),
                   key=step_number) if path.is_dir() else []
    if path.is_dir() and ((path / "info.json").is_file() or steps):
        return (f"holds predictions, {vote} {shlex.quote(str(steps[-1] if steps else path))}; predict.py takes a "
                f"checkpoint (a run's step_<N>/ folder, or the run folder)")
    return None


def read_torch_file(path: Path):
    """hrm.checkpoint.read_torch_file, its refusal as this script's error. A file of a training
    run's step folder (a copy cut short, a disk filled while saving) points to the run's previous
    checkpoint, as resuming does; any other says what a checkpoint is."""
    hint = previous_checkpoint_hint(path.parent, option="checkpoint", does="evaluates")
    try:
        return read_checkpoint_file(path, hint=hint or f"; expected {EXPECTED}")
    except CheckpointError as e:
        raise PredictError(str(e)) from None


def load_checkpoint_for_eval(checkpoint: str, data_path: str | None):
    """-> (model, data_path, step, default output folder, the identity of the build it was trained
    on or None). Our format or the original HRM code's (which records no build)."""
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
        try:
            trained_on = recorded_build(extra.get("data"), path)   # None before it was recorded
        except CheckpointError as e:
            raise PredictError(str(e)) from None
        trainer_file = path.parent / "trainer.pt"
        if data_path is None and trainer_file.is_file():
            # as resuming takes it (None: asked for below). As typed, it may name another build from
            # here: refused, or for a checkpoint that records no build, a wrong evaluation
            data_path = trained_data_path(read_torch_file(trainer_file))
        folder = path.parent.name
        if path.parent in unrenamed_saves(path.parent.parent):
            # step N's save left unrenamed (a run folder's latest, hrm.step_names): its predictions go
            # where training's of step N go, not into a hidden folder named after the temporary one
            folder = f"step_{checkpoint_step(path.parent)}"
        out = path.parent.parent / "predictions" / folder
    else:  # the original code: a raw state dict, its config beside it
        config_file = path.parent / "all_config.yaml"
        if not config_file.is_file():
            raise PredictError(f"{path}: not one of our checkpoints, and no all_config.yaml beside it for an "
                               f"original HRM checkpoint")
        try:    # read here even with data_path given: load_original_checkpoint would fail on it unnamed
            config = yaml.safe_load(config_file.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as e:   # bytes that are not text: not YAML either
            raise PredictError(f"{config_file}: not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(config, dict):
            raise PredictError(f"{config_file}: not an HRM training config (expected a YAML mapping)")
        if data_path is None:
            data_path = config.get("data_path")
        seq_len = load_split(data_path, "test").metadata.seq_len if data_path else None
        model = load_original_checkpoint(str(path), str(config_file), seq_len=seq_len, raw=payload)
        number = path.name.split("_")[-1]
        step = int(number) if number.isascii() and number.isdigit() else None   # isdigit() takes `²` too
        out = path.parent / "predictions" / path.name
        trained_on = None
    if data_path is None:
        raise PredictError(f"{checkpoint}: no data_path recorded with it; pass data_path=DIR")
    return model, data_path, step, out, trained_on


def check_same_build(trained_on: dict | None, data_path: str, checkpoint: str) -> None:
    """The puzzle-embedding rows belong to the puzzles of the build the model was trained on; a build
    with another --seed or --listing-order has the same size but other puzzle names. Our
    checkpoints record that build (arc_data.manifest.build_identity); refuse another."""
    if trained_on is None:
        return
    here = build_identity(data_path)["identifiers_sha256"]
    if here != trained_on["identifiers_sha256"]:
        raise PredictError(f"data_path={data_path} is not the build {checkpoint} was trained on: its puzzle names "
                           f"differ (identifiers.json sha256 {here[:12]}..., the training build's "
                           f"{trained_on['identifiers_sha256'][:12]}...), so every puzzle-embedding row would "
                           f"belong to another puzzle; pass the training build as data_path")


def recorded_build_hint(args: dict) -> str:
    """Without data_path=, the build is the one the checkpoint records (training's data_path, or the
    original code's all_config.yaml): one that is not there (moved since, or a relative path of
    another machine: the released checkpoints say data/arc-aug-1000) is named as that, with the
    way out."""
    if "data_path" in args:
        return ""
    return (f"; that is the data_path recorded with checkpoint {args['checkpoint']}: pass data_path=DIR "
            f"for the build's place here")


def refuse(message: str) -> int:
    """Exit status 2 for arguments, checkpoint or build that cannot be evaluated, or predictions that
    cannot be written, said once per machine under torchrun: every rank checks the same files before
    the process group exists, and every rank learns of a failed write (write_predictions)."""
    say_once_per_node(f"error: {message}", program="predict.py")
    let_the_speaker_finish()
    return 2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(item in ("-h", "--help") for item in argv):   # as the project's argparse commands answer it
        print(__doc__.strip())
        return 0
    try:
        args = parse_args(argv)
        args["checkpoint"] = resolve_checkpoint(args["checkpoint"])
        model, data_path, step, out, trained_on = load_checkpoint_for_eval(args["checkpoint"], args.get("data_path"))
        out_dir = Path(args.get("output_dir") or out)
        if "output_dir" not in args:   # the default, known only now: still before the evaluation
            check_output_folder(out_dir, "the predictions folder", hint="; pass output_dir=DIR for another")
        test = load_split(data_path, "test")
        # without a puzzle embedding (puzzle_emb_ndim=0) no weight belongs to a puzzle: any build
        # of the same seq_len and vocabulary evaluates (another num_aug, ARC-AGI-2's), as the model
        # never reads the identifiers
        has_table = model.arch.puzzle_emb_ndim > 0
        if has_table:
            check_same_build(trained_on, data_path, args["checkpoint"])
    except NotABuild as e:     # a build that is there but damaged needs no hint
        return refuse(f"{e}{recorded_build_hint(args)}")
    except (PredictError, ValueError, FileNotFoundError) as e:
        return refuse(str(e))
    if has_table and test.metadata.num_puzzle_identifiers != model.num_puzzle_identifiers:
        return refuse(f"the checkpoint's puzzle-embedding table has {model.num_puzzle_identifiers:,} "
                      f"rows but the build {data_path} has {test.metadata.num_puzzle_identifiers:,} puzzle identifiers: "
                      f"they do not belong together (for the released ARC-AGI-2 checkpoint, build with --listing-order "
                      f"reverse)")
    if test.metadata.seq_len != model.seq_len or test.metadata.vocab_size != model.vocab_size:
        return refuse(f"the build {data_path} has seq_len {test.metadata.seq_len}, "
                      f"vocab {test.metadata.vocab_size}; the checkpoint expects {model.seq_len}, {model.vocab_size}")
    # only now, every refusal passed: a note that predictions "are replaced" before a refusal would
    # announce a replacement that never happens
    if int(os.environ.get("RANK", "0")) == 0:
        note_replaced(out_dir, default="output_dir" not in args)

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
        try:
            write_predictions(out_dir, arrays, info, data_path=data_path, step=step,
                              checkpoint=str(args["checkpoint"]))
        except PredictionsNotWritten as e:   # every rank raised it (a full disk): said once, and
            return refuse(str(e))            # exit 2 as vote.py's output that cannot be written
        if info.is_main:
            # q_halt_loss scores the blank rows padding the last batch (as HRM logs it): it moves with
            # batch_size and the number of processes, so it is not shown among what the model did
            shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k not in ("count", "q_halt_loss"))
            print(f"{int(metrics.get('count', 0))} test rows: {shown}")
            print(f"predictions: {out_dir}  (next: python evaluate/vote.py --predictions {out_dir})")
    finally:
        shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
