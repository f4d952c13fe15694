"""Vote over predictions and report pass@K (DESIGN.md, Voting).

    python evaluate/vote.py [--predictions PATH] [--data DIR] [--K 1 2 10 100 1000]
                            [--json FILE] [--submission FILE] [--top N] [--checkpoints DIR]

Without --predictions: the newest checkpoints/<project>/<run>/predictions/step_*/ (by the mtime of
its info.json); without --data: the build recorded in that info.json. --json and --submission are
checked before the vote (not a directory; their folder exists or can be created) and each is
written whole or not at all. Exit status: 0, 2 for inputs that cannot be voted on or an output that
cannot be written, 141 when the reader of stdout stops early (`| head`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    # run as a script: make the repository importable, and stop evaluate/ itself from shadowing
    # top-level module names (the script's folder is put first on sys.path)
    _repo = str(Path(__file__).resolve().parents[1])
    sys.path[:] = [_repo] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import json  # noqa: E402

from evaluate.build_reader import load_test_split  # noqa: E402
from evaluate.errors import EvaluationInputError, recorded_build_missing  # noqa: E402
from evaluate.outputs import check_output_file, quiet_on_broken_pipe, write_atomic  # noqa: E402
from evaluate.predictions import resolve_predictions  # noqa: E402
from evaluate.report import build_report, format_table  # noqa: E402
from evaluate.scoring import DEFAULT_K, pair_stats, pass_at_k  # noqa: E402
from evaluate.submission import build_submission  # noqa: E402
from evaluate.voting import vote  # noqa: E402


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or str(value) != text.strip().lstrip("+"):
        raise argparse.ArgumentTypeError(f"K must be a positive whole number, got {text!r}")
    return value


def count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def nonempty(kind):
    """An argparse type for a path option that refuses "": `--data "$BUILD"` with BUILD unset would
    otherwise silently mean the default (--data: the build info.json records, which may not be the
    one meant), or the current folder (--predictions, --checkpoints, render.py's --out)."""
    def convert(text: str):
        if not text:
            raise argparse.ArgumentTypeError("empty (an unset shell variable?): name a path, or leave the option out")
        return kind(text)
    return convert


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--predictions", type=nonempty(str),
                    help="a .npz file, a folder of rank files with their info.json, or a glob "
                         "(default: the newest predictions under --checkpoints)")
    ap.add_argument("--data", type=nonempty(str),
                    help="the build directory (default: data_path in the predictions' info.json)")
    ap.add_argument("--K", nargs="+", type=positive_int, default=list(DEFAULT_K), metavar="K",
                    help="pass@K values (default: 1 2 10 100 1000)")
    ap.add_argument("--json", type=nonempty(Path), help="write the full results (pass@K, per task and test input)")
    ap.add_argument("--submission", type=nonempty(Path), help="write the two best answers in the ARC Prize format")
    ap.add_argument("--top", type=count, default=10, help="answers listed per test input in --json (default 10)")
    ap.add_argument("--checkpoints", type=nonempty(Path), default=Path("checkpoints"),
                    help="where to look for predictions when --predictions is not given")
    return ap.parse_args(argv)


def check_outputs(args: argparse.Namespace) -> None:
    """Before the vote, so that a bad output path costs no work and leaves no file half-written."""
    outputs = [(option, path) for option, path in (("--json", args.json), ("--submission", args.submission)) if path]
    for option, path in outputs:
        check_output_file(path, option)
    if len(outputs) == 2 and args.json.resolve() == args.submission.resolve():
        raise EvaluationInputError(f"--json {args.json} and --submission {args.submission} are the same file")


def check_outputs_spare_inputs(args: argparse.Namespace, files: list[Path]) -> None:
    """An output that is one of the vote's own inputs (a rank file, or the info.json beside them:
    `--json step_N/info.json`) would overwrite the predictions it was computed from."""
    inputs = {Path(f).resolve() for f in files} | {Path(f).parent.resolve() / "info.json" for f in files}
    for option, path in (("--json", args.json), ("--submission", args.submission)):
        if path and path.resolve() in inputs:
            raise EvaluationInputError(f"{option} {path} is one of the predictions' own files; "
                                       f"give another file name")


def check_outputs_spare_build(args: argparse.Namespace, data: Path) -> None:
    """An output onto one of the build's files (`--json data/arc-aug-1000/identifiers.json`) would
    be written after the vote, over the build every later vote and training reads."""
    data = Path(data)
    files = [data / "identifiers.json", data / "manifest.json"] + \
        [f for split in ("train", "test") if (data / split).is_dir() for f in (data / split).iterdir()]
    built = {f.resolve() for f in files if f.is_file()}
    for option, path in (("--json", args.json), ("--submission", args.submission)):
        if path and path.resolve() in built:
            raise EvaluationInputError(f"{option} {path} is one of the files of the build {data}; give another "
                                       f"file name")


def load_recorded_build(data: Path, recorded_in: Path | None):
    """The build's test split. One taken from the predictions' info.json (`recorded_in`) that is not
    there (moved since, or a relative path of another machine) is named as that record, with
    --data as the way out."""
    if recorded_in is None or data.is_dir():
        return load_test_split(data)
    raise recorded_build_missing(data, f"data_path recorded in {recorded_in}")


def main(argv=None) -> int:
    args = parse_args(argv)
    ks = sorted(set(args.K))
    data = None      # named by an OSError without a file name, if one comes after it is known
    try:
        check_outputs(args)
        predictions = resolve_predictions(args.predictions, args.checkpoints)
        check_outputs_spare_inputs(args, predictions.files)
        data = args.data or (predictions.info or {}).get("data_path")
        folders = sorted({str(Path(f).parent) for f in predictions.files})
        if not data and len(folders) > 1:
            raise EvaluationInputError(f"--predictions {predictions.source} matches files in {len(folders)} folders "
                                       f"({', '.join(folders)}): pass --data for the build they all predict")
        if not data:
            raise EvaluationInputError(f"no --data given and no info.json with data_path beside "
                                       f"{predictions.source}")
        if len(folders) > 1:   # an ensemble of several evaluations (steps, runs), or a glob too wide
            print(f"note: voting the predictions of {len(folders)} folders together: {', '.join(folders)}",
                  file=sys.stderr)
        # info.json (the only other source of the build) lies beside the files it describes
        recorded_in = None if args.data else Path(predictions.files[0]).parent / "info.json"
        split = load_recorded_build(Path(data), recorded_in)
        check_outputs_spare_build(args, Path(data))
        votes = vote(predictions.files, split)
    except EvaluationInputError as e:
        print(f"vote.py: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:     # a build or predictions file this user may not read (permissions, NFS)
        what = e.filename or data or args.predictions or args.checkpoints
        print(f"vote.py: error: cannot read {what}: {e.strerror or e}", file=sys.stderr)
        return 2
    stats = pair_stats(votes)
    meta = {"predictions": [str(f) for f in predictions.files], "source": predictions.source,
            # absolute, as info.json records it: render.py --votes reads it from any folder
            "data": os.path.abspath(data), "step": (predictions.info or {}).get("step")}
    report = build_report(votes, stats, pass_at_k(stats, split.task_pair_start, ks), args.top, meta)
    written = []   # the files first: a reader of stdout that goes away (`| head`) must not cost them
    try:
        if args.json:
            written.append(f"results: {write_atomic(args.json, json.dumps(report))}")
        if args.submission:
            written.append(f"submission: {write_atomic(args.submission, json.dumps(build_submission(votes)))}")
    except EvaluationInputError as e:     # checked above, so only what the disk can still do: full, gone
        print(f"vote.py: error: {e}", file=sys.stderr)
        return 2
    print(format_table(report))
    for line in written:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_broken_pipe(main))
