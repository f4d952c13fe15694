"""One cell of the p sweep (scripts/p_sweep.py) and its records: the pretrain.py command that trains
it, running it (continuing an interrupted run of the same command), its cell.json and started.json,
which cells are finished or hold another command's result, the config each cell resolves to (and an
arch preset's cycles, composed the same way), the CSV row classified from its log, and why a failed
run ended. `args` is p_sweep.py's parsed command line (p_sweep.parse_args)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import yaml

from hrm.pretrain_config import PretrainConfig, path_override
from hrm.resume_settings import flat_settings
from hrm.step_names import unrenamed_saves
from scripts.experiment_tools import (REPO, PYTHON, ExperimentError, check_build, exact_text, last_eval,
                                      latest_checkpoint, read_run_log, remove_unless_training, run_logged,
                                      shell_line, tail_mean, train_curve, gpu_env)
from scripts.run_status import EXIT_DIVERGED, FINISHED, classify_run, logged_steps, smoothed_min
from scripts.sweep_grid import Cell


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


def composed_preset(arch: str):
    """cfg_pretrain with `arch=<arch>`, composed as pretrain.py composes it (Hydra's DictConfig)."""
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base=None):
        return compose("cfg_pretrain", [f"arch={arch}"])


def arch_cycles(arch: str) -> tuple[int, int]:
    """(H_cycles, L_cycles) of an arch preset as pretrain.py composes it: a preset of your own may
    take them from another through its Hydra `defaults` list rather than state them itself."""
    composed = composed_preset(arch)
    # every cell overrides these, and Hydra cannot override a key the preset leaves out (pretrain.py
    # trains such a preset, the field at its default): said here, not as "does not compose: Key
    # 'H_cycles' is not in struct"
    from omegaconf import OmegaConf
    absent = object()
    missing = [f"arch.{key}" for key in SWEPT_ARCH_KEYS if OmegaConf.select(composed.arch, key, default=absent) is absent]
    if missing:
        raise ValueError(f"it does not set {', '.join(missing)}, which every cell overrides (Hydra overrides only "
                         f"keys the config holds): add {'them' if len(missing) > 1 else 'it'} to the preset")
    return int(composed.arch.H_cycles), int(composed.arch.L_cycles)


SWEPT_ARCH_KEYS = ("H_cycles", "L_cycles", "scaling.rule", "scaling.p")   # arch keys train_command sets


def module_scaling_of_the_preset(arch: str) -> list[str]:
    """The per-module scaling rule and p an arch preset sets itself (`arch.scaling.H.p=0.25`), as
    `key=value`: the sweep sets the top-level rule and p, which such a module's own replace, so
    that module would train at its own scaling in every cell while the cell, CSV and table name p
    (--set of these keys is refused for the same reason)."""
    scaling = composed_preset(arch).arch.get("scaling") or {}
    return [f"arch.scaling.{module}.{field}={(scaling.get(module) or {}).get(field)}"
            for module in ("H", "L") for field in ("rule", "p") if (scaling.get(module) or {}).get(field) is not None]


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
