"""One arm of the baseline-vs-DeepLoop comparison (scripts/compare.py): training, predicting and
voting it (reusing the predictions training wrote when predict.py would write the same), and its
row of the table read back from its run folder: losses, pass@K, the command that trained it, and
its outcome (trained / stuck / diverged)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from scripts.compare_recipes import COMMAND_RECORD, Arm, Recipe
from scripts.experiment_tools import (ExperimentError, check_build, divergence_step, gpu_env, last_eval,
                                      latest_checkpoint, read_run_log, remove_unless_training, run_logged,
                                      seed_of, shell_line, step_failed, tail_mean, train_curve)
# the "final" training losses average the steps run_status.py averages to classify a run: single
# batches differ a lot (8 rows from ~2 puzzles), so a short window says more about them than the model
from scripts.run_status import DEFAULT_WINDOW as FINAL_WINDOW, EXIT_DIVERGED, classify_run, logged_steps


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


def logged_command(log: Path) -> str | None:
    """The command a run was started with: the first line of its log, as run_logged writes it."""
    if not log.is_file():
        return None
    with open(log) as f:
        first = f.readline().rstrip("\n")
    return first[2:] if first.startswith("$ ") else None


def training_command(recipe: Recipe, arm: Arm) -> tuple[str, bool]:
    """(the command that trained the arm, whether the run folder recorded it): the first line of its
    train.log (compare.py's runs), else its command.txt (the printed recipe's), else the command
    this invocation's flags give, which --report on runs of a recipe printed with --steps, --lr,
    --set or --nproc would show without them: the table said so for its settings."""
    run_dir = recipe.run_dir(arm)
    logged = logged_command(run_dir / "train.log")
    if logged is None and (run_dir / COMMAND_RECORD).is_file():
        logged = (run_dir / COMMAND_RECORD).read_text().strip() or None
    return (logged, True) if logged else (shell_line(recipe.train_cmd(arm)), False)


class WrongSeedForReport(ExperimentError):
    """--report given another --seed than its runs trained with: a refused option (exit 2), not a
    failed arm (exit 1)."""


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


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
