"""Hydra sweeps of pretrain.py (`python pretrain.py -m arch.scaling.p=0.3,0.5,0.7`).

Hydra runs a sweep's jobs one after the other, composing each job's config only when its turn
comes; by itself a typo in the third job's value would surface hours into the sweep, after the
first two trained. `CheckEveryJob`, a Hydra callback named in configs/cfg_pretrain.yaml, composes
and validates every job before the first one starts (and looks for checkpoints in the run folder of
each job that starts afresh, and for jobs that would train in one run folder), and stops the sweep
with every bad job named.

A job's run name ends in its swept values (`sweep_tag`), so the jobs' runs, checkpoints and
`resume=latest` stay apart. Under torchrun, the sweep's record (Hydra's multirun.yaml) is rank 0's
(`sweep_record_on_rank_zero`), and so is the launcher's log (`launcher_log_on_rank_zero`).
"""
from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from hrm.pretrain_config import (PretrainConfig, command_line_arg, exit_bad_config, explain_unknown_key,
                                 format_validation_error, numbers_as_text, one_line_missing_preset, say_once_per_node)

_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
_BASIC_LAUNCHER_LOG = "hydra._internal.core_plugins.basic_launcher"   # its module's logger
_RECORD_PREFIX = "hrm-sweep-rank"   # the other ranks' temporary sweep records: hrm-sweep-rank<r>-<host>-<pid>


def swept_keys(argv: list[str]) -> set[str]:
    """The keys a command line sweeps (`p=0.3,0.5`, `lr=range(1,3)`, `+x=choice(a,b)`), read with
    Hydra's own argument parser (flags such as `--config-name NAME` are not overrides)."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    overrides = get_args_parser().parse_known_args(argv)[0].overrides
    return {o.key_or_group for o in OverridesParser.create().parse_overrides(overrides) if o.is_sweep_override()}


SWEEP_DIR_TIME = "%Y-%m-%d_%H-%M-%S"   # the ${now:...} of hydra.sweep.dir in configs/cfg_pretrain.yaml


def is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    return HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_tag(config: dict | None = None) -> str:
    """In a multirun (-m), this job's values of the swept keys (`arch.scaling.p=0.3`), swept on the
    command line or in `hydra.sweeper.params`, for its run name; '' otherwise. '/' becomes '_': the
    tag is one folder name. Sorted: the same sweep resumed with its keys in another order finds its
    runs (Hydra gives a job's values in the order of the command line). `config`: the job's composed
    settings; a run folder named in command-line order (by a sweep from before the sorting) that
    holds checkpoints, where the sorted one holds none, keeps its name."""
    from hydra.core.hydra_config import HydraConfig
    if not is_multirun():
        return ""
    hydra_config = HydraConfig.get()
    swept = swept_keys(sys.argv[1:]) | set(OmegaConf.select(hydra_config, "sweeper.params", default=None) or {})
    task = OmegaConf.to_container(hydra_config.overrides.task, resolve=False)
    job = [o for o in task if o.split("=", 1)[0].lstrip("+~") in swept]
    tag = ",".join(sorted(job)).replace("/", "_")
    if config is not None and job != sorted(job):
        from hrm.resume_settings import named_run_folder
        from hrm.run_folders import list_checkpoints
        given = ",".join(job).replace("/", "_")
        folders = {t: named_run_folder(config, t) for t in (tag, given)}
        if folders[given] is not None and list_checkpoints(folders[given]) and not list_checkpoints(folders[tag]):
            return given
    return tag


def sweep_start(sweep_dir: str) -> datetime | None:
    """The time a sweep's record folder is named after (cfg_pretrain's
    `checkpoints/multirun/%Y-%m-%d_%H-%M-%S`, Hydra's clock when the sweep started), for its runs'
    default names to carry; None for a folder named otherwise (hydra.sweep.dir given, a rank's
    temporary record)."""
    try:
        return datetime.strptime(os.path.basename(os.path.normpath(sweep_dir)), SWEEP_DIR_TIME)
    except ValueError:
        return None


def sweep_record_on_rank_zero(argv: list[str]) -> list[str]:
    """Under torchrun every rank runs Hydra's sweeper, and each resolves the `${now:...}` of
    `hydra.sweep.dir` itself: a second apart, the ranks would leave two checkpoints/multirun/<time>
    records of one sweep. On the other ranks, `argv` gets a temporary sweep dir, removed at exit
    (always: a config file can make a run a sweep; a single run never creates the folder); those
    that a killed process left behind are removed first (remove_stale_sweep_records)."""
    rank = os.environ.get("RANK", "0")
    if rank == "0":
        return argv
    remove_stale_sweep_records()
    record = os.path.join(tempfile.gettempdir(), f"{_RECORD_PREFIX}{rank}-{this_host()}-{os.getpid()}")
    atexit.register(shutil.rmtree, record, ignore_errors=True)
    return argv + [f"hydra.sweep.dir={record}"]


def this_host() -> str:
    """This machine's name, as it goes into a record's folder name: a character Hydra's override
    grammar would read (`,` makes a sweep, `$` an interpolation) becomes `_`."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)     # signal 0: asks only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:     # it exists, as another user's
        return True
    return True


def remove_stale_sweep_records(folder: str | None = None) -> list[str]:
    """Remove the temporary sweep records of other ranks (sweep_record_on_rank_zero) whose process
    died without running its atexit (SIGKILL, the OOM killer); returns their paths. Only folders
    named exactly as ours, made on this machine (the host is in the name: a temp dir shared by
    several nodes, or by containers with their own process ids, holds others' live records whose
    pid means nothing here), owned by this user, not a link, and whose pid no longer runs. A pid
    reused by a new process keeps its stale folder until that process ends too: harmless.
    `folder`: where to look (default: the temp dir, where they are made)."""
    folder = folder or tempfile.gettempdir()
    ours = re.compile(rf"{_RECORD_PREFIX}\d+-{re.escape(this_host())}-([1-9]\d*)")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    removed = []
    for name in names:
        found = ours.fullmatch(name)
        if not found or process_alive(int(found[1])):
            continue
        path = os.path.join(folder, name)
        try:
            info = os.lstat(path)
        except OSError:     # just removed by another rank starting beside us
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _warning_or_worse(record: logging.LogRecord) -> bool:
    """A logging filter: whether `record` is kept."""
    return record.levelno >= logging.WARNING


def launcher_log_on_rank_zero() -> None:
    """Under torchrun every rank runs Hydra's basic launcher, whose log ("Launching 3 jobs
    locally", "#0 : arch.scaling.p=0.4") would come once per rank: the other ranks keep only its
    warnings and errors. A filter rather than a level: Hydra configures logging (dictConfig) again
    as it launches, which can reset a logger's level but keeps its filters."""
    if os.environ.get("RANK", "0") != "0":
        logging.getLogger(_BASIC_LAUNCHER_LOG).addFilter(_warning_or_worse)


# The number of the sweep's jobs, once CheckEveryJob has listed them (None: not listed, or another
# sweeper): a stop after the last one has no next job to speak of (pretrain.py)
job_count: int | None = None


def is_last_job() -> bool:
    """Whether the job running (or the one that ran last) is the sweep's last, as far as is known."""
    from hydra.core.hydra_config import HydraConfig
    return job_count is not None and HydraConfig.get().job.num == job_count - 1


def sweep_jobs(config: DictConfig, loader) -> tuple[list[list[str]], set[str]] | None:
    """Every job's overrides, in the order Hydra's basic sweeper runs them (the product of the
    swept values, `hydra.sweeper.params` first), and the swept keys; None for another sweeper,
    which picks its jobs as it goes."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    if OmegaConf.select(config, "hydra.sweeper._target_") != _BASIC_SWEEPER:
        return None
    # as written, not resolved: a value such as `runs/${hydra:job.num}` is the job's business
    params_node = OmegaConf.select(config, "hydra.sweeper.params", default=None)
    params = {} if params_node is None else OmegaConf.to_container(params_node, resolve=False)
    lines = [f"{k}={v}" for k, v in params.items()] + OmegaConf.to_container(config.hydra.overrides.task,
                                                                            resolve=False)
    overrides = OverridesParser.create(config_loader=loader).parse_overrides(lines)
    swept = {o.get_key_element() for o in overrides if o.is_sweep_override()}
    return BasicSweeper.split_arguments(overrides, None)[0], swept


def validated_config(compose, world_size: int = 1, known: DictConfig | None = None,
                     settings=None) -> PretrainConfig | str:
    """The config pretrain.py would run from the one `compose()` returns (Hydra's composition, then
    the validated fields and the world size), or why it would refuse it. An unknown key is compared
    with the keys of `known` for a suggestion. `settings`: what pretrain.py's launch() does to the
    composed values before validating them (a sweep job's: those of the checkpoint it resumes)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from pydantic import ValidationError
    try:
        composed = compose()
        with open_dict(composed):
            composed.pop("hydra", None)     # Hydra's own settings: resolved only while it runs a job
        # as launch() reads them: `run_name=123` is the name typed (refused as not text otherwise, and
        # a TypeError once joined to a path by a resumed job's settings)
        values = numbers_as_text(OmegaConf.to_container(composed, resolve=True))
        config = PretrainConfig(**(settings(values) if settings is not None else values))
        config.check_world_size(world_size)
    except ValidationError as e:
        return format_validation_error(e)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        return one_line_missing_preset(explain_unknown_key(e, known) if known is not None else str(e))
    return config


def checkpoints_in_the_way(config: PretrainConfig, tag: str, job_chdir: bool = False) -> str | None:
    """Why a job that starts afresh (no resume) would be refused by the Trainer as it starts: its
    run folder already holds checkpoints (the same sweep run again without resume=latest). Only a
    run_name or checkpoint_path can name an existing folder: a default run name holds the sweep's
    start time. `job_chdir`: the job runs in a folder of its own (hydra.job.chdir), where a
    relative run folder is not the one seen from here: it is left to the job's own check."""
    if config.resume or not (config.run_name or config.checkpoint_path):
        return None
    from hrm.distributed import DistInfo
    from hrm.run_naming import run_names
    from hrm.run_folders import list_checkpoints
    # Under checkpoint_path the run name only labels the run; the default one would read this
    # rank's clock now and fix the sweep's shared time stamp (hrm.run_naming.default_stamp) unagreed
    # with the other ranks: a stand-in keeps it unread.
    named = config if config.run_name else config.model_copy(update={"run_name": "unread"})
    run_dir = run_names(named, DistInfo(0, 1, 0, None), tag)[2]
    if job_chdir and not run_dir.is_absolute():
        return None
    found = list_checkpoints(run_dir)
    if not found:
        return None
    return (f"{run_dir} already holds checkpoints ({found[-1].name}); pass resume=latest to continue the "
            f"sweep's runs, or another run_name / checkpoint_path to start new ones")


def latest_needs_the_sweeps_name(config: PretrainConfig, tag: str, shown: int = 3) -> str | None:
    """Why a sweep with `resume=latest` but no run_name or checkpoint_path cannot continue: its runs
    were named `<run_name>-<swept values>`, the default run_name holding the time the sweep started,
    which a later command cannot know. Told before the first job (where job #0 said it as it
    started), with the run names this job's swept values were trained under in its project."""
    if config.resume != "latest" or config.run_name or config.checkpoint_path:
        return None
    from hrm.run_folders import list_checkpoints, project_of
    project = Path("checkpoints") / project_of(config.project_name, config.data_path)
    suffix = f"-{tag}"
    try:
        found = [p.name[:-len(suffix)] for p in project.iterdir()
                 if p.name.endswith(suffix) and len(p.name) > len(suffix) and list_checkpoints(p)]
    except OSError:
        found = []
    names = sorted(found, reverse=True)    # default names end in the time: the newest sweep first
    hint = ("; run names these values were trained under: " + ", ".join(command_line_arg("run_name", n) for n in names[:shown])
            + (" ..." if len(names) > shown else "")) if names else f"; {project} holds no run of these values"
    return (f"resume=latest needs the sweep's run_name: its runs are {project}/<run_name>-<swept values>, "
            f"the default run_name being <arch>-<the time the sweep started>{hint}")


def jobs_share_a_run(config: PretrainConfig, swept: set[str]) -> str | None:
    """Why a sweep's jobs that resume one checkpoint by its path (`resume=<run or step folder>`, not
    swept) without run_name or checkpoint_path cannot run: each would continue that run in its own
    folder (hrm.train.Trainer._resume), one after the other (the next job from the last one's latest
    step, or saving over it, in one log), and the swept values would name no run."""
    if config.resume in (None, "latest", "auto") or "resume" in swept or config.run_name or config.checkpoint_path:
        return None
    return (f"resume={config.resume}: every job would continue that run in its folder, one after the other; pass "
            f"run_name (or checkpoint_path) for each job to start a run of its own from that checkpoint "
            f"(<run_name>-<its swept values>)")


def shared_run_folders(folders: dict[str, str | None]) -> dict[str, list[str]]:
    """Jobs that would train in one run folder, by the problem to tell: `folders` maps each job
    (its label) to the run folder it writes to, or None when that cannot be told from here. Two
    jobs whose swept values read the same as Hydra writes them (`lr=1e-3,0.001`, `p=0.5,0.50`, a
    value given twice) get one tag, so one run name: the second would be refused once the first
    has saved (or, with resume=latest, would find the first's run finished), stopping the sweep
    hours in, with the jobs after it not run."""
    by_folder: dict[str, list[str]] = {}
    for job, folder in folders.items():
        if folder is not None:
            by_folder.setdefault(folder, []).append(job)
    return {f"these jobs would all train in {folder}, one after the other (their swept values read the "
            f"same as Hydra writes them): give each value once": jobs
            for folder, jobs in by_folder.items() if len(jobs) > 1}


def job_run_folder(config: PretrainConfig, tag: str, job_chdir: bool = False) -> str | None:
    """The run folder a job of the sweep writes to (hrm.run_folders.run_folder), a default run name shown
    as `<arch>-<time>` (the sweep's start, the same for all its jobs, not read here); None for a
    relative one of a job that changes directory (hydra.job.chdir: per job, not told from here)."""
    from hrm.run_folders import run_folder
    folder = run_folder(config.project_name, config.run_name or f"{config.arch.name}-<time>",
                        config.checkpoint_path, config.data_path, tag)
    return None if job_chdir and not folder.is_absolute() else str(folder)


def tell_problems(by_problem: dict[str, list[str]], total: int, noun: str, named: int = 5) -> list[str]:
    """Each problem once, after whom it concerns: `every <noun>` when all `total` share it, else
    the first `named` of them and how many more."""
    lines = []
    for problem, who in by_problem.items():
        if len(who) == total:
            lines.append(f"every {noun}:")
        else:
            more = f" and {len(who) - named} more" if len(who) > named else ""
            lines.append(f"{noun} " + ", ".join(who[:named]) + more + ":")
        lines.extend("  " + line for line in problem.splitlines())
    return lines


def fresh_if_nothing_to_resume(config: PretrainConfig, info, tag: str) -> PretrainConfig:
    """`resume=latest` over a sweep, or `resume=auto` (the same command to start a run and to
    continue it, as a requeued job runs it): a run with no checkpoint (a job that diverged or was
    killed before its first one, or never ran) starts afresh instead of being refused; one with a
    checkpoint continues from its latest. Collective: only when no rank finds one, since without a
    shared filesystem each node looks in its own folder; when some do, the run resumes, and the
    Trainer's agreed start-up check names the ranks that have nothing to resume from (a rank
    starting afresh beside resuming ones would train on)."""
    from hrm.distributed import gather_objects
    from hrm.run_naming import run_names
    from hrm.run_folders import list_checkpoints
    from hrm.run_lock import is_held
    run_dir = run_names(config, info, tag)[2]
    if any(gather_objects(bool(list_checkpoints(run_dir)), info)):
        return config.model_copy(update={"resume": "latest"})
    # a folder another process is training into (before its first save) is refused by the Trainer
    # next, naming that process: "starts afresh" first would contradict it
    if info.is_main and not is_held(run_dir):
        print(f"pretrain.py: nothing to resume in {run_dir}: "
              f"{'this job of the sweep' if tag else 'the run'} starts afresh", flush=True)
    return config.model_copy(update={"resume": None})


class CheckEveryJob(Callback):
    """Before a sweep's first job: every job's config must compose and validate (the world size
    included), a job that starts afresh must not find checkpoints in its run folder, and jobs must
    not share one run (jobs_share_a_run) nor one run folder (shared_run_folders), or the sweep stops
    with exit 2, naming each bad job, having run nothing."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        # Hydra turns a callback's exception into a warning and goes on: say plainly that the check
        # did not happen (each job is still validated when it starts)
        try:
            self.check(config)
        except Exception as e:  # noqa: BLE001
            say_once_per_node(f"warning: the sweep's jobs could not be checked before the first one "
                              f"({type(e).__name__}: {e}); each is checked when it starts")

    def check(self, config: DictConfig) -> None:
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.hydra_config import HydraConfig
        from hydra.errors import HydraException
        loader = GlobalHydra.instance().config_loader()
        try:
            found = sweep_jobs(config, loader)
        except HydraException as e:          # a sweep the basic sweeper cannot run (an interval)
            exit_bad_config(f"invalid sweep: {e}")
        if found is None:
            return
        jobs, swept = found
        global job_count
        job_count = len(jobs)
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        by_problem: dict[str, list[str]] = {}   # the same mistake in every job is told once

        def compose_job(i: int, job: list[str]) -> DictConfig:
            """As Hydra's basic launcher composes job i, and with its HydraConfig set, so that the
            job's `${hydra:job.num}` and the like resolve as they will."""
            job_config = loader.load_sweep_config(config, list(job))
            with open_dict(job_config):
                job_config.hydra.job.id = i
                job_config.hydra.job.num = i
            HydraConfig.instance().set_config(job_config)
            return job_config
        def job_settings(values: dict) -> dict:
            """As the job's launch() will: a resumed job's settings are its checkpoint's, except
            those its command line gives (hrm/resume_settings.py)."""
            from hrm.resume_settings import resume_with_saved_settings
            return resume_with_saved_settings(values, list(HydraConfig.get().overrides.task), sweep_tag(values))[0]
        folders: dict[str, str | None] = {}     # each valid job's run folder
        before = HydraConfig.instance().cfg
        try:
            for i, job in enumerate(jobs):
                checked = validated_config(lambda: compose_job(i, job), world_size, known=config,
                                           settings=job_settings)
                label = f"#{i} ({' '.join(o for o in job if o.split('=', 1)[0] in swept)})"
                if isinstance(checked, str):
                    by_problem.setdefault(checked, []).append(label)
                    continue
                # the job's HydraConfig is set: its tag is the one the job's sweep_tag() will give
                tag, chdir = sweep_tag(checked.model_dump()), bool(HydraConfig.get().job.chdir)
                folders[label] = job_run_folder(checked, tag, chdir)
                problem = (checkpoints_in_the_way(checked, tag, chdir) or jobs_share_a_run(checked, swept)
                           or latest_needs_the_sweeps_name(checked, tag))
                if problem:
                    by_problem.setdefault(problem, []).append(label)
        finally:
            HydraConfig.instance().cfg = before     # the launcher sets each job's when it runs it
        by_problem.update(shared_run_folders(folders))
        if by_problem:
            bad = len({job for who in by_problem.values() for job in who})     # a job may have two problems
            exit_bad_config("\n".join([f"invalid sweep: {bad} of its {len(jobs)} jobs cannot run; none was started",
                                       *tell_problems(by_problem, len(jobs), "job")]))
