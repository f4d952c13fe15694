"""Run by tests/test_train.py under torchrun: train with the given overrides, then save this rank's
weights (model parameters and buffers, the puzzle table included) to <out>/weights_rank<r>.pt."""
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hrm.distributed import init_distributed, shutdown  # noqa: E402
from hrm.pretrain_config import PretrainConfig  # noqa: E402
from hrm.train import Trainer  # noqa: E402

out = Path(sys.argv[1])
with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
    raw = OmegaConf.to_container(compose("cfg_pretrain", overrides=sys.argv[2:]), resolve=True)
info = init_distributed("cpu")
trainer = Trainer(PretrainConfig(**raw), info, progress=False)
trainer.fit()
torch.save({k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, out / f"weights_rank{info.rank}.pt")
shutdown(wait_for_peers=True)
