"""The two recipes of the baseline-vs-DeepLoop comparison (scripts/compare.py): its arms, the cpu
preset's (hrm_tiny with and without the scaling, on a small build) and the paper preset's (hrm_v1
against hrm_deeploop under torchrun), the commands each step runs, and the paper recipe printed as
a bash script. `args` is compare.py's parsed command line (compare.parse_args)."""
from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hrm.pretrain_config import path_override
from scripts.experiment_tools import PYTHON, exact_text, shell_line


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


COMMAND_RECORD = "command.txt"   # the printed recipe's record of an arm's training command (no train.log there)


def recipe_script(recipe: Recipe, out: Path) -> str:
    """The recipe as a bash script: the build's digest is read once and checked (after a full
    re-hash) before each training; a run that diverges (torchrun exits 1, pretrain.py leaves
    diverged.json) is a result, and the script goes on; step folders are read from each run's
    `latest` file, and the predictions training wrote for that step are voted on (predict.py runs
    where there are none); `out`: where its closing --report writes the table (--out), given the
    recipe's own --seed, --nproc, --steps, --lr and --set (recipe.flags). Each arm's training
    command goes to its folder's command.txt, which the table shows (compare_arms.training_command).
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
