"""Train HRM on an arc-aug build.

  python pretrain.py arch=hrm_tiny data_path=data/arc-aug-16 epochs=400 eval_interval=100   # one process
  torchrun --nproc-per-node 8 pretrain.py arch=hrm_deeploop                                  # 8 GPUs
  python pretrain.py ... resume=latest run_name=my-run                                       # continue a run

Config: configs/cfg_pretrain.yaml and configs/arch/*.yaml; any field can be overridden as key=value.
Exit codes: 0 done, 2 bad config, 3 diverged (non-finite loss or gradient).

A Hydra sweep (`python pretrain.py -m arch=hrm_tiny arch.scaling.p=0.3,0.5,0.7`, or
`hydra.sweeper.params` in a config) runs its jobs one after the other. Each job's run name ends in
its swept values: `<arch>-<time>-arch.scaling.p=0.3` by default, `<run_name>-arch.scaling.p=0.3` with
run_name, `<checkpoint_path>/arch.scaling.p=0.3` with checkpoint_path (so `resume=latest` continues
every job's own run, and starts afresh a job without a checkpoint). A diverged job is recorded
(diverged.json) without stopping the others; the sweep exits 3 at the end. Under torchrun the jobs
share one process group.
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError

from hrm.pretrain_config import PretrainConfig, format_validation_error

EXIT_BAD_CONFIG, EXIT_DIVERGED = 2, 3
diverged_jobs: list[str] = []   # a multirun's diverged runs, for its exit status


def swept_keys(argv: list[str]) -> set[str]:
    """The keys a command line sweeps (`p=0.3,0.5`, `lr=range(1,3)`, `+x=choice(a,b)`), read with
    Hydra's own argument parser (flags such as `--config-name NAME` are not overrides)."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    overrides = get_args_parser().parse_known_args(argv)[0].overrides
    return {o.key_or_group for o in OverridesParser.create().parse_overrides(overrides) if o.is_sweep_override()}


def is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    return HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_tag() -> str:
    """In a multirun (-m), this job's values of the swept keys (`arch.scaling.p=0.3`), swept on the
    command line or in `hydra.sweeper.params`, for its run name; '' otherwise. '/' becomes '_': the
    tag is one folder name."""
    from hydra.core.hydra_config import HydraConfig
    if not is_multirun():
        return ""
    hydra_config = HydraConfig.get()
    swept = swept_keys(sys.argv[1:]) | set(OmegaConf.select(hydra_config, "sweeper.params", default=None) or {})
    job = [o for o in hydra_config.overrides.task if o.split("=", 1)[0].lstrip("+~") in swept]
    return ",".join(job).replace("/", "_")


@hydra.main(config_path="configs", config_name="cfg_pretrain", version_base=None)
def launch(hydra_config: DictConfig) -> None:
    try:
        config = PretrainConfig(**OmegaConf.to_container(hydra_config, resolve=True))
    except ValidationError as e:
        print(format_validation_error(e), file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)

    from hrm.distributed import init_distributed, shutdown
    from hrm.train import Trainer, TrainingDiverged

    try:
        info = init_distributed(config.device)
    except RuntimeError as e:   # device=cuda without CUDA
        print(f"pretrain.py: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    finished = False
    tag = sweep_tag()
    try:
        if tag and config.resume == "latest" and (config.checkpoint_path or config.run_name):
            config = fresh_if_nothing_to_resume(config, info, tag)
        try:
            trainer = Trainer(config, info, run_tag=tag)
        except (ValueError, FileNotFoundError) as e:
            print(f"pretrain.py: error: {e}", file=sys.stderr)
            sys.exit(EXIT_BAD_CONFIG)
        summary = trainer.fit()
        if info.is_main:
            print(f"done: step {summary['step']}, {summary['steps_per_second']:.2f} steps/s, "
                  f"checkpoints in {trainer.run_dir}", flush=True)
        finished = True
    except TrainingDiverged as e:
        print(f"pretrain.py: error: {e}", file=sys.stderr)
        if not is_multirun():
            sys.exit(EXIT_DIVERGED)
        diverged_jobs.append(trainer.run_name)   # a sweep goes on with its next job
        finished = True
    finally:
        # A sweep keeps its process group for the next job: a group destroyed and made again on
        # the same torchrun store can deadlock its first collective (PyTorch reuses the store keys).
        if not (is_multirun() and finished):
            shutdown(wait_for_peers=finished)


def fresh_if_nothing_to_resume(config: PretrainConfig, info, tag: str) -> PretrainConfig:
    """`resume=latest` over a sweep: a job whose run has no checkpoint (it diverged or was killed
    before its first one, or never ran) starts afresh instead of stopping the sweep."""
    from hrm.train import run_names
    from hrm.train_checkpoint import list_checkpoints
    run_dir = run_names(config, info, tag)[2]
    if list_checkpoints(run_dir):
        return config
    if info.is_main:
        print(f"pretrain.py: nothing to resume in {run_dir}: this job of the sweep starts afresh", flush=True)
    return config.model_copy(update={"resume": None})


def check_overrides(args: list[str]) -> None:
    """Compose the config once before Hydra does: an unknown key (`arch.hidden_sz=3`), preset
    (`arch=hrm_big`) or a malformed override then exits with EXIT_BAD_CONFIG and Hydra's message
    naming it, like every other bad config (Hydra alone would exit 1, as for a crash). Hydra's own
    flags and `hydra.*` settings are left to it."""
    if any(a.startswith("-") or a.startswith("hydra.") or a.startswith("hydra/") for a in args):
        return
    from pathlib import Path
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    try:
        with initialize_config_dir(config_dir=str(Path(__file__).resolve().parent / "configs"), version_base=None):
            compose("cfg_pretrain", overrides=args)
    except (HydraException, OmegaConfBaseException) as e:
        print(f"pretrain.py: invalid config: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)


if __name__ == "__main__":
    check_overrides(sys.argv[1:])
    launch()
    from hrm.distributed import shutdown
    shutdown(wait_for_peers=True)   # a sweep's process group, kept across its jobs (no-op otherwise)
    if diverged_jobs:
        print(f"pretrain.py: {len(diverged_jobs)} run(s) of the sweep diverged: {', '.join(diverged_jobs)}",
              file=sys.stderr)
        sys.exit(EXIT_DIVERGED)
