"""Did a training run train? The unigram floor of a build and the classification of a loss curve.

Unigram floor. The trainer's LM loss (hrm/loss.py) averages the token cross-entropy over each row's
labelled tokens, then over the rows of the batch. A model that ignores its input and predicts one
fixed distribution q at every position therefore has expected loss CE(m, q), where m is the
*row-weighted* label marginal: the mean over training rows of each row's label frequencies (a row
with 30 labelled cells weighs as much as one with 900). CE(m, q) is smallest at q = m, where it
equals the entropy H(m). That is the floor.

Stablemax or softmax? The floor is the same. Softmax reaches any distribution with positive entries
(logits log m). Stablemax, s(x) = x + 1 for x >= 0 and 1 / (1 - x) below, maps the real line onto
(0, inf), so it reaches them too: choose s_k = m_k / min(m), then x_k = s_k - 1 (>= 0).
`floor_logits` returns such logits and the tests put them through hrm.loss's own functions. What
the loss type changes is how quickly training gets there, not where "predicting the marginal" is.

Rows are weighted as the training reader draws them: every group (a task and its augmentations)
equally often, one of its puzzles at random, all of that puzzle's examples. (How long each row
stays in the ACT carry is ignored: it does not depend on its labels at the start of training.)

Classification of a run, from its exit code and its per-step LM loss (`train/lm_loss`):
  diverged  the trainer stopped with exit code 3 (non-finite loss or gradient), or a logged loss
            is non-finite;
  stuck     the run ends at the floor: the mean of its last `window` losses is not below
            floor * (1 - margin). This covers "never left the floor" and also "dipped below it and
            came back", which has not learned anything that lasts; single steps are noisy (a batch
            with more black cells has a lower loss), hence the window rather than one value;
  trained   the run ends below the floor by more than the margin;
  error     anything else (a crash, or no losses logged): not a result, and rerun on resume.

From the command line, the status of finished runs (folders written by pretrain.py):

    python scripts/run_status.py RUN_DIR... [--data BUILD] [--margin 0.05] [--window 50]

Given several runs, each line ends with the settings (all_config.yaml) not the same in all of them.

A run folder does not record the trainer's exit code: its `diverged.json` stands for exit code 3,
and otherwise the exit is taken as clean, so a run that crashed or is still going is classified by
the losses it has logged so far (a run that a SIGTERM stopped, after pretrain.py saved the step it
stopped at, has its line say so until a resume logs more). There two more labels apply:
  too-short a run that would be stuck but has logged fewer steps than the window: its mean is
            mostly its first steps, which start above the floor in any run, so it says nothing yet.
            (A short run whose mean is already below the floor is trained: the early steps only
            raise that mean.)
  no-steps  a run that has logged no training step: starting (torch.compile can take minutes
            before the first step), or stopped before its first step.
"""
from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

import numpy as np
import yaml

TRAINED, DIVERGED, STUCK, ERROR = "trained", "diverged", "stuck", "error"
TOO_SHORT = "too-short"                  # run_status.py's label for a run read while it may be training
NO_STEPS = "no-steps"                    # ... for one that has logged no training step yet
FINISHED = (TRAINED, DIVERGED, STUCK)    # statuses that are results; "error" is not
EXIT_DIVERGED = 3                        # pretrain.py's exit code for a non-finite loss or gradient
EXIT_STOPPED = 143                       # ... for a stop by SIGTERM, the step it stopped at saved
EXIT_INTERRUPTED = 130                   # ... for Ctrl-C (SIGINT)
DEFAULT_MARGIN = 0.05                    # 5% below the floor counts as having left it
DEFAULT_WINDOW = 50                      # steps averaged for "final loss", here, in p_sweep.py and in
                                         # compare.py's table: on a small build a batch of 8 rows holds
                                         # ~2 puzzles, and 10-step means swing by +-0.4


# --------------------------------------------------------------------------------- the floor
def weighted_label_counts(labels: np.ndarray, row_weights: np.ndarray, vocab_size: int,
                          ignore_label: int | None) -> np.ndarray:
    """Sum over rows of weight * (the row's label frequencies), not normalised.

    labels: [rows, seq] integer tokens; tokens equal to `ignore_label` do not count; a row without
    any labelled token contributes nothing."""
    labels = np.asarray(labels)
    rows = np.repeat(np.arange(labels.shape[0]), labels.shape[1])
    flat = labels.reshape(-1).astype(np.int64)
    keep = flat != ignore_label if ignore_label is not None else slice(None)
    counts = np.bincount(rows[keep] * vocab_size + flat[keep],
                         minlength=labels.shape[0] * vocab_size).reshape(-1, vocab_size).astype(np.float64)
    per_row = counts.sum(1, keepdims=True)
    freqs = np.divide(counts, per_row, out=np.zeros_like(counts), where=per_row > 0)
    return (np.asarray(row_weights, np.float64)[:, None] * freqs).sum(0)


def entropy(distribution: np.ndarray) -> float:
    """Entropy in nats; zero-probability tokens contribute nothing."""
    p = np.asarray(distribution, np.float64)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def reader_row_weights(puzzle_indices: np.ndarray, group_indices: np.ndarray) -> np.ndarray:
    """How often the training reader draws each example row, up to a constant: 1 / (puzzles in its
    group), since a slot picks a group uniformly, then one of its puzzles, then all its rows."""
    examples = int(puzzle_indices[-1])
    weights = np.zeros(examples, np.float64)
    for g in range(len(group_indices) - 1):
        first, last = int(group_indices[g]), int(group_indices[g + 1])
        weights[puzzle_indices[first]:puzzle_indices[last]] = 1.0 / (last - first)
    return weights


def unigram_floor(build_dir: str | Path, chunk_rows: int = 4096) -> tuple[float, np.ndarray]:
    """(floor in nats, row-weighted label marginal) of a build's training split; the same for the
    stablemax and the softmax loss (module docstring). Reads the labels in chunks (memory-mapped)."""
    from arc_data.dataset import load_split
    split = load_split(build_dir, "train")
    meta = split.metadata
    weights = reader_row_weights(split.puzzle_indices, split.group_indices)
    total = np.zeros(meta.vocab_size, np.float64)
    for start in range(0, split.num_examples, chunk_rows):
        total += weighted_label_counts(split.labels[start:start + chunk_rows], weights[start:start + chunk_rows],
                                       meta.vocab_size, meta.ignore_label_id)
    if total.sum() <= 0:
        raise ValueError(f"{build_dir}: no labelled tokens in the training split")
    marginal = total / total.sum()
    return entropy(marginal), marginal


def floor_logits(marginal: np.ndarray, loss_type: str) -> np.ndarray:
    """Logits whose predicted distribution is `marginal` (all entries > 0) under `loss_type`."""
    m = np.asarray(marginal, np.float64)
    if loss_type == "softmax":
        return np.log(m)
    if loss_type == "stablemax":
        return m / m.min() - 1.0          # s(x) = x + 1 >= 1 on this branch, proportional to m
    raise ValueError(f"unknown loss_type {loss_type!r}")


# ---------------------------------------------------------------------------- classification
def classify_run(losses: list[float], floor: float, exit_code: int, margin: float = DEFAULT_MARGIN,
                 window: int = DEFAULT_WINDOW) -> str:
    """trained / diverged / stuck / error, from a run's per-step LM losses (module docstring)."""
    if exit_code == EXIT_DIVERGED or any(not math.isfinite(x) for x in losses):
        return DIVERGED
    if exit_code != 0 or not losses:
        return ERROR
    final = math.fsum(losses[-window:]) / len(losses[-window:])   # fsum: a flat curve averages to itself
    return TRAINED if final < floor * (1 - margin) else STUCK


def classify_logged_run(losses: list[float], floor: float, exit_code: int, margin: float = DEFAULT_MARGIN,
                        window: int = DEFAULT_WINDOW, steps: int | None = None, in_window: int | None = None) -> str:
    """`classify_run` for a run folder that may still be training (the command line): a run that
    would be stuck with fewer steps than the window is TOO_SHORT, and one with no loss logged and no
    failure recorded is NO_STEPS rather than an error. The p-sweep keeps `classify_run`:
    its cells have run every step asked of them, so a short one is the result it asked for.
    A run that logs every log_interval-th step: `steps` is its last logged step and `in_window` how
    many of its losses lie in its last `window` steps (logged_steps); by default one loss a step."""
    status = classify_run(losses, floor, exit_code, margin, window if in_window is None else in_window)
    if status == ERROR and exit_code == 0 and not losses:   # the folder cannot tell a crash from a start
        return NO_STEPS
    return TOO_SHORT if status == STUCK and (len(losses) if steps is None else steps) < window else status


def smoothed_min(losses: list[float], window: int = DEFAULT_WINDOW) -> float:
    """Lowest moving average (over `window` consecutive steps, or all when fewer) of a curve."""
    finite = [x for x in losses if math.isfinite(x)]
    if not finite:
        return math.nan
    w = min(window, len(finite))
    sums = np.convolve(np.asarray(finite, np.float64), np.ones(w), mode="valid")
    return float(sums.min() / w)


# ------------------------------------------------------------------------------ command line
class RunStatusError(ValueError):
    """A folder that is not a run, or a build that cannot be found; the message names it."""


def recorded_build(run_dir: Path) -> tuple[list[Path], str]:
    """Where the run's build may be, best first, and what named it: the absolute path the trainer
    recorded in the run's newest checkpoint (its data_path resolved where training ran), then
    all_config.yaml's data_path as typed, relative to where training ran (the folder above
    checkpoints/<project>/<run> in the default layout), to the working directory, to the
    repository root. The working directory is not first: run from another project it may hold
    another build under the same relative name, whose floor would classify the run unnoticed."""
    config_file = run_dir / "all_config.yaml"
    try:
        config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else None
    except yaml.YAMLError as e:
        raise RunStatusError(f"{config_file}: not valid YAML ({str(e).splitlines()[0]}); "
                             f"pass --data BUILD") from None
    except UnicodeDecodeError as e:   # a ValueError, but its message does not name the file
        raise RunStatusError(f"{config_file}: not text ({e.reason} at byte {e.start}); pass --data BUILD") from None
    recorded = config.get("data_path") if isinstance(config, dict) else None
    if not isinstance(recorded, str) or not recorded:
        raise RunStatusError(f"{run_dir}: no data_path in {config_file}; pass --data BUILD")
    repo = Path(__file__).resolve().parents[1]
    started_in = run_dir.resolve().parents[2] if len(run_dir.resolve().parents) > 2 else repo
    resolved = checkpoint_data_path(run_dir)
    return ([Path(resolved)] if resolved else []) + [started_in / recorded, Path(recorded), repo / recorded], \
        f"{recorded} (from data_path in {config_file})"


def checkpoint_data_path(run_dir: Path) -> str | None:
    """The build path resolved by the trainer, saved in the run's newest trainer.pt (None without a
    checkpoint, or with one that cannot be read: the typed data_path is then all there is)."""
    import torch
    from hrm.run_folders import list_checkpoints
    kept = list_checkpoints(run_dir)
    if not kept:
        return None
    try:    # mmap: the optimizer state in the same file is not read
        trainer = torch.load(kept[-1] / "trainer.pt", map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 -- a damaged checkpoint is resume's and predict.py's to report
        return None
    resolved = trainer.get("data_path_resolved") if isinstance(trainer, dict) else None
    return resolved if isinstance(resolved, str) and resolved else None


def first_build(candidates: list[Path]) -> Path | None:
    return next((b for b in candidates if (b / "train" / "dataset.json").is_file()), None)


def trained_on_another_build(run_dir: Path, data: str) -> str | None:
    """A note when --data is not the build the run recorded (their manifest digests differ, both
    being there): the floor, and so the status, is then --data's, which may not be what was meant."""
    from arc_data.manifest import read_manifest
    try:
        recorded = first_build(recorded_build(run_dir)[0])
        if recorded is None or read_manifest(recorded)["digest"] == read_manifest(data)["digest"]:
            return None
    except (RunStatusError, OSError, ValueError):     # nothing recorded, or no manifest to compare
        return None
    return (f"note: {run_dir} was trained on {recorded}, another build than --data {data} (their manifest "
            f"digests differ): it is classified against the floor of --data")


def find_build(run_dir: Path, data: str | None) -> Path:
    """--data, else the build the run recorded: its checkpoint's path, else its all_config.yaml data_path
    (recorded_build)."""
    candidates, named = ([Path(data)], f"{data} (from --data)") if data else recorded_build(run_dir)
    build = first_build(candidates)
    if build is not None:
        return build
    moved = "" if data else "; if the build has moved since, pass --data BUILD"
    raise RunStatusError(f"{named}: not a build (no train/dataset.json){moved}")


def run_summary(run_dir: Path, floor: float, margin: float, window: int) -> dict:
    """Status and loss figures of one run folder, classified as `classify_logged_run` does."""
    # imported here: the library part of this module needs none of the experiment machinery
    from scripts.experiment_tools import last_eval, read_run_log, tail_mean, train_curve
    try:
        log = read_run_log(run_dir)
    except ValueError as e:   # a foreign or damaged file (read_run_log names it and the line)
        raise RunStatusError(str(e)) from None
    try:
        losses = train_curve(log)
        steps, logged = logged_steps(log, window)
    except (KeyError, TypeError, ValueError) as e:   # JSON objects, but not the trainer's records
        raise RunStatusError(f"{run_dir / 'log.jsonl'}: a train/lm_loss record without a step or with a loss that "
                             f"is not a number ({type(e).__name__}: {e})") from None
    exit_code = EXIT_DIVERGED if (run_dir / "diverged.json").is_file() else 0
    evaluation = last_eval(log)
    # the trainer logs {"stopped": 1} when a SIGTERM stops it, as its last record; a resumed run logs
    # its start after it (num_params), also when it only runs the pending last evaluation, no new step
    stop = log[-1] if log else {}
    # a branch's log starts at its parent's step: too-short and the window mean go by the steps it
    # trained itself, the only ones whose losses it holds
    own = max(0, steps - start_step(log))
    return {"run": str(run_dir), "status": classify_logged_run(losses, floor, exit_code, margin, window, own, logged),
            "steps": steps, "span": min(window, own),
            "final_loss": tail_mean(losses, logged), "min_loss": smoothed_min(losses, logged),
            "floor": floor, "evaluated": bool(evaluation), "eval_lm_loss": evaluation.get("lm_loss", math.nan),
            "eval_pass_at_2": evaluation.get("pass@2", math.nan),   # NaN: not logged (eval_pass_k)
            "stopped_at": stop["step"] if "stopped" in stop else None}


def logged_steps(log: list[dict], window: int) -> tuple[int, int]:
    """(the run's last logged training step, how many of its logged losses lie in its last `window`
    steps). With log_interval=k a run logs every k-th step: its step count and its window are in
    optimizer steps, as for a run that logs every step, not in log records."""
    steps = sorted({r["step"] for r in log if "train/lm_loss" in r})
    if not steps:
        return 0, window
    return steps[-1], max(1, sum(1 for s in steps if s > steps[-1] - window))


def start_step(log: list[dict]) -> int:
    """The step the log's first attempt started from: 0 for a fresh run, the checkpoint's step for a
    branch (`resume=<checkpoint> run_name=B` starts B's log there, without its parent's losses). The
    trainer logs each start as a `num_params` record; a log without one counts from 0."""
    return next((int(r["step"]) for r in log if "num_params" in r), 0)


def runs_inside(folder: Path, shown: int = 3) -> str:
    """'; it holds the runs a, b: pass them, <folder>/*' for a folder of run folders (a project,
    a sweep's checkpoint_path, compare.py's --work), else ''."""
    try:
        runs = sorted(sub.name for sub in folder.iterdir() if (sub / "log.jsonl").is_file())
    except OSError:
        return ""
    if not runs:
        return ""
    listed = ", ".join(runs[:shown]) + (f" and {len(runs) - shown} more" if len(runs) > shown else "")
    return f"; it holds the runs {listed}: pass them, e.g. {shlex.quote(str(folder))}/*"


def main(argv=None) -> int:
    # the help shows the classification rules of the docstring, from its "Classification" paragraph on
    rules = __doc__[__doc__.index("Classification of a run"):].strip()
    ap = argparse.ArgumentParser(description="Classify training runs by their per-step LM loss against the "
                                             "unigram floor of their build.",
                                 epilog=rules, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run folders written by pretrain.py")
    ap.add_argument("--data", help="the build the runs trained on (default: the one each run recorded: its newest "
                                      "checkpoint's path, else data_path in its all_config.yaml)")
    ap.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                    help=f"how far below the floor a trained run ends (default {DEFAULT_MARGIN})")
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                    help=f"steps averaged for the final loss (default {DEFAULT_WINDOW})")
    args = ap.parse_args(argv)
    if args.window < 1 or not 0 <= args.margin < 1:
        ap.error(f"--window must be >= 1 and --margin in [0, 1), got {args.window} and {args.margin}")
    floors: dict[Path, float] = {}      # one floor per build: reading a build's labels takes a while
    rows = []
    try:    # every run is read before anything is printed: an error leaves no partial table
        for run_dir in args.runs:
            if not (run_dir / "log.jsonl").is_file():
                if not run_dir.exists() or len(args.runs) == 1:   # a typo, or the one folder asked for
                    raise RunStatusError(f"{run_dir}: no log.jsonl, not a run folder of pretrain.py"
                                         f"{runs_inside(run_dir)}")
                # a match of a glob (`checkpoints/<project>/*`) that holds no run: a folder of a run that
                # failed before logging, a file beside the runs (compare.py's build.log): said, then passed over
                # p_sweep.py's cells (`--work`/lr*/*) hold their run one level down, in run/: named
                print(f"run_status.py: note: {run_dir}: no log.jsonl, not a run folder; skipped{runs_inside(run_dir)}",
                      file=sys.stderr)
                continue
            build = find_build(run_dir, args.data).resolve()
            note = trained_on_another_build(run_dir, args.data) if args.data else None
            if note:
                print(f"run_status.py: {note}", file=sys.stderr)
            if build not in floors:
                floors[build] = unigram_floor(build)[0]
            rows.append(run_summary(run_dir, floors[build], args.margin, args.window))
        if not rows:
            raise RunStatusError(f"none of the {len(args.runs)} folders holds a run (log.jsonl)")
    except (RunStatusError, ValueError, OSError) as e:
        print(f"run_status.py: error: {e}", file=sys.stderr)
        return 2
    settings = settings_that_differ([Path(r["run"]) for r in rows]) if len(rows) > 1 else {}
    for r in rows:
        # min is the lowest window mean, not the lowest single loss (one batch is noise): said so, as a
        # run shorter than the window has its min equal to its final loss
        span = r["span"]   # steps the window mean covers: a branch's log holds none before its start
        losses = (f"steps {r['steps']}  final loss {r['final_loss']:.4f} (mean of the last {span})  "
                  f"min {r['min_loss']:.4f} ({span}-step mean)" if r["status"] != NO_STEPS else
                  "no training step logged yet (starting, or stopped before its first step)")
        print(f"{r['run']}: {r['status']}  {losses}  floor {r['floor']:.4f}  "
              + evaluation_text(r)
              + (f"  (stopped by SIGTERM at step {r['stopped_at']}: resume it to finish)" if r["stopped_at"] else "")
              + (f"  settings: {settings[Path(r['run'])]}" if settings.get(Path(r["run"])) else ""))
    return 0


# Fields that tell runs apart by design (their names, folders, how they were started) or leave what
# is trained as it is (logging, checkpoint keeping, W&B): not shown as settings that differ.
BOOKKEEPING = ("run_name", "project_name", "checkpoint_path", "resume", "log_interval", "keep_checkpoints",
               "checkpoint_every_eval", "checkpoint_interval", "eval_save_predictions", "wandb")


def settings_that_differ(run_dirs: list[Path]) -> dict[Path, str]:
    """For each run, the settings of its all_config.yaml whose values are not the same in every
    listed run, as `key=value` overrides: what tells an ablation's runs apart when their names do
    not (`run_name=abl1`). A run without a readable all_config.yaml is said to have unknown settings
    and left out of the comparison. Empty when the runs share every setting."""
    from hrm.resume_settings import as_typed, flat_settings
    flat: dict[Path, dict] = {}
    text: dict[Path, str] = {}
    for run_dir in run_dirs:
        try:
            config = yaml.safe_load((run_dir / "all_config.yaml").read_text())
        except (OSError, ValueError, yaml.YAMLError):
            config = None
        if isinstance(config, dict):
            flat[run_dir] = {k: v for k, v in flat_settings(config).items() if k.split(".")[0] not in BOOKKEEPING}
        else:
            text[run_dir] = "unknown (no readable all_config.yaml)"
    keys = list(dict.fromkeys(k for settings in flat.values() for k in settings))

    def shown(settings: dict, key: str) -> str:
        return as_typed(settings[key]) if key in settings else "(not set)"   # a config older than the field
    differ = [k for k in keys if len({shown(settings, k) for settings in flat.values()}) > 1]
    if differ:
        for run_dir, settings in flat.items():
            text[run_dir] = " ".join(f"{k}={shown(settings, k)}" for k in differ)
    return text


def evaluation_text(summary: dict) -> str:
    """The last evaluation's figures; words, not `nan`, for what was not logged: no evaluation
    before the first eval_interval ends, no pass@2 when eval_pass_k leaves it out."""
    if not summary["evaluated"]:
        return "no evaluation yet"
    text = f"eval lm_loss {summary['eval_lm_loss']:.4f}"
    if not math.isnan(summary["eval_pass_at_2"]):
        text += f"  eval pass@2 {summary['eval_pass_at_2']:.4f}"
    return text


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script: the repository importable
    from evaluate.outputs import quiet_on_broken_pipe   # `run_status.py ... | head`: 141, no traceback
    sys.exit(quiet_on_broken_pipe(main))
