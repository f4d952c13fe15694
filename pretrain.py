"""Train HRM on an arc-aug build.

  python pretrain.py arch=hrm_tiny data_path=data/arc-aug-16 epochs=400 eval_interval=100   # one process
  torchrun --nproc-per-node 8 pretrain.py arch=hrm_deeploop                                  # 8 GPUs
  python pretrain.py ... resume=latest run_name=my-run                                       # continue a run

Config: configs/cfg_pretrain.yaml and configs/arch/*.yaml; any field can be overridden as key=value.
Exit codes: 0 done, 2 bad config, 3 diverged (non-finite loss or gradient).
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf
from pydantic import ValidationError

from hrm.pretrain_config import PretrainConfig, format_validation_error

EXIT_BAD_CONFIG, EXIT_DIVERGED = 2, 3


@hydra.main(config_path="configs", config_name="cfg_pretrain", version_base=None)
def launch(hydra_config: DictConfig) -> None:
    try:
        config = PretrainConfig(**OmegaConf.to_container(hydra_config, resolve=True))
    except ValidationError as e:
        print(format_validation_error(e), file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)

    from hrm.distributed import init_distributed, shutdown
    from hrm.train import Trainer, TrainingDiverged

    info = init_distributed(config.device)
    finished = False
    try:
        try:
            trainer = Trainer(config, info)
        except (ValueError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(EXIT_BAD_CONFIG)
        summary = trainer.fit()
        if info.is_main:
            print(f"done: step {summary['step']}, {summary['steps_per_second']:.2f} steps/s, "
                  f"checkpoints in {trainer.run_dir}", flush=True)
        finished = True
    except TrainingDiverged as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_DIVERGED)
    finally:
        shutdown(wait_for_peers=finished)


if __name__ == "__main__":
    launch()
