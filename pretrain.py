"""Train HRM on an arc-aug build.

  python pretrain.py arch=hrm_tiny data_path=data/quickstart epochs=400 eval_interval=100   # one process
  torchrun --nproc-per-node 8 pretrain.py arch=hrm_deeploop                                  # 8 GPUs
  python pretrain.py resume=checkpoints/<project>/<run> [max_steps=N ...]                    # continue a run

Config: configs/cfg_pretrain.yaml and configs/arch/*.yaml; any field can be overridden as key=value.
A resumed run keeps the settings saved in its checkpoint except those the command line gives, and
the machine's (hrm/resume_settings.py).
Exit codes: 0 done, 1 an error (a checkpoint or predictions that cannot be written: a full disk), 2 bad
config, 3 diverged (non-finite loss or gradient), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM (a
scheduler's time limit or preemption) after saving the step it stopped at, or before training
started, with nothing to save.

A Hydra sweep (`python pretrain.py -m arch=hrm_tiny arch.scaling.p=0.3,0.5,0.7`, or
`hydra.sweeper.params` in a config) runs its jobs one after the other, once every job's config has
been checked (hrm/sweep.py). Each job's run name ends in
its swept values: `<arch>-<time>-arch.scaling.p=0.3` by default, `<run_name>-arch.scaling.p=0.3` with
run_name, `<checkpoint_path>/arch.scaling.p=0.3` with checkpoint_path (so `resume=latest` continues
every job's own run, and starts afresh a job without a checkpoint). A diverged job is recorded
(diverged.json) without stopping the others; the sweep exits 3 at the end. A job that fails with an
error (out of memory, say) prints its traceback and the sweep goes on; it exits 1 at the end, naming
the failed jobs. A checkpoint or predictions that cannot be written (a full disk, which would fail the
next jobs too) stop the sweep with exit 1, naming the jobs that failed or diverged before and how to
continue it; so does a SIGTERM (exit 143) or Ctrl-C (130), also between two jobs. Under torchrun the
jobs share one process group, and an error on any rank stops the sweep (torchrun stops every rank).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback

import hydra
from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError

from hrm.pretrain_config import (EXIT_BAD_CONFIG, PretrainConfig, command_line_arg, exit_bad_config,
                                 explain_unknown_key, explain_unparsable_override, format_validation_error,
                                 numbers_as_text, one_line_missing_preset, say_once_per_node, speaks_for_node)
from hrm.sweep import (fresh_if_nothing_to_resume, is_last_job, is_multirun, launcher_log_on_rank_zero,
                       sweep_record_on_rank_zero, sweep_start, sweep_tag)

EXIT_DIVERGED, EXIT_INTERRUPTED, EXIT_STOPPED = 3, 130, 143   # 130, 143: as a shell reports Ctrl-C, SIGTERM
diverged_jobs: list[str] = []   # a multirun's diverged runs, for its exit status
failed_jobs: list[str] = []     # a single-process multirun's jobs that raised an error, for its exit status
# a multirun's jobs that got as far as naming their run: (run name, later_jobs' advice), for a
# Ctrl-C or SIGTERM outside any job's training (between two jobs, in Hydra's own code)
started_jobs: list[tuple[str, str]] = []
last_job_ended: list[str] = []   # the sweep's last job's run name, once that job has ended: nothing comes next


@hydra.main(config_path="configs", config_name="cfg_pretrain", version_base=None)
def launch(hydra_config: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hrm.resume_settings import resume_path_problem, resume_with_saved_settings
    try:
        composed = numbers_as_text(OmegaConf.to_container(hydra_config, resolve=True))
    except ValueError as e:
        exit_bad_config(f"error: {e}")
    tag = sweep_tag(composed)   # a sweep job's swept values: its run name's end ('' for a single run)
    if tag:    # its default run name carries the time its record's folder is named after
        import hrm.run_naming
        hrm.run_naming.sweep_started = sweep_start(HydraConfig.get().sweep.dir)
    # resume: what the command line does not set comes from the checkpoint, not the config files
    try:
        settings, note = resume_with_saved_settings(composed, list(HydraConfig.get().overrides.task), tag)
    except ValueError as e:     # a trainer.pt that cannot be read (CheckpointError), a run in another project
        exit_bad_config(f"error: {e}")
    try:
        config = PretrainConfig(**settings)
    except ValidationError as e:
        # a resume= path that names no checkpoint first: the settings refused may be the config
        # files' only because there was no checkpoint to take the run's own from
        problem = resume_path_problem(settings, tag)
        exit_bad_config(f"error: {problem}" if problem else format_validation_error(e))
    refuse_what_every_rank_would(config)
    if note:
        say_once_per_node(note)
    if config.arch.name == OmegaConf.select(hydra_config, "arch.name"):   # not the checkpoint's
        note_a_preset_named_otherwise(config.arch.name)

    from hrm.distributed import AgreedOnEveryRank, init_distributed, shutdown
    from hrm.sigterm import TrainingStopped
    from hrm.train import Trainer, TrainingDiverged
    from hrm.evaluation import PredictionsNotWritten
    from hrm.train_checkpoint import CheckpointNotSaved

    try:
        info = init_distributed(config.device)
    except RuntimeError as e:   # this rank's GPU missing (LOCAL_RANK beyond the visible ones): each such rank says
        print(f"pretrain.py: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    finished, agreed, trainer = False, False, None
    try:
        if config.resume == "auto" or (tag and config.resume == "latest" and (config.checkpoint_path or
                                                                              config.run_name)):
            config = fresh_if_nothing_to_resume(config, info, tag)
        try:
            trainer = Trainer(config, info, run_tag=tag)
        except (ValueError, FileNotFoundError) as e:
            agreed = isinstance(e, AgreedOnEveryRank)   # a start-up check every rank raised, with one message:
            if agreed:                                   # said once, and every rank meets the others on the way out
                say_once_per_node(f"error: {e}")
            else:                                        # this rank's alone: it says it itself
                print(f"pretrain.py: error: {e}", file=sys.stderr)
            sys.exit(EXIT_BAD_CONFIG)
        if tag:
            started_jobs.append((trainer.run_name, later_jobs(config, trainer, tag)))
        summary = trainer.fit()
        if not is_multirun():   # the run is complete and saved: a SIGTERM now has nothing to stop
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if info.is_main and summary["steps_run"] == 0 and not summary["eval"]:   # resumed at its end: nothing left
            print(f"done: the run had already finished at step {summary['step']} (max_steps or epochs end it "
                  f"there); checkpoints in {trainer.run_dir}", flush=True)
        elif info.is_main and summary["steps_run"] == 0:   # stopped before its last evaluation, which ran now
            print(f"done: step {summary['step']}, the run's last evaluation (pending when it stopped) ran now; "
                  f"checkpoints in {trainer.run_dir}", flush=True)
        elif info.is_main:
            # over the whole loop, evaluations and saves included: below the progress bar's rate
            print(f"done: step {summary['step']}, {summary['steps_per_second']:.2f} steps/s with evaluations, "
                  f"checkpoints in {trainer.run_dir}", flush=True)
        if summary["sigterm"] and is_multirun():   # after the job's last step: it is complete,
            agreed = True                           # but the sweep must not start its next job
            said = ": every job ran" if is_last_job() else later_jobs(config, trainer, tag)
            say_once_per_node(f"stopped by SIGTERM after the job {trainer.run_name} finished (step "
                              f"{summary['step']}){said}")
            sys.exit(EXIT_STOPPED)
        finished = True
        job_ended(trainer.run_name)
    except TrainingDiverged as e:
        # every rank sees the same all-reduced loss and gradient norm, so every rank stops here at
        # the same step: said once, and they leave together (rank 0 writes diverged.json first)
        agreed = True
        say_once_per_node(f"error: {e}")
        if not is_multirun():
            sys.exit(EXIT_DIVERGED)
        diverged_jobs.append(trainer.run_name)   # a sweep goes on with its next job
        finished = True
        job_ended(trainer.run_name)
    except (CheckpointNotSaved, PredictionsNotWritten) as e:   # a full disk: every rank raised it, one message
        agreed = True
        # a sweep stops (its next jobs would fail alike), saying how to continue it once there is room
        say_once_per_node(f"error: {e}{later_jobs(config, trainer, tag)}")
        sys.exit(1)
    except TrainingStopped as e:   # SIGTERM: every rank stopped after the same step, which is saved
        agreed = True
        say_once_per_node(f"{e}{later_jobs(config, trainer, tag)}")
        sys.exit(EXIT_STOPPED)
    except KeyboardInterrupt:   # Ctrl-C: where things stand, not a traceback (once per machine)
        if trainer is None:     # before this job trained: said as one between two jobs (__main__)
            raise
        say_interrupted(trainer, config, tag)
    except Exception as e:
        if interrupted_underneath(e):   # Ctrl-C, which a library's clean-up turned into its own error
            if trainer is None:
                raise KeyboardInterrupt from e
            say_interrupted(trainer, config, tag)
        if is_multirun() and info.world_size > 1:
            # Hydra notes a job's exception and starts the next job; under torchrun this rank alone
            # would, while the others still wait in this job's collectives (one GPU out of memory:
            # a hang until the NCCL timeout). Stop this process instead: torchrun then stops the rest.
            traceback.print_exc()
            sys.exit(1)
        if is_multirun():
            # Hydra would keep the exception until the sweep's end, silent meanwhile, and then raise
            # only the first job's: a later failure was never told, nor the diverged jobs; and the
            # exception's frames held the failed job's model and optimizer (GPU memory, for a job
            # out of memory) through every later job. Told now, and the sweep goes on.
            traceback.print_exc()
            number = f"#{HydraConfig.get().job.num}"    # failed before its run was named: Hydra's job number
            failed_jobs.append(trainer.run_name if trainer is not None else f"{number} ({tag})" if tag else number)
            print(f"pretrain.py: error: the sweep's job {failed_jobs[-1]} failed (traceback above); the sweep goes "
                  f"on with any later job", file=sys.stderr, flush=True)
            job_ended(failed_jobs[-1])
            return
        raise
    finally:
        # A sweep keeps its process group for the next job: a group destroyed and made again on
        # the same torchrun store can deadlock its first collective (PyTorch reuses the store keys).
        # Ranks that stop together wait for each other first: gloo torn down while a peer still
        # talks to it aborts the peer, and a rank that exits early makes torchrun stop the rest.
        if not (is_multirun() and finished):
            shutdown(wait_for_peers=finished or agreed)


def say_interrupted(trainer, config: PretrainConfig, tag: str) -> None:
    """Ctrl-C during a job: where the run stands, not a traceback (once per machine); exit 130."""
    if speaks_for_node():
        print(f"\npretrain.py: interrupted {where_the_run_stands(trainer, later_jobs(config, trainer, tag))}",
              file=sys.stderr, flush=True)
    sys.exit(EXIT_INTERRUPTED)


def interrupted_underneath(error: BaseException) -> bool:
    """Whether a Ctrl-C lies behind `error`. One that lands inside torch.save stops its zip writer
    mid-record; the writer's clean-up then fails on the half-written file ('unexpected pos 47808 vs
    47696') and that RuntimeError, with the KeyboardInterrupt only as its context, is what comes up:
    a Ctrl-C during a checkpoint was a traceback and exit 1."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


class SigtermOutsideTraining(BaseException):
    """SIGTERM outside training (a run starting up; in a sweep, also between two jobs), where fit's
    handler (hrm.sigterm.StopOnSigterm) is not in place: the default one ended the process without a
    word, naming neither a sweep's diverged jobs nor how to continue it (the run_name of default
    names), and a wrapper looking for the `stopped by SIGTERM` line took the stop for a failure.
    Not an Exception: Hydra's job runner and launch() must let it through."""


def stop_outside_training(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a copy of the signal (SLURM signals twice) while saying so
    raise SigtermOutsideTraining


def job_ended(name: str) -> None:
    """A sweep's job ended (trained, diverged or failed) and the sweep goes on: noted when it was
    the last, after which a Ctrl-C or SIGTERM (Hydra closing the sweep) has no next job to stop."""
    if is_multirun() and is_last_job():
        last_job_ended.append(name)


def before_training() -> str:
    """The end of the Ctrl-C or SIGTERM line outside any job's training: starting up (importing
    torch, composing, loading the data), or in a sweep between two jobs (Hydra's own code) or before
    the next job trained, where the same sweep with resume=latest continues it; or after the
    sweep's last job, with nothing left to continue."""
    if last_job_ended:
        return f"after the sweep's last job {last_job_ended[-1]} ended: every job ran"
    if not started_jobs:
        return "before training"
    name, advice = started_jobs[-1]
    return f"before the sweep's next job trained, after its job {name}{advice}"


def say_earlier_jobs() -> None:
    """The end of a sweep: its jobs that failed with an error or diverged (once per machine)."""
    if failed_jobs:
        say_once_per_node(f"{len(failed_jobs)} job(s) of the sweep failed with an error: {', '.join(failed_jobs)}")
    if diverged_jobs:
        say_once_per_node(f"{len(diverged_jobs)} run(s) of the sweep diverged: {', '.join(diverged_jobs)}")


def refuse_what_every_rank_would(config: PretrainConfig) -> None:
    """Checks whose answer is the same on every rank of a machine (a batch the world size does not
    divide, device=cuda without CUDA): here, said once per machine with exit 2, rather than by every
    rank's Trainer or init_distributed."""
    from hrm.distributed import check_device
    try:
        config.check_world_size(int(os.environ.get("WORLD_SIZE", "1")))
        check_device(config.device)
    except (ValueError, RuntimeError) as e:
        exit_bad_config(f"error: {e}")


def note_a_preset_named_otherwise(name: str) -> None:
    """A preset copied to a new file keeps its `name:` line, which names the runs
    (`<name>-<time>`) and labels them in logs and checkpoints: `arch=my_arch` from a copy of
    hrm_tiny.yaml would train runs called hrm_tiny-... Say so, once per machine, unless
    `arch.name=` was given on the command line."""
    from hydra.core.hydra_config import HydraConfig
    hydra_config = HydraConfig.get()
    preset = hydra_config.runtime.choices.get("arch")
    named_here = any(o.split("=", 1)[0].lstrip("+~") == "arch.name" for o in hydra_config.overrides.task)
    if preset and preset != name and not named_here:
        say_once_per_node(f"note: the arch preset {preset} says `name: {name}`, so its runs are named and "
                          f"logged as {name}; edit that line (or pass arch.name=...) to name them after it")


def later_jobs(config, trainer, tag: str) -> str:
    """In a sweep, a SIGTERM stops the sweep: its later jobs did not start, and `resume=<this run>`
    would continue this job alone. The same sweep with resume=latest continues each job's own run
    and starts the others; a sweep of default run names (`<arch>-<time>-<tag>`) needs its name
    given, its time being the first job's."""
    if not tag:
        return ""
    name = "" if config.run_name or config.checkpoint_path else f" run_name={trainer.run_name[:-len(tag) - 1]}"
    return (f"; the sweep stops here (any job after this one is not started): run the same sweep with "
            f"resume=latest{name} to continue it")


def where_the_run_stands(trainer, sweep: str = "") -> str:
    """The end of the Ctrl-C line: the step, and how to continue. Before the first checkpoint there
    is nothing to resume from (resume= would be refused): the same command starts the run again.
    In a sweep (`sweep`: later_jobs' advice) the same command would be refused once an earlier job
    holds checkpoints, or start a new sweep of default names: the same sweep with resume=latest
    continues it, starting this job afresh."""
    if trainer is None:
        return "before training"
    from hrm.run_folders import list_checkpoints
    if not list_checkpoints(trainer.run_dir):
        if sweep:
            return f"at step {trainer.step}, before the run's first checkpoint{sweep}"
        return (f"at step {trainer.step}, before the run's first checkpoint, so there is nothing to resume: run the "
                f"same command again (checkpoint_interval=N saves every N steps)")
    return (f"at step {trainer.step}; the run's checkpoints are in {trainer.run_dir}: continue from the newest "
            f"with {command_line_arg('resume', trainer.run_dir)}{sweep}")


def check_overrides(argv: list[str]) -> None:
    """Compose the config once before Hydra does, as Hydra will (the same search path, `-m`,
    `--config-name/-dir/-path`, `hydra.*` overrides): an unknown key (`arch.hidden_sz=3`), preset
    (`arch=hrm_big`), config name or a malformed override then exits with EXIT_BAD_CONFIG and
    Hydra's message naming it, like every other bad config (Hydra alone would exit 1, as for a
    crash). A sweep's swept values are checked job by job later, by hrm.sweep.CheckEveryJob. A config
    file of one's own that lacks cfg_pretrain's `hydra:` settings is refused (hydra_settings_lost).
    Hydra's commands that run nothing (--help, --cfg, --info, ...) are left to it."""
    from pathlib import Path
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException, OverrideParseException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    args, unknown = get_args_parser().parse_known_args(argv)
    if unknown or args.help or args.hydra_help or args.cfg or args.info or args.shell_completion \
            or args.experimental_rerun:
        return
    try:
        search_path = create_automatic_config_search_path(str(Path(__file__).resolve()), None,
                                                          args.config_path or "configs")
        if args.config_dir is not None:
            if not Path(args.config_dir).is_dir():
                raise HydraException(f"--config-dir {args.config_dir}: no such folder")
            # where Hydra puts it: after this project's configs/, before the structured configs
            search_path.prepend("command-line", f"file://{Path(args.config_dir).resolve()}",
                                anchor=SearchPathQuery(provider="schema"))
        hydra = Hydra.create_main_hydra2(task_name="pretrain", config_search_path=search_path)
        config_name = args.config_name or "cfg_pretrain"
        check_preset_choices(hydra, args.overrides)
        mode = RunMode.MULTIRUN if args.multirun else hydra.get_mode(config_name, args.overrides) or RunMode.RUN
        try:
            composed = hydra.compose_config(config_name, args.overrides, run_mode=mode, with_log_configuration=False)
        except (HydraException, OmegaConfBaseException) as e:
            # A file not built on cfg_pretrain lacks its keys as well as its hydra: settings, so its
            # first override (data_path=...) is "no such key": name the cause, the missing base, instead.
            if str(e).startswith("Could not override"):
                with contextlib.suppress(HydraException, OmegaConfBaseException):
                    refuse_lost_hydra_settings(hydra, config_name, hydra.compose_config(
                        config_name, [], run_mode=mode, with_log_configuration=False), args.overrides, mode)
            raise
        refuse_lost_hydra_settings(hydra, config_name, composed, args.overrides, mode)
    except OverrideParseException as e:   # Hydra's message does not say which argument, nor how to quote it
        exit_bad_config(f"invalid config: {explain_unparsable_override(e.override, str(e))}")
    except HydraSettingsLost as e:
        exit_bad_config(f"invalid config: {e}")
    except (HydraException, OmegaConfBaseException) as e:
        message = str(e)
        if message.startswith("Could not override"):   # an unknown key: name the nearest known ones
            try:
                message = explain_unknown_key(e, hydra.compose_config(
                    config_name, [], run_mode=RunMode.RUN, with_log_configuration=False))
            except (HydraException, OmegaConfBaseException):
                pass    # the config without overrides fails too: its own error comes first
        exit_bad_config(f"invalid config: {one_line_missing_preset(message)}")
    finally:
        GlobalHydra.instance().clear()


class HydraSettingsLost(Exception):
    """A config of one's own (--config-name) without cfg_pretrain's `hydra:` settings; the message says so."""


def refuse_lost_hydra_settings(hydra, config_name: str, composed, overrides: list[str], mode) -> None:
    """Raise HydraSettingsLost when `composed` (the config --config-name chose) leaves settings of
    OUR_HYDRA_SETTINGS at Hydra's own values (hydra_settings_lost)."""
    from hydra.types import RunMode
    lost = hydra_settings_lost(composed, hydra.compose_config(None, [], run_mode=mode, with_log_configuration=False),
                               overrides, mode)
    if lost:
        sweep = mode == RunMode.MULTIRUN
        raise HydraSettingsLost(
            f"--config-name {config_name}: the config leaves {', '.join(lost)} as Hydra has them "
            f"(configs/cfg_pretrain.yaml's `hydra:` section is not part of it), so Hydra would write "
            f"{'multirun' if sweep else 'outputs'}/<date>/<time> folders (.hydra/ records, log files) into "
            f"the current folder{', and check no job before the first one starts' if sweep else ''}. Begin "
            f"the file with `defaults: [cfg_pretrain, _self_]` (`- override arch: <preset>` in that list "
            f"picks a preset), or copy cfg_pretrain.yaml's hydra: section and its `override "
            f"hydra/job_logging: stdout` line")


# What configs/cfg_pretrain.yaml's `hydra:` section sets (dotted keys of the composed config; the
# job_logging choice as Hydra records it) that a config of its own must keep: a single run's, a sweep's
OUR_HYDRA_SETTINGS = {"RUN": ("hydra.run.dir", "hydra.output_subdir", "hydra/job_logging"),
                      "MULTIRUN": ("hydra.sweep.dir", "hydra.sweep.subdir", "hydra.output_subdir", "hydra/job_logging",
                                   "hydra.callbacks.check_every_job")}


def hydra_settings_lost(composed, bare, overrides: list[str], mode) -> list[str]:
    """The settings of OUR_HYDRA_SETTINGS (for `mode`, a hydra RunMode) that a config chosen with
    --config-name leaves at Hydra's own values (`bare`: Hydra's config composed without one) and
    the command line does not give: a file that does not start from cfg_pretrain has none of them."""
    from omegaconf import OmegaConf

    def value(node: dict, key: str):
        if "/" in key:
            return node["runtime"]["choices"].get(key)
        for part in key.split(".")[1:]:
            node = node.get(part) if isinstance(node, dict) else None
        return node
    # as written: `${now:...}`, `${hydra.job.num}` unresolved
    ours, hydras = (OmegaConf.to_container(config.hydra, resolve=False) for config in (composed, bare))
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    return [key for key in OUR_HYDRA_SETTINGS[mode.name]
            if key not in given and value(ours, key) == value(hydras, key)]


def check_preset_choices(hydra, overrides: list[str]) -> None:
    """A config group (`arch`) takes one preset's name: `arch=0` or `arch=null` would stop Hydra with
    a traceback (exit 1), and a list (`arch=[hrm_tiny,hrm_deeploop]`, not a sweep) would merge the
    presets, the last one winning without a word. Refused here, naming the presets."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    for override in OverridesParser.create().parse_overrides(overrides):
        group = override.key_or_group
        if (override.is_delete() or override.is_sweep_override() or isinstance(override.value(), str)
                or not hydra.config_loader.repository.group_exists(group)):
            continue
        presets = ", ".join(hydra.config_loader.get_group_options(group))
        raise HydraException(f"{override.input_line}: {group} takes the name of one preset ({presets})")


if __name__ == "__main__":
    # from the start to the run's (or the sweep's) end; fit puts its own in place while it trains
    signal.signal(signal.SIGTERM, stop_outside_training)
    try:
        check_overrides(sys.argv[1:])
        sys.argv = sys.argv[:1] + sweep_record_on_rank_zero(sys.argv[1:])
        launcher_log_on_rank_zero()
        launch()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)   # a sweep's stop_outside_training: the sweep is over
    except SystemExit:
        # a job that stopped the sweep (a full disk, SIGTERM, Ctrl-C) has said why; the jobs that
        # failed or diverged before it are named all the same, and its exit status stands
        say_earlier_jobs()
        raise
    except KeyboardInterrupt:
        # Ctrl-C outside a job's training, which launch() reports itself: Hydra would print a
        # traceback, and a sweep would end without saying how to continue it
        if speaks_for_node():
            print(f"\npretrain.py: interrupted {before_training()}", file=sys.stderr, flush=True)
        say_earlier_jobs()
        sys.exit(EXIT_INTERRUPTED)
    except SigtermOutsideTraining:   # nothing in training to save: said as fit's stop is, then the same exit
        say_once_per_node(f"stopped by SIGTERM {before_training()}")
        say_earlier_jobs()
        sys.exit(EXIT_STOPPED)
    from hrm.distributed import shutdown
    shutdown(wait_for_peers=True)   # a sweep's process group, kept across its jobs (no-op otherwise)
    say_earlier_jobs()
    if failed_jobs or diverged_jobs:
        sys.exit(1 if failed_jobs else EXIT_DIVERGED)
