"""Train HRM on an arc-aug build.

  python pretrain.py arch=hrm_tiny data_path=data/arc-aug-16 epochs=400 eval_interval=100   # one process
  torchrun --nproc-per-node 8 pretrain.py arch=hrm_deeploop                                  # 8 GPUs
  python pretrain.py ... resume=latest run_name=my-run                                       # continue a run

Config: configs/cfg_pretrain.yaml and configs/arch/*.yaml; any field can be overridden as key=value.
Exit codes: 0 done, 2 bad config, 3 diverged (non-finite loss or gradient).

A Hydra sweep (`python pretrain.py -m arch=hrm_tiny arch.scaling.p=0.3,0.5,0.7`) runs its jobs one
after the other; each default run name ends in the values swept (`...-arch.scaling.p=0.3`), and a
diverged job is recorded (diverged.json) without stopping the others: the sweep exits 3 at the end.
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError

from hrm.pretrain_config import PretrainConfig, format_validation_error

EXIT_BAD_CONFIG, EXIT_DIVERGED = 2, 3
diverged_jobs: list[str] = []   # a multirun's diverged runs, for its exit status


def swept_keys(args: list[str]) -> set[str]:
    """The keys a command line sweeps (`p=0.3,0.5`, `lr=range(1,3)`, `+x=choice(a,b)`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    overrides = OverridesParser.create().parse_overrides([a for a in args if not a.startswith("-")])
    return {o.key_or_group for o in overrides if o.is_sweep_override()}


def sweep_tag() -> str:
    """In a multirun (-m), this job's values of the swept keys (`arch.scaling.p=0.3`), for its run
    name; '' in a single run. '/' becomes '_': a run name is one folder."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    hydra_config = HydraConfig.get()
    if hydra_config.mode != RunMode.MULTIRUN:
        return ""
    swept = swept_keys(sys.argv[1:])
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
    try:
        try:
            trainer = Trainer(config, info, run_tag=sweep_tag())
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
        if not sweep_tag():
            sys.exit(EXIT_DIVERGED)
        diverged_jobs.append(trainer.run_name)   # a sweep goes on with its next job
    finally:
        shutdown(wait_for_peers=finished)


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
    if diverged_jobs:
        print(f"pretrain.py: {len(diverged_jobs)} run(s) of the sweep diverged: {', '.join(diverged_jobs)}",
              file=sys.stderr)
        sys.exit(EXIT_DIVERGED)
