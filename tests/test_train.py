"""The trainer: config validation, lr schedule, learning on real data, predictions, divergence guard,
exact resume after SIGKILL, and 2-process gloo training equal to 1-process training."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

from conftest import MICRO_ARCH, ROOT, read_only, together
from hrm.distributed import DistInfo
from hrm.pretrain_config import PretrainConfig
from hrm.schedule import lr_at
from hrm.sigterm import TrainingStopped
from hrm.train import Trainer, TrainingDiverged

CPU = DistInfo(0, 1, 0, torch.device("cpu"))


def micro_config(data: Path, run_dir: Path, **overrides) -> PretrainConfig:
    fields = dict(arch=MICRO_ARCH, data_path=str(data), global_batch_size=8, epochs=100, eval_interval=100,
                  lr=1e-3, lr_warmup_steps=2, max_steps=6, checkpoint_path=str(run_dir), seed=3)
    fields.update(overrides)
    return PretrainConfig(**fields)


def compose(*overrides: str) -> dict:
    from hydra import compose as hydra_compose, initialize_config_dir
    from omegaconf import OmegaConf
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return OmegaConf.to_container(hydra_compose("cfg_pretrain", overrides=list(overrides)), resolve=True)


def test_lr_schedule_hand_values():
    assert lr_at(0, 1.0, 10, 110, 0.1) == 0.0
    assert lr_at(5, 1.0, 10, 110, 0.1) == 0.5
    assert lr_at(10, 1.0, 10, 110, 0.1) == pytest.approx(1.0)
    assert lr_at(60, 1.0, 10, 110, 0.1) == pytest.approx(0.1 + 0.9 * 0.5)  # half way down the cosine
    assert lr_at(110, 1.0, 10, 110, 0.1) == pytest.approx(0.1)
    assert lr_at(160, 1.0, 10, 110, 0.1) == pytest.approx(0.1)    # past the end: stays down (was 0.55)
    assert lr_at(500, 1e-4, 2000, 10_000, 1.0) == pytest.approx(2.5e-5)  # HRM: warmup, then constant
    assert lr_at(9000, 1e-4, 2000, 10_000, 1.0) == pytest.approx(1e-4)


def test_presets_compose_and_overrides_reach_the_model(small_build):
    for arch in ("hrm_v1", "hrm_deeploop", "hrm_deepnorm", "hrm_tiny"):
        cfg = PretrainConfig(**compose(f"arch={arch}", f"data_path={small_build}"))
        assert cfg.arch.name == arch
    cfg = PretrainConfig(**compose("arch=hrm_deeploop", f"data_path={small_build}", "arch.L_cycles=3",
                                   "arch.scaling.H.p=0.25", "lr=3e-4"))
    assert (cfg.arch.L_cycles, cfg.arch.scaling.H.p, cfg.lr) == (3, 0.25, 3e-4)
    # inf is refused everywhere but in grad_clip, where it means what null does (no clipping)
    assert PretrainConfig(**compose(f"data_path={small_build}", "grad_clip=inf")).grad_clip == math.inf
    defaults = PretrainConfig(**compose(f"data_path={small_build}"))
    assert (defaults.global_batch_size, defaults.lr, defaults.lr_warmup_steps, defaults.lr_min_ratio) == (768, 1e-4, 2000, 1.0)
    assert (defaults.beta1, defaults.beta2, defaults.weight_decay, defaults.puzzle_emb_lr) == (0.9, 0.95, 0.1, 1e-2)
    assert (defaults.epochs, defaults.eval_interval, defaults.arch.hidden_size, defaults.arch.halt_max_steps) == (100000, 10000, 512, 16)


def test_python_defaults_are_the_config_files():
    """A PretrainConfig built in Python gets cfg_pretrain.yaml's value for every field it leaves out,
    or must name the field: lr_warmup_steps defaulted to 0 (the YAML: 2000) and eval_interval to
    null (10000), so the same recipe trained differently from a notebook than from pretrain.py."""
    from pydantic import BaseModel
    composed = compose()
    for name, field in PretrainConfig.model_fields.items():
        if not field.is_required():
            default = field.get_default(call_default_factory=True)
            default = default.model_dump() if isinstance(default, BaseModel) else default
            assert default == composed[name], name
    required = {name for name, field in PretrainConfig.model_fields.items() if field.is_required()}
    assert {"lr_warmup_steps", "eval_interval"} <= required <= set(composed)


@pytest.mark.parametrize("overrides, field", [
    (["lr=-1"], "lr"),
    (["arch.scaling.rule=magic"], "arch.scaling.rule"),
    (["+warmup=3"], "warmup"),
    (["data_path=/nonexistent/build"], "data_path"),
    (["eval_interval=7"], "eval_interval"),           # a check across fields (epochs) names its own
    (["resume=auto"], "resume"),                     # needs run_name: across fields too
    (["grad_accum_steps=0"], "grad_accum_steps"),
    (["weight_decay=inf"], "weight_decay"),          # Hydra reads inf and nan as floats
    (["arch=hrm_deeploop", "arch.scaling.p=nan"], "arch.scaling.p"),
    (["seed=-1"], "seed"),                           # the data order's seed: refused later, by the reader
    (["seed=99999999999999999999"], "seed"),         # torch.manual_seed: "Overflow when unpacking long long"
    (["keep_checkpoints=true"], "keep_checkpoints"),  # pydantic reads true as 1: one checkpoint kept
    (["arch.forward_dtype=float16"], "arch.forward_dtype"),  # no loss scaling: gradients would underflow
    (["run_name=../../escape"], "run_name"),         # a run folder outside checkpoints/
    (["run_name=a/b"], "run_name"),                  # nested folders
    (["project_name=.."], "project_name"),
    (["arch.name=x/y"], "arch.name"),                # names the default run: <arch>-<time>
    (["lr_min_ratio=1.5"], "lr_min_ratio"),          # the cosine would climb to 1.5 * lr, not decay
    (["beta2=1.0"], "beta2"),                        # v would never take a gradient in: AdamATan2 refuses it later
    (["grad_clip=0"], "grad_clip"),                  # every gradient scaled to 0: nothing would train
])
def test_bad_config_names_the_field(small_build, overrides, field):
    from pydantic import ValidationError
    from hrm.pretrain_config import format_validation_error
    raw = compose(f"data_path={small_build}", *overrides)
    with pytest.raises(ValidationError) as err:
        PretrainConfig(**raw)
    message = format_validation_error(err.value)
    assert f"  {field}:" in message, message


def test_a_key_mistyped_in_a_config_file_gets_the_nearest_known_ones(small_build):
    """A config file of one's own with `arch.hiden_size`, `wandb.mdoe`, `arch.scaling.lamda`: Hydra
    merges them unchecked and pydantic said only "Extra inputs are not permitted", where the same
    key on the command line gets "Did you mean arch.hidden_size?"."""
    from pydantic import ValidationError
    from hrm.pretrain_config import format_validation_error
    raw = compose(f"data_path={small_build}")
    raw["arch"]["hiden_size"] = 32
    raw["wandb"]["mdoe"] = "disabled"
    raw["arch"]["scaling"]["lamda"] = 2
    raw["completely_other"] = 1
    with pytest.raises(ValidationError) as err:
        PretrainConfig(**raw)
    lines = format_validation_error(err.value).splitlines()[1:]
    assert sorted(lines) == [
        "  arch.hiden_size: Extra inputs are not permitted (got 32); did you mean arch.hidden_size?",
        "  arch.scaling.lamda: Extra inputs are not permitted (got 2); did you mean arch.scaling.lambda or "
        "arch.scaling.L.lambda or arch.scaling.H.lambda?",
        "  completely_other: Extra inputs are not permitted (got 1)",
        "  wandb.mdoe: Extra inputs are not permitted (got 'disabled'); did you mean wandb.mode?"]


def test_every_number_field_of_the_training_config_refuses_true(small_build, tmp_path):
    """refuse_bool names PretrainConfig's fields by hand: one added later without it would read true
    as 1 (keep_checkpoints=true kept one checkpoint)."""
    from pydantic import ValidationError
    from test_model_config import number_fields
    fields = number_fields(PretrainConfig)
    assert "keep_checkpoints" in fields and "grad_clip" in fields
    for name in fields:
        with pytest.raises(ValidationError, match=f"{name} takes a number, not true"):
            micro_config(small_build, tmp_path, **{name: True})
    with pytest.raises(ValidationError, match="eval_pass_k takes numbers, not true"):   # it read as K=1
        micro_config(small_build, tmp_path, eval_pass_k=[2, True])


def test_names_hydra_reads_as_numbers_are_the_names_typed(small_build, tmp_path):
    """`run_name=123` reaches the config as the integer 123 (refused as not text, and joined to a
    path by resume=latest before validation: a TypeError); it is the name typed. A float is not
    (1e3 comes as 1000.0), so it is refused with the way out."""
    from hrm.pretrain_config import numbers_as_text
    raw = numbers_as_text(compose(f"data_path={small_build}", "run_name=123", "project_name=2024",
                                  "wandb.entity=42", "arch.name=7"))
    cfg = PretrainConfig(**raw)
    assert (cfg.run_name, cfg.project_name, cfg.wandb.entity, cfg.arch.name) == ("123", "2024", "42", "7")
    assert numbers_as_text(compose(f"data_path={small_build}", "run_name=abc"))["run_name"] == "abc"
    with pytest.raises(ValueError, match=r"run_name=1000.0: Hydra read it as a number, and a name is text; quote it"):
        numbers_as_text(compose(f"data_path={small_build}", "run_name=1e3"))


def test_names_hydra_reads_as_true_false_lists_or_dicts_are_refused_naming_the_field(small_build):
    """`resume=true` was joined to a path before validation (a TypeError traceback); true/false, a
    list or a dict in any text field is refused in one line naming it."""
    from hrm.pretrain_config import numbers_as_text
    for override, said in [("resume=true", "resume=true: Hydra read it as true/false"),
                           ("run_name=false", "run_name=false: Hydra read it as true/false"),
                           ("checkpoint_path=true", "checkpoint_path=true: Hydra read it as true/false"),
                           ("project_name=[p]", r"project_name=\['p'\]: a name or path is text, not a list"),
                           ("wandb.entity={a:1}", r"wandb.entity=\{'a': 1\}: a name or path is text, not a dict")]:
        with pytest.raises(ValueError, match=said):
            numbers_as_text(compose(f"data_path={small_build}", override))
    raw = numbers_as_text(compose(f"data_path={small_build}", "run_name='true'"))   # quoted: the text
    assert raw["run_name"] == "true"


def test_run_and_project_names_with_a_slash_are_labels_beside_checkpoint_path(small_build, tmp_path):
    """With checkpoint_path the run's folder is given, and run_name/project_name only label it."""
    cfg = PretrainConfig(**compose(f"data_path={small_build}", "run_name=a/b", "project_name=p/q",
                                   f"checkpoint_path={tmp_path / 'run'}"))
    assert (cfg.run_name, cfg.project_name) == ("a/b", "p/q")


def test_batch_not_divisible_by_world_size_is_refused(small_build, tmp_path):
    cfg = micro_config(small_build, tmp_path, global_batch_size=9)
    with pytest.raises(ValueError, match="global_batch_size=9 is not divisible by the world size 2"):
        cfg.check_world_size(2)
    cfg = micro_config(small_build, tmp_path, global_batch_size=8, grad_accum_steps=3)
    with pytest.raises(ValueError, match="not divisible by the world size 2 times grad_accum_steps=3"):
        cfg.check_world_size(2)


def test_a_preset_copied_without_renaming_it_is_noted(tmp_path, capsys):
    """configs/arch/my_arch.yaml copied from hrm_tiny.yaml keeps `name: hrm_tiny`, which names its
    runs: pretrain.py says so, unless the name matches the file or arch.name= is given."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from pretrain import note_a_preset_named_otherwise
    (tmp_path / "arch").mkdir()
    (tmp_path / "arch" / "my_arch.yaml").write_text((ROOT / "configs" / "arch" / "hrm_tiny.yaml").read_text())
    said = []
    try:
        for overrides in (["arch=my_arch"], ["arch=my_arch", "arch.name=mine"], ["arch=hrm_tiny"]):
            with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
                config = hydra_compose("cfg_pretrain", overrides=[*overrides, f"hydra.searchpath=[file://{tmp_path}]"],
                                       return_hydra_config=True)
                HydraConfig.instance().set_config(config)     # as Hydra does for a job
                note_a_preset_named_otherwise(config.arch.name)
            said.append(capsys.readouterr().err)
    finally:
        HydraConfig.instance().cfg = None     # the other tests run outside any Hydra job
    assert said[0] == ("pretrain.py: note: the arch preset my_arch says `name: hrm_tiny`, so its runs are named and "
                       "logged as hrm_tiny; edit that line (or pass arch.name=...) to name them after it\n")
    assert said[1:] == ["", ""]


def test_cli_rejects_bad_config_before_any_work(small_build, tmp_path, capsys):
    def cli(bad: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "pretrain.py"), *bad.split(), f"data_path={small_build}",
                               f"checkpoint_path={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True)
    bad_lr, bad_device = together(lambda: cli("lr=-1"),
                                  lambda: cli("device=cuda" if not torch.cuda.is_available() else "device=tpu"))
    assert bad_lr.returncode == 2 and "lr:" in bad_lr.stderr and "greater than or equal to 0" in bad_lr.stderr
    assert bad_device.returncode == 2 and "device" in bad_device.stderr and "Traceback" not in bad_device.stderr
    assert not (tmp_path / "run").exists()
    # with Hydra's flags and hydra.* overrides too, as Hydra composes them (Hydra alone exits 1):
    # pretrain.py checks them before Hydra runs (check_overrides), here in this process
    import pretrain
    cases = (("arch.hidden_sz=3", "no such key: 'arch.hidden_sz'. Did you mean arch.hidden_size?"),
             # inside a dict value: the unknown key, not the one overridden (which exists)
             ("arch.scaling.H={q:0.3}", "no such key: 'arch.scaling.H.q'. Did you mean arch.scaling.H.p"),
             ("arch=hrm_huge", "hrm_huge"), ("lr", "lr"),
             ("-m lr=1e-3,1e-2 arch.hidden_sz=3", "hidden_sz"), ("--config-name cfg_pretrian", "cfg_pretrian"),
             ("hydra.job.chdir=false arch=hrm_huge", "hrm_huge"), ("--config-dir nowhere", "nowhere"),
             # a preset group given no name (Hydra: a traceback, exit 1) or a list (the last preset, silently)
             ("arch=0", "arch=0: arch takes the name of one preset (hrm_deeploop, "),
             ("arch=null", "arch=null: arch takes the name of one preset"),
             ("arch=[hrm_tiny,hrm_deeploop]", "arch=[hrm_tiny,hrm_deeploop]: arch takes the name of one preset"))
    for bad, named in cases:
        with pytest.raises(SystemExit) as stopped:
            pretrain.check_overrides([*bad.split(), f"data_path={small_build}", f"checkpoint_path={tmp_path / 'run'}"])
        said = capsys.readouterr().err
        assert stopped.value.code == 2 and said.startswith("pretrain.py: invalid config: ") and named in said, \
            (bad, said)
    pretrain.check_overrides([f"data_path={small_build}", "arch=hrm_tiny", "-m", "lr=1e-3,1e-2"])   # good: passes
    pretrain.check_overrides([f"data_path={small_build}", "-m", "arch=hrm_tiny,hrm_deeploop"])      # a sweep of presets
    assert not (tmp_path / "run").exists()


def test_loss_falls_and_evaluation_writes_predictions(small_build, tmp_path):
    # 12 steps: the loss falls by ~0.7 (mean of the last 6 against the first 6), well over the margin
    cfg = micro_config(small_build, tmp_path / "run", max_steps=12, lr=3e-3, lr_warmup_steps=3)
    trainer = Trainer(cfg, CPU, progress=False)
    summary = trainer.fit()
    losses = [loss for _, loss in trainer.history]
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses)
    assert np.mean(losses[-6:]) < np.mean(losses[:6]) - 0.3, losses
    # predictions for voting: every test row once (plus padding), in the contract's dtypes
    pred_dir = tmp_path / "run" / "predictions" / "step_12"
    info = json.loads((pred_dir / "info.json").read_text())
    assert info["data_path"] == str(small_build.resolve()) and info["step"] == 12 and info["world_size"] == 1
    with np.load(pred_dir / "rank_0.npz") as f:
        arrays = {k: f[k] for k in f.files}
    test_ids = np.load(small_build / "test" / "all__puzzle_identifiers.npy")
    test_idx = np.load(small_build / "test" / "all__puzzle_indices.npy")
    real = arrays["puzzle_identifiers"] != 0
    assert arrays["puzzle_identifiers"].dtype == np.int32 and arrays["q_halt_logits"].dtype == np.float32
    assert arrays["inputs"].dtype == arrays["preds"].dtype == np.uint8 and arrays["preds"].shape[1] == 900
    assert np.array_equal(arrays["puzzle_identifiers"][real], np.repeat(test_ids, np.diff(test_idx)))
    assert np.array_equal(arrays["inputs"][real], np.load(small_build / "test" / "all__inputs.npy"))
    assert summary["eval"]["count"] == real.sum()
    # the run folder: log, resolved config, a final checkpoint with the derived scaling
    assert (tmp_path / "run" / "all_config.yaml").is_file()
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert log[0]["scaling/H/alpha"] == pytest.approx(math.sqrt(6))  # M_g = 2 * (1 + 2 * 1) = 6
    assert any("eval/exact_accuracy" in r for r in log)
    # both optimizers' lr, each on the schedule from its own base (the puzzle rows' was not logged)
    steps = [r for r in log if "train/loss" in r]
    for r in steps:
        for key, base in (("train/lr", cfg.lr), ("train/puzzle_emb_lr", cfg.puzzle_emb_lr)):
            assert r[key] == pytest.approx(lr_at(r["step"], base, 3, trainer.total_steps, cfg.lr_min_ratio)), key
    assert steps[-1]["train/puzzle_emb_lr"] == pytest.approx(cfg.puzzle_emb_lr) != cfg.lr   # past the warmup
    trainer_state = torch.load(tmp_path / "run" / "step_12" / "trainer.pt", weights_only=True)
    assert trainer_state["scaling"]["L"]["alpha"] == pytest.approx(math.sqrt(6))


def test_a_fresh_run_refuses_a_folder_with_checkpoints(tiny_build, tmp_path):
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False).fit()
    with pytest.raises(ValueError, match="already holds checkpoints .step_1.; pass resume=latest"):
        Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=2), CPU, progress=False)
    resumed = Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=2, resume="latest"), CPU, progress=False)
    assert resumed.step == 1


def test_a_run_folder_in_use_by_another_training_is_refused_until_it_ends(tiny_build, tmp_path):
    """The same run started twice (a command launched again, a requeued job): the second start is
    refused while the first trains, instead of both overwriting each other's checkpoints and log;
    once the first has ended, resume=latest continues it."""
    in_use = f"{tmp_path / 'run'} is in use: pid {os.getpid()} on .* is training into it"
    first = Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False)
    with pytest.raises(ValueError, match=in_use):
        Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".lock", "all_config.yaml", "log.jsonl"]
    first.fit()
    second = Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=2, resume="latest"), CPU, progress=False)
    assert second.step == 1
    with pytest.raises(ValueError, match=in_use):       # and a resumed run holds it as a fresh one does
        Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=3, resume="latest"), CPU, progress=False)
    second.fit()
    assert Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=3, resume="latest"), CPU,
                   progress=False).step == 2


def test_a_resume_of_a_run_in_progress_is_refused_before_reading_its_checkpoint(tiny_build, tmp_path,
                                                                                  monkeypatch):
    """A requeued job while the first still trains: refused as in use before the checkpoint is read
    (the live run may be pruning it, which would surface as a damaged file instead)."""
    import hrm.train
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False).fit()
    live = Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=2, resume="latest"), CPU, progress=False)

    def pruned(*args, **kwargs):
        raise FileNotFoundError("step_1/model.pt vanished")
    monkeypatch.setattr(hrm.train, "load_checkpoint", pruned)
    with pytest.raises(ValueError, match="is in use"):
        Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=2, resume="latest"), CPU, progress=False)
    assert live.run_lock is not None


def test_a_requeue_of_a_run_that_has_not_saved_yet_is_refused_as_in_use(small_build, tmp_path):
    """resume=latest into a named run folder whose live run has no checkpoint yet: refused as in
    use (the folder is taken before its `latest` is looked for), not as 'no checkpoint under'."""
    live = Trainer(micro_config(small_build, tmp_path / "run", max_steps=1), CPU, progress=False)
    with pytest.raises(ValueError, match="is in use"):
        Trainer(micro_config(small_build, tmp_path / "run", max_steps=1, resume="latest"), CPU, progress=False)
    live.release_run_lock()
    with pytest.raises(FileNotFoundError, match="no checkpoint under"):     # nobody in it: nothing to resume
        Trainer(micro_config(small_build, tmp_path / "run", max_steps=1, resume="latest"), CPU, progress=False)
    with pytest.raises(FileNotFoundError, match="no checkpoint under"):     # and a refusal leaves no folder
        Trainer(micro_config(small_build, tmp_path / "new" / "run", max_steps=1, resume="latest"), CPU,
                progress=False)
    assert not (tmp_path / "new").exists()


def test_a_start_that_fails_after_its_checks_frees_the_run_folder(tiny_build, tmp_path, monkeypatch):
    """The log (W&B, say) failing to open after every check passed: an in-process caller that
    catches the error can start the run again; the folder is not left held."""
    import hrm.train

    def unreachable(*args, **kwargs):
        raise OSError("wandb: network unreachable")
    with monkeypatch.context() as patch:
        patch.setattr(hrm.train, "RunLog", unreachable)
        # refused as every rank's start-up checks are (test_a_run_that_rank_zero_cannot_open_...)
        with pytest.raises(ValueError, match="network unreachable") as failed:   # kept, as a caller's handler
            Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False)
    assert isinstance(failed.value.__cause__, OSError)
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False).fit()
    assert failed.traceback     # the failed Trainer was still referenced (by its frames) throughout


def test_a_run_folder_blocked_by_a_file_is_refused_at_start_up(small_build, tmp_path):
    """checkpoint_path at a file, or under one: a start-up refusal naming the file (exit 2 in
    pretrain.py), not mkdir's traceback once the model is built; a branch's folder too."""
    (tmp_path / "a_file").write_text("not a folder")
    for run_dir in (tmp_path / "a_file", tmp_path / "a_file" / "run"):
        with pytest.raises(ValueError, match=f"{tmp_path / 'a_file'}, which is not a folder"):
            Trainer(micro_config(small_build, run_dir, max_steps=1), CPU, progress=False)
    (tmp_path / "run" / "step_1").mkdir(parents=True)    # the folder is refused before the file is read
    (tmp_path / "run" / "step_1" / "trainer.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="which is not a folder"):
        Trainer(micro_config(small_build, tmp_path / "a_file" / "branch", resume=str(tmp_path / "run")), CPU,
                progress=False)


def test_a_run_folder_that_cannot_be_written_is_refused_at_start_up(tiny_build, tmp_path):
    """A read-only run folder (or parent, or log.jsonl): a start-up refusal naming it (exit 2 in
    pretrain.py), not a traceback at the first save after hours of steps; the folder stays usable."""
    run = tmp_path / "run"
    Trainer(micro_config(tiny_build, run, max_steps=1), CPU, progress=False).fit()
    refused = f"cannot write into the run folder {run} .*make it writable, or choose another checkpoint_path"
    for unwritable in (run, run / "log.jsonl"):
        with read_only(unwritable):
            with pytest.raises(ValueError, match=refused):
                Trainer(micro_config(tiny_build, run, max_steps=2, resume="latest"), CPU, progress=False)
    with read_only(tmp_path):
        with pytest.raises(ValueError, match=f"cannot write into the run folder {tmp_path / 'new'}"):
            Trainer(micro_config(tiny_build, tmp_path / "new", max_steps=1), CPU, progress=False)
    assert not (tmp_path / "new").exists()
    resumed = Trainer(micro_config(tiny_build, run, max_steps=2, resume="latest"), CPU, progress=False)
    assert resumed.step == 1 and not list(run.glob(".write_probe*"))


def test_a_run_resumed_without_run_name_keeps_the_name_it_started_with(tiny_build, tmp_path, monkeypatch):
    """checkpoint_path= without run_name names a run `<arch>-<start time>`, its W&B id: a requeued
    job resuming it keeps that name (one W&B run, not one per requeue); a branch gets its own."""
    import hrm.run_naming
    first = Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False)
    first.fit()
    monkeypatch.setattr(hrm.run_naming, "default_stamp", lambda info, sweep: "20990101-000000")
    for resume in ("latest", str(tmp_path / "run")):
        resumed = Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1, resume=resume), CPU,
                          progress=False)
        assert resumed.run_name == first.run_name != "micro-20990101-000000"
        resumed.fit()
    branch = Trainer(micro_config(tiny_build, tmp_path / "branch", max_steps=2, resume=str(tmp_path / "run")),
                     CPU, progress=False)
    assert branch.run_name.endswith("-20990101-000000")


def test_each_run_has_a_wandb_run_of_its_own_which_every_resume_of_it_continues(tiny_build, tmp_path, monkeypatch):
    """A fresh run under a name used before (its folder deleted and the ablation run again) was
    given the same W&B id with resume="allow": its history was laid over the old run's in one W&B
    run. Now a fresh run or a branch gets a new id (resume="never"), recorded in its checkpoints;
    each resume of the run (latest, its folder, a step of it) continues that W&B run; a
    checkpoint saved before the id was recorded keeps the name's id."""
    import shutil
    import types

    import wandb
    from hrm.run_log import wandb_run_id
    monkeypatch.delenv("WANDB_MODE", raising=False)
    started = []

    def init(**kwargs):   # records what the run asks of W&B; no network, no files
        started.append(kwargs)
        return types.SimpleNamespace(define_metric=lambda *a, **k: None, log=lambda *a, **k: None,
                                     finish=lambda: None)
    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.chdir(tmp_path)
    base = micro_config(tiny_build, tmp_path, checkpoint_path=None, project_name="proj", run_name="ablation,a=1",
                        wandb={"mode": "offline"})
    run = tmp_path / "checkpoints" / "proj" / "ablation,a=1"

    def start(fit=False, **update) -> tuple[str, str]:
        """The W&B run a start logs to (id, resume): W&B starts with the Trainer; `fit` to save a checkpoint."""
        trainer = Trainer(base.model_copy(update={"max_steps": 1, **update}), CPU, progress=False)
        if fit:
            trainer.fit()
        else:
            trainer.log.close()
            trainer.release_run_lock()
        return started[-1]["id"], started[-1]["resume"]

    first, resume = start(fit=True)
    assert first.startswith("ablation-a=1-") and first != "ablation-a=1" and resume == "never"
    assert torch.load(run / "step_1" / "trainer.pt", weights_only=True)["wandb_id"] == first
    for resume in ("latest", str(run), str(run / "step_1")):   # pretrain.py makes `auto` latest
        assert start(resume=resume) == (first, "allow"), resume
    # without run_name, from the run's folder (a requeued job's checkpoint_path=)
    assert start(run_name=None, checkpoint_path=str(run), resume="latest") == (first, "allow")
    # a branch from it: its own W&B run, recorded for its own resumes
    branch, resume = start(fit=True, run_name="b", resume=str(run / "step_1"))
    assert branch.startswith("b-") and branch != first and resume == "never"
    assert start(run_name="b", resume="latest") == (branch, "allow")
    # the folder deleted and the run started again under its name: another W&B run
    shutil.rmtree(run)
    again, resume = start(fit=True)
    assert again.startswith("ablation-a=1-") and again != first and resume == "never"
    # a checkpoint that predates the recorded id continues the W&B run its name named
    state = torch.load(run / "step_1" / "trainer.pt", weights_only=True)
    del state["wandb_id"]
    torch.save(state, run / "step_1" / "trainer.pt")
    assert start(resume="latest") == (wandb_run_id("ablation,a=1"), "allow")
    # ... also when continued in its folder under another run_name: the name it started with
    assert start(run_name="renamed", checkpoint_path=str(run), resume="latest") == (wandb_run_id("ablation,a=1"),
                                                                                    "allow")


def test_a_save_left_unfinished_by_a_kill_is_removed_when_the_run_continues(tiny_build, tmp_path, capsys):
    """SIGKILL (or a second SIGTERM) during a save leaves `.step_<N>.tmp/`, as big as a checkpoint:
    the resumed run ignores it as a checkpoint and removes it, saying so, even when it will never
    save step N again (another checkpoint_interval)."""
    run = tmp_path / "run"
    Trainer(micro_config(tiny_build, run, max_steps=1), CPU, progress=False).fit()
    (run / ".step_5.tmp").mkdir()
    (run / ".step_5.tmp" / "rank_0.pt.tmp").write_bytes(b"cut short")
    (run / ".latest.tmp").write_text("step_5")
    (run / ".step_1.old").mkdir()            # the old copy of a step being saved again
    capsys.readouterr()
    resumed = Trainer(micro_config(tiny_build, run, max_steps=2, resume="latest"), CPU, progress=False)
    assert resumed.step == 1
    assert f"removed .step_5.tmp, .step_1.old, .latest.tmp from {run}" in capsys.readouterr().out
    assert sorted(p.name for p in run.iterdir() if p.name.endswith((".tmp", ".old"))) == []


def test_a_resave_killed_between_its_renames_is_the_newest_checkpoint(tmp_path):
    """Saving a step again sets `step_N` aside as `.step_N.old`, then renames `.step_N.tmp` (complete
    by then) to `step_N`: a kill between the two leaves no `step_N`. That `.tmp` is the run's newest
    save, found as such without touching the folder (pretrain.py reads it before any lock), and put
    in place by finish_unrenamed_saves; a `.tmp` without `.old` beside it is still a cut-short save."""
    from hrm.train_checkpoint import finish_unrenamed_saves, remove_unfinished_saves
    from hrm.run_folders import list_checkpoints, resolve_resume
    run = tmp_path / "run"
    for name in ("step_1", ".step_2.old", ".step_2.tmp", ".step_3.tmp"):
        (run / name).mkdir(parents=True)
        (run / name / "trainer.pt").write_bytes(name.encode())
    (run / "latest").write_text("step_1")       # a branch's previous save: the pointer is rewritten after the renames
    assert list_checkpoints(run) == [run / "step_1", run / ".step_2.tmp"]
    assert resolve_resume("latest", run) == resolve_resume(str(run), None) == run / ".step_2.tmp"
    assert finish_unrenamed_saves(run) == {run / ".step_2.tmp": run / "step_2"}
    assert (run / "step_2" / "trainer.pt").read_bytes() == b".step_2.tmp"
    assert (run / "latest").read_text() == "step_2" and not (run / ".step_2.old").exists()
    assert remove_unfinished_saves(run) == [".step_3.tmp"]
    assert list_checkpoints(run) == [run / "step_1", run / "step_2"]
    # the old copy left beside a step that is in place (a kill while deleting it) is no checkpoint
    (run / ".step_2.old").mkdir()
    (run / ".step_2.tmp").mkdir()
    (run / ".step_2.tmp" / "trainer.pt").write_bytes(b"")
    assert list_checkpoints(run) == [run / "step_1", run / "step_2"] and finish_unrenamed_saves(run) == {}


def test_a_run_killed_while_saving_a_step_again_resumes_that_save(tiny_build, tmp_path, capsys):
    """A run resumed with resume=auto before its pending evaluation saves that step again; a kill
    between the save's renames left `.step_2.old` and the new, complete `.step_2.tmp`, and no
    `step_2` (keep_checkpoints=1: no other). The next start takes the run's settings from that save,
    resumes it (not afresh) and puts it in place, rather than removing both copies."""
    import shutil

    from hrm.resume_settings import checkpoint_to_resume
    from hrm.sweep import fresh_if_nothing_to_resume
    run = tmp_path / "run"
    Trainer(micro_config(tiny_build, run, max_steps=2, checkpoint_interval=1, keep_checkpoints=1), CPU,
            progress=False).fit()
    assert sorted(p.name for p in run.glob("*step_*")) == ["step_2"]
    shutil.copytree(run / "step_2", run / ".step_2.tmp")
    weights = torch.load(run / ".step_2.tmp" / "model.pt", weights_only=True)
    name = next(k for k, v in weights["state"].items() if v.is_floating_point())
    weights["state"][name] += 1.0       # the new save differs from the copy it replaces
    torch.save(weights, run / ".step_2.tmp" / "model.pt")
    (run / "step_2").rename(run / ".step_2.old")

    again = micro_config(tiny_build, run, max_steps=3, resume="auto")
    assert checkpoint_to_resume(again.model_dump(mode="json", by_alias=True), "") == run / ".step_2.tmp"
    again = fresh_if_nothing_to_resume(again, CPU, "")
    assert again.resume == "latest"
    capsys.readouterr()
    resumed = Trainer(again, CPU, progress=False)
    assert resumed.step == 2
    assert torch.equal(resumed.model.state_dict()[name], weights["state"][name])
    out = capsys.readouterr().out
    assert f"renamed .step_2.tmp to step_2 in {run}" in out and f"resumed from {run / 'step_2'} at step 2" in out
    assert sorted(p.name for p in run.glob("*step_*")) == ["step_2"] and (run / "latest").read_text() == "step_2"
    assert torch.equal(torch.load(run / "step_2" / "model.pt", weights_only=True)["state"][name], weights["state"][name])


def test_resume_takes_a_step_folder_or_a_run_folder(tmp_path):
    from hrm.run_folders import resolve_resume
    run = tmp_path / "run"
    for step in (2, 10):
        (run / f"step_{step}").mkdir(parents=True)
        (run / f"step_{step}" / "trainer.pt").write_bytes(b"")
    (run / "step_11").mkdir()                                   # incomplete: no trainer.pt
    assert resolve_resume(str(run / "step_2"), None) == run / "step_2"
    assert resolve_resume(str(run), None) == run / "step_10"    # a run folder: its newest checkpoint
    (run / "latest").write_text("step_2")
    assert resolve_resume(str(run), None) == run / "step_2"     # ... as `latest` names it
    with pytest.raises(FileNotFoundError, match="no such folder"):
        resolve_resume(str(tmp_path / "nope"), None)
    with pytest.raises(FileNotFoundError, match="neither a checkpoint folder"):
        resolve_resume(str(run / "step_11"), None)
    # without a run folder: run_name is enough (the project follows data_path), not project_name too
    with pytest.raises(ValueError, match=r"needs the run's folder: set run_name \(and project_name when the run's "
                                         r"project is not '<data folder>-hrm'\) or checkpoint_path"):
        resolve_resume("latest", None)
    # a folder of run folders (a sweep's checkpoint_path): the runs are named, with how to continue them
    sweep = tmp_path / "sweep"
    for job in ("lr=0.002", "lr=0.001"):
        (sweep / job / "step_3").mkdir(parents=True)
        (sweep / job / "step_3" / "trainer.pt").write_bytes(b"")
    (sweep / "notes").mkdir()
    hint = (f"; it holds the run folders lr=0.001, lr=0.002 (a project's, or a sweep's checkpoint_path): "
            f"'resume=\"{sweep / 'lr=0.001'}\"' continues one; a sweep's command run again with resume=latest "
            f"continues each of its jobs")
    with pytest.raises(FileNotFoundError) as refused:
        resolve_resume(str(sweep), None)
    assert str(refused.value) == (f"resume={sweep}: neither a checkpoint folder (step_<N>/ with trainer.pt) nor a run "
                                  f"folder holding one{hint}")
    with pytest.raises(FileNotFoundError) as refused:
        resolve_resume("latest", sweep, other_projects=False)
    assert str(refused.value) == f"resume=latest: no checkpoint under {sweep}{hint}"


def test_a_latest_without_its_trainer_pt_resumes_the_checkpoint_before_it(tmp_path):
    """A run resumed from step_2 of its own folder has re-saved step_4 (`latest`), its abandoned
    line's step_6 still there: step_4 without its trainer.pt is not a checkpoint, and resume=latest
    (or the run folder) takes the newest before it, step_3, not the abandoned line's step_6."""
    from hrm.run_folders import resolve_resume
    run = tmp_path / "run"
    for step in (3, 4, 6):
        (run / f"step_{step}").mkdir(parents=True)
        (run / f"step_{step}" / "trainer.pt").write_bytes(b"")
    (run / "latest").write_text("step_4")
    assert resolve_resume("latest", run) == run / "step_4"
    (run / "step_4" / "trainer.pt").unlink()
    assert resolve_resume("latest", run) == run / "step_3"
    assert resolve_resume(str(run), None) == run / "step_3"
    (run / "latest").write_text("step_2")                      # nothing before it: the newest there is
    assert resolve_resume("latest", run) == run / "step_6"


def test_a_missing_step_folder_names_the_run_and_its_last_checkpoints(tmp_path):
    """resume=<run>/step_30 where keep_checkpoints removed step_30 (or a typo): the run's last step
    folders are listed and the run folder, which continues from its newest, suggested."""
    from hrm.run_folders import resolve_resume
    run = tmp_path / "run"
    for step in (10, 20, 40, 50):
        (run / f"step_{step}").mkdir(parents=True)
        (run / f"step_{step}" / "trainer.pt").write_bytes(b"")
    with pytest.raises(FileNotFoundError) as err:
        resolve_resume(str(run / "step_30"), None)
    assert str(err.value) == (f"resume={run / 'step_30'}: no such folder; the run folder {run} holds ..., step_20, "
                              f"step_40, step_50: resume={run} continues from its newest")
    with pytest.raises(FileNotFoundError) as err:      # no run beside it: nothing to suggest
        resolve_resume(str(tmp_path / "elsewhere" / "step_30"), None)
    assert str(err.value) == f"resume={tmp_path / 'elsewhere' / 'step_30'}: no such folder"


def test_resume_latest_that_finds_nothing_names_the_same_run_in_another_project(tmp_path):
    """The project defaults to `<data folder>-hrm`: `resume=latest run_name=X` with data_path set to
    another build looks in another project; the error points at where run X's checkpoints are."""
    from hrm.run_folders import resolve_resume
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "arc-aug-1000-hrm" / "X" / "step_5").mkdir(parents=True)
    (checkpoints / "arc-aug-1000-hrm" / "X" / "step_5" / "trainer.pt").write_bytes(b"")
    (checkpoints / "other-hrm" / "X").mkdir(parents=True)     # same name, no checkpoint: not named
    (checkpoints / "small-hrm" / "X").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as refused:
        resolve_resume("latest", checkpoints / "small-hrm" / "X")
    message = str(refused.value)
    assert f"no checkpoint under {checkpoints / 'small-hrm' / 'X'}" in message
    assert f"another project: {checkpoints / 'arc-aug-1000-hrm' / 'X'} (pass its project_name=" in message
    assert "other-hrm" not in message
    (checkpoints / "small-hrm" / "Y").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as alone:             # nothing elsewhere: no hint
        resolve_resume("latest", checkpoints / "small-hrm" / "Y")
    assert str(alone.value) == f"resume=latest: no checkpoint under {checkpoints / 'small-hrm' / 'Y'}"


def test_resume_latest_with_a_checkpoint_path_names_no_other_project(small_build, tmp_path):
    """checkpoint_path=WORK/lr0.001/p0.300 (a p-sweep cell) with nothing to resume, beside a cell of
    the same name under another lr: it is not 'another project', and project_name would change
    nothing (the folder is checkpoint_path), so no such hint."""
    other = tmp_path / "work" / "lr0.003" / "p0.300"
    (other / "step_4").mkdir(parents=True)
    (other / "step_4" / "trainer.pt").write_bytes(b"")
    mine = tmp_path / "work" / "lr0.001" / "p0.300"
    mine.mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as refused:
        Trainer(micro_config(small_build, mine, resume="latest"), CPU, progress=False)
    assert str(refused.value) == f"resume=latest: no checkpoint under {mine}"


def test_resume_from_another_runs_checkpoint_with_a_run_name_starts_a_branch(tiny_build, tmp_path, monkeypatch):
    """`resume=<run A's step> run_name=B`: B continues from A's checkpoint in its own folder; A is
    left as it was (it used to get B's checkpoints and config). A third run is never mixed in."""
    monkeypatch.chdir(tmp_path)
    base = micro_config(tiny_build, tmp_path, checkpoint_path=None, project_name="proj")
    Trainer(base.model_copy(update={"run_name": "a", "max_steps": 1}), CPU, progress=False).fit()
    a = tmp_path / "checkpoints" / "proj" / "a"
    before = sorted(p.name for p in a.iterdir())
    # an earlier start of the branch crashed before its first checkpoint: its log is kept aside, not
    # continued (its steps would mix with the branch's)
    (tmp_path / "checkpoints" / "proj" / "b").mkdir()
    (tmp_path / "checkpoints" / "proj" / "b" / "log.jsonl").write_text('{"step": 1, "train/loss": 7.0}\n')
    branch = Trainer(base.model_copy(update={"run_name": "b", "max_steps": 2, "resume": str(a / "step_1")}), CPU,
                     progress=False)
    assert branch.step == 1 and branch.run_dir == Path("checkpoints") / "proj" / "b"
    assert (branch.run_dir / "log.earlier-1.jsonl").read_text() == '{"step": 1, "train/loss": 7.0}\n'
    branch.fit()
    assert sorted(p.name for p in a.iterdir()) == before and (a / "latest").read_text() == "step_1"
    assert (tmp_path / "checkpoints" / "proj" / "b" / "latest").read_text() == "step_2"
    with pytest.raises(ValueError, match="already holds checkpoints of its own; pass resume=latest"):
        Trainer(base.model_copy(update={"run_name": "b", "max_steps": 3, "resume": str(a / "step_1")}), CPU,
                progress=False)


def test_divergence_stops_without_touching_the_last_good_checkpoint(small_build, tmp_path):
    cfg = micro_config(small_build, tmp_path / "run", checkpoint_interval=1, keep_checkpoints=0)
    trainer = Trainer(cfg, CPU, progress=False)
    real_step = trainer.step_fn

    def poisoned(carry, batch):
        out = real_step(carry, batch)
        if trainer.step == 2:  # the third optimizer step gets a NaN loss
            return out._replace(loss=out.loss * float("nan"))
        return out
    trainer.step_fn = poisoned
    good = None
    with pytest.raises(TrainingDiverged, match=r"non-finite loss at step 3 .*the last good checkpoint, .*step_2, "
                                               r"is untouched"):
        trainer.fit()
    good = torch.load(tmp_path / "run" / "step_2" / "model.pt", weights_only=True)["state"]
    assert (tmp_path / "run" / "latest").read_text() == "step_2"
    assert not (tmp_path / "run" / "step_3").exists()
    assert json.loads((tmp_path / "run" / "diverged.json").read_text())["step"] == 3
    # resumed (e.g. with a lower lr), the run is no longer marked diverged; the record stays
    Trainer(micro_config(small_build, tmp_path / "run", resume="latest", lr=1e-4), CPU, progress=False)
    assert not (tmp_path / "run" / "diverged.json").exists()
    assert json.loads((tmp_path / "run" / "diverged.3.json").read_text())["step"] == 3
    assert all(torch.isfinite(v).all() for v in good.values() if v.is_floating_point())


def test_weights_an_update_overflowed_are_a_divergence_not_the_last_good_checkpoint(tiny_build, tmp_path):
    """lr=1e38: the first update overflows the weights while its loss and gradient were finite, so the
    guard on those let step_1 be saved, then named "the last good checkpoint" (and resumed from) once
    the next loss was NaN. The save checks the weights: nothing is saved, the run is diverged at 1."""
    from hrm.run_folders import list_checkpoints
    run = tmp_path / "run"
    cfg = micro_config(tiny_build, run, lr=1e38, lr_warmup_steps=0, checkpoint_interval=1, max_steps=3)
    with pytest.raises(TrainingDiverged, match=r"non-finite weights after the update of step 1 .*lr=1e\+38.*"
                                               r"no checkpoint was written before it"):
        Trainer(cfg, CPU, progress=False).fit()
    assert list_checkpoints(run) == [] and not (run / "latest").exists()
    record = json.loads((run / "diverged.json").read_text())
    assert record["step"] == 1
    assert math.isfinite(losses_by_step(run)[1])       # the step itself looked fine
    # and its record says so (it gave loss "nan", grad_norm "nan" beside a reason saying both were finite)
    assert float(record["loss"]) == pytest.approx(losses_by_step(run)[1]) and math.isfinite(float(record["grad_norm"]))


def losses_by_step(run_dir: Path) -> dict[int, float]:
    out = {}
    for line in (run_dir / "log.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "train/loss" in record:
            out[record["step"]] = record["train/loss"]  # a resumed run rewrites later steps
    return out


def pretrain_cmd(data: Path, run_dir: Path, *extra: str) -> list[str]:
    micro = [f"arch.{k}={v}" for k, v in MICRO_ARCH.items() if k != "scaling"] + ["arch.scaling.rule=deeploop"]
    return [sys.executable, str(ROOT / "pretrain.py"), "arch=hrm_tiny", *micro, f"data_path={data}",
            "global_batch_size=8", "epochs=100", "eval_interval=100", "lr=1e-3", "lr_warmup_steps=2", "seed=5",
            f"checkpoint_path={run_dir}", "eval_save_predictions=false", *extra]


@contextlib.contextmanager
def one_thread():
    """Training in this process that is compared bit for bit with a child's (OMP_NUM_THREADS=1):
    the same single thread, as a sum split over threads can round otherwise."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_as_pretrain(cmd: list[str], evaluated: bool = True) -> Trainer:
    """The run `cmd` (a pretrain_cmd) makes, trained in this process: its overrides composed as
    pretrain.py composes them, without a child's start-up (seconds of imports). Call under one_thread.
    `evaluated=False` skips the evaluations (each a pass over the test split) of a run whose
    evaluations no assertion reads; they come after the steps they would follow, so the losses,
    weights and checkpoints compared are the same."""
    assert cmd[1] == str(ROOT / "pretrain.py")
    trainer = Trainer(PretrainConfig(**compose(*cmd[2:])), CPU, progress=False)
    if not evaluated:
        trainer.run_evaluation = dict
    trainer.fit()
    return trainer


def test_sigkill_then_resume_reproduces_the_losses(small_build, tmp_path):
    """pretrain.py killed (SIGKILL: no handler runs, no file is tidied) after saving step 4 of 6:
    resumed, its losses are the uninterrupted run's. Only the killed run needs a process of its own;
    the other two train here, the uninterrupted one while the child runs."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    straight, run = tmp_path / "straight", tmp_path / "killed"

    def killed_after_step_4():
        proc = subprocess.Popen(pretrain_cmd(small_build, run, "max_steps=6", "checkpoint_interval=2"), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline and not (run / "step_4").is_dir():
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool, one_thread():
        killed = pool.submit(killed_after_step_4)
        # here, in the main thread: fit sets its SIGTERM handler, which only the main thread may
        train_as_pretrain(pretrain_cmd(small_build, straight, "max_steps=6"), evaluated=False)
        killed.result()
    expected = losses_by_step(straight)
    assert sorted(expected) == list(range(1, 7))
    assert (run / "step_4").is_dir() and not (run / "step_6").exists(), "kill came too late to test resume"
    with one_thread():
        resumed = train_as_pretrain(pretrain_cmd(small_build, run, "max_steps=6", "checkpoint_interval=2",
                                                 "resume=latest"), evaluated=False)
    assert resumed.history[0][0] > 1                    # it continued the killed run's checkpoint
    assert losses_by_step(run) == expected  # identical floats, step for step


# A run of two iterations on iterations_build: batch 8, seed 6, the 6th batch is the last of the
# first epoch (= iteration) and ends exactly at its end, so the reader position saved with it
# already points to the next iteration; evaluations at steps 6 and 8, each of 2 batches (2 test
# rows each), so that a SIGTERM can come between them.
TWO_ITERATIONS = dict(global_batch_size=8, seed=6, epochs=2, eval_interval=1, max_steps=8, keep_checkpoints=0,
                      eval_save_predictions=False, eval_batch_size=2)


@pytest.fixture(scope="module")
def two_iterations(iterations_build, tmp_path_factory) -> tuple[Path, list]:
    """The uninterrupted TWO_ITERATIONS run that the tests which stop and resume one compare with:
    (its folder, its (step, loss) history)."""
    run = tmp_path_factory.mktemp("straight") / "run"
    trainer = Trainer(micro_config(iterations_build, run, **TWO_ITERATIONS), CPU, progress=False)
    trainer.fit()
    assert [step for step, _ in eval_records(run)] == [6, 8]
    return run, trainer.history


def sigterm_when(trainer: Trainer, method: str, condition) -> None:
    """Make `trainer.<method>` send this process SIGTERM (to fit's handler) when `condition(trainer)` holds."""
    original = getattr(trainer, method)

    def patched(*args):
        if condition(trainer):
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args)
    setattr(trainer, method, patched)


def test_sigterm_mid_run_saves_that_step_and_resume_reproduces_the_losses(iterations_build, two_iterations, tmp_path):
    """A scheduler's SIGTERM during step 5 of 8: step 5 is saved, the run stops (run_status.py says
    so), and the resumed run's losses equal the uninterrupted run's, step for step. (pretrain.py's
    line and exit 143: test_sigterm_to_one_rank_stops_every_rank_after_the_same_step_saved.)"""
    from scripts import run_status
    straight, _ = two_iterations
    run = tmp_path / "run"
    stopping = Trainer(micro_config(iterations_build, run, **TWO_ITERATIONS), CPU, progress=False)
    sigterm_when(stopping, "train_step", lambda t: t.step == 4)      # the step that makes step 5
    with pytest.raises(TrainingStopped, match=f"stopped by SIGTERM at step 5, saved as {run / 'step_5'}: "
                                              f"continue with resume={run}"):
        stopping.fit()
    assert (run / "latest").read_text() == "step_5" and eval_records(run) == []
    assert run_status.run_summary(run, 1.0, 0.05, 50)["stopped_at"] == 5
    Trainer(micro_config(iterations_build, run, resume="latest", **TWO_ITERATIONS), CPU, progress=False).fit()
    assert losses_by_step(run) == losses_by_step(straight)     # identical floats
    assert eval_records(run) == eval_records(straight)
    assert run_status.run_summary(run, 1.0, 0.05, 50)["stopped_at"] is None


def test_sigterm_on_the_last_step_stops_before_its_evaluation_and_resume_runs_it(iterations_build, two_iterations,
                                                                                 tmp_path):
    """The run's last evaluation is a pass over the whole test split, which can outlast the
    scheduler's grace period: a SIGTERM in the last step saves that step first and stops (exit 143),
    as on any other step, and the resumed run runs the evaluation the uninterrupted run did."""
    straight, _ = two_iterations
    run = tmp_path / "run"
    settings = dict(TWO_ITERATIONS, checkpoint_interval=8)    # step_8 saved before the stop too
    stopping = Trainer(micro_config(iterations_build, run, **settings), CPU, progress=False)
    sigterm_when(stopping, "train_step", lambda t: t.step == 7)      # the step that makes step 8
    with pytest.raises(TrainingStopped, match="stopped by SIGTERM at step 8"):
        stopping.fit()
    assert [step for step, _ in eval_records(run)] == [6] and (run / "latest").read_text() == "step_8"
    summary = Trainer(micro_config(iterations_build, run, resume="latest", **settings), CPU, progress=False).fit()
    assert summary["steps_run"] == 0 and summary["eval"] and not summary["sigterm"]
    assert eval_records(run) == eval_records(straight)
    finished = (run / "step_8" / "trainer.pt").stat().st_ino
    again = Trainer(micro_config(iterations_build, run, resume="latest", **settings), CPU, progress=False).fit()
    assert again["eval"] == {} and len(eval_records(run)) == 2     # done once: the run is finished
    assert (run / "step_8" / "trainer.pt").stat().st_ino == finished   # and not saved again
    for named in (run, run / "step_8"):       # the run's folder, or its newest step named, alike
        Trainer(micro_config(iterations_build, run, resume=str(named), **settings), CPU, progress=False).fit()
        assert (run / "step_8" / "trainer.pt").stat().st_ino == finished, named


def test_a_finished_run_whose_last_step_a_checkpoint_interval_saved_is_not_evaluated_again(iterations_build, tmp_path):
    """checkpoint_interval=4 saves step 8, the run's last, before its evaluation (pending, for a
    SIGKILL during it); with checkpoint_every_eval=False that must not be the run's final word:
    the evaluation ran, so the finished run's last checkpoint says so and resuming it evaluates
    nothing (the run 'had already finished')."""
    run = tmp_path / "run"
    settings = dict(TWO_ITERATIONS, checkpoint_interval=4, checkpoint_every_eval=False)
    Trainer(micro_config(iterations_build, run, **settings), CPU, progress=False).fit()
    assert [step for step, _ in eval_records(run)] == [6, 8] and (run / "latest").read_text() == "step_8"
    saved = torch.load(run / "step_8" / "trainer.pt", weights_only=True)
    assert not saved["final_evaluation_pending"]
    again = Trainer(micro_config(iterations_build, run, resume="latest", **settings), CPU, progress=False).fit()
    assert again["steps_run"] == 0 and again["eval"] == {}
    assert [step for step, _ in eval_records(run)] == [6, 8]


def test_a_run_ended_by_max_steps_on_an_iterations_last_batch_is_not_evaluated_twice(iterations_build, tmp_path):
    """Seed 4: the first iteration has 5 batches and drops an incomplete sixth. A run stopped by
    max_steps=5 evaluates at step 5; continued to max_steps=8 it must not evaluate step 5 again
    (it did: the saved reader position still lay inside the first iteration's dropped tail)."""
    run = tmp_path / "run"
    settings = dict(TWO_ITERATIONS, seed=4)
    Trainer(micro_config(iterations_build, run, **{**settings, "max_steps": 5}), CPU, progress=False).fit()
    assert [step for step, _ in eval_records(run)] == [5]
    resumed = Trainer(micro_config(iterations_build, run, resume="latest", **settings), CPU, progress=False)
    resumed.fit()
    assert [step for step, _ in eval_records(run)] == [5, 8]
    assert [step for step, _ in resumed.history] == [6, 7, 8]


def test_an_iteration_that_draws_no_batch_evaluates_nothing_again(tiny_build, tmp_path, monkeypatch):
    """check_some_steps goes by the mean examples per puzzle: an iteration's random draw can fall
    short of one global batch, and yield none. The model is then the one evaluated at the end of the
    iteration before, at the same step: it was evaluated (and logged) there a second time."""
    from arc_data.dataset import TrainBatches
    drawn = TrainBatches.iteration_batches

    def short(*iterations):
        def batches(reader):
            if reader.iteration in iterations:   # its batches drawn and dropped, as a short draw would
                for _ in drawn(reader):
                    pass
                return iter(())
            return drawn(reader)
        return batches
    monkeypatch.setattr(TrainBatches, "iteration_batches", short(1))
    run = tmp_path / "run"
    settings = {**TWO_ITERATIONS, "epochs": 3, "max_steps": 100}
    trainer = Trainer(micro_config(tiny_build, run, **settings), CPU, progress=False)
    trainer.fit()
    evaluated = [step for step, _ in eval_records(run)]
    assert len(evaluated) == 2 and evaluated[0] < evaluated[1] == trainer.step, evaluated
    assert trainer.evaluated_iterations == trainer.reader.iteration == 3
    # stopped at the first iteration's end (max_steps) and resumed: the empty iteration after it
    # is still the model evaluated there, in the run before (the resumed run evaluated it again)
    run = tmp_path / "stopped"
    Trainer(micro_config(tiny_build, run, **{**settings, "max_steps": evaluated[0]}), CPU, progress=False).fit()
    Trainer(micro_config(tiny_build, run, resume="latest", **settings), CPU, progress=False).fit()
    assert [step for step, _ in eval_records(run)] == evaluated
    # the last iteration empty too: resumed, the finished run evaluates nothing again
    monkeypatch.setattr(TrainBatches, "iteration_batches", short(1, 2))
    run = tmp_path / "again"
    Trainer(micro_config(tiny_build, run, **settings), CPU, progress=False).fit()
    assert len(eval_records(run)) == 1
    Trainer(micro_config(tiny_build, run, resume="latest", **settings), CPU, progress=False).fit()
    assert len(eval_records(run)) == 1


@pytest.mark.parametrize("during_step", [6, 8], ids=["mid-run", "last"])
def test_sigterm_during_an_evaluation_stops_it_and_resume_runs_it_again(during_step, iterations_build, two_iterations,
                                                                        tmp_path):
    """The whole test split can outlast the scheduler's grace period: a SIGTERM during the
    evaluation at step 6 (an iteration's end) or 8 (the run's) stops it after the batch in progress,
    saves that step and stops; the resumed run evaluates there again and goes on as the
    uninterrupted run did (same evaluations, same losses). Stopped again during that evaluation,
    it writes nothing: its checkpoint already holds that state."""
    straight, history = two_iterations
    run = tmp_path / "run"

    def start(**resume) -> tuple[Trainer, list]:
        """A Trainer sent SIGTERM in the first batch of its evaluation at during_step, and the
        batches evaluated there."""
        trainer = Trainer(micro_config(iterations_build, run, **TWO_ITERATIONS, **resume), CPU, progress=False)
        batches, evaluate_batch = [], trainer.loss_head.evaluate

        def evaluate_signalled(*args):
            if trainer.step == during_step:
                batches.append(len(batches))
                if len(batches) == 1:
                    os.kill(os.getpid(), signal.SIGTERM)
            return evaluate_batch(*args)
        trainer.loss_head.evaluate = evaluate_signalled
        return trainer, batches

    stopping, batches = start()
    with pytest.raises(TrainingStopped, match=f"stopped by SIGTERM at step {during_step}, saved as "
                                              f"{run / f'step_{during_step}'}"):
        stopping.fit()
    assert batches == [0]          # stopped after the first batch, not at the end of the test split
    assert [step for step, _ in eval_records(run)] == [6] * (during_step == 8)
    assert (run / "latest").read_text() == f"step_{during_step}" and stopping.loss_head.training
    saved = (run / f"step_{during_step}" / "trainer.pt").stat().st_ino

    stopping_again, batches = start(resume="latest")
    with pytest.raises(TrainingStopped, match=f"stopped by SIGTERM at step {during_step}"):
        stopping_again.fit()
    assert batches == [0] and (run / f"step_{during_step}" / "trainer.pt").stat().st_ino == saved

    resumed = Trainer(micro_config(iterations_build, run, resume="latest", **TWO_ITERATIONS), CPU, progress=False)
    resumed.fit()
    assert eval_records(run) == eval_records(straight)
    assert resumed.history == [(s, loss) for s, loss in history if s > during_step]


def test_a_sweep_stops_at_a_sigterm_during_a_jobs_last_save(tiny_build, tmp_path):
    """The job is complete then, but the sweep must not start its next job (the scheduler's SIGKILL
    would cut it): exit 143, naming the sweep's run_name for resume=latest, which continues it. In
    the last job's save, there is no job left to continue."""
    wrapper = tmp_path / "sigterm_in_first_save.py"
    wrapper.write_text(f"""import os, runpy, signal, sys
sys.path.insert(0, {str(ROOT)!r})
from hrm.train import Trainer
save = Trainer.save
def first_save_signalled(self):
    if not getattr(Trainer, "sent", False):
        Trainer.sent = True
        os.kill(os.getpid(), signal.SIGTERM)
    return save(self)
Trainer.save = first_save_signalled
sys.argv[0] = {str(ROOT / "pretrain.py")!r}
runpy.run_path(sys.argv[0], run_name="__main__")
""")
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    # one step a job: its first save is its last, after its evaluation
    cmd = [a.replace("max_steps=3", "max_steps=1") for a in sweep_cmd(tiny_build, "lr=1e-3,2e-3")]
    run = subprocess.run([cmd[0], str(wrapper), *cmd[2:]], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600, env=env)
    assert run.returncode == 143, run.stderr[-3000:]
    runs = tmp_path / "checkpoints" / "sweep"
    [first] = runs.iterdir()
    assert (first / "latest").read_text() == "step_1" and eval_records(first)
    stopped = re.search(r"stopped by SIGTERM after the job \S+ finished \(step 1\); the sweep stops here \(any job "
                        r"after this one is not started\): run the same sweep with resume=latest (run_name=\S+) to continue it", run.stderr)
    assert stopped and first.name == stopped[1].removeprefix("run_name=") + "-lr=0.001", run.stderr[-3000:]
    # continued: the first job has nothing left (nor to save), the second starts; a SIGTERM in its
    # save, the sweep's last job's, leaves no job to continue
    again = subprocess.run([cmd[0], str(wrapper), *cmd[2:], "resume=latest", stopped[1]], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 143, again.stderr[-3000:]
    assert "the run had already finished at step 1" in again.stdout and "starts afresh" in again.stdout
    second = first.name.replace("lr=0.001", "lr=0.002")
    assert sorted(p.name for p in runs.iterdir()) == [first.name, second]
    assert again.stderr.endswith(f"stopped by SIGTERM after the job {second} finished (step 1): every job ran\n"), \
        again.stderr[-3000:]


def test_a_sigterm_repeated_at_once_counts_once_and_a_later_one_kills(tmp_path):
    """A scheduler signalling every process of a job reaches a torchrun worker twice, directly and
    through torchrun: that copy must not kill the save the first SIGTERM asked for. A SIGTERM sent
    later still kills at once (a run that should not even save)."""
    script = tmp_path / "twice.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from hrm.sigterm import StopOnSigterm\n"
        "with StopOnSigterm() as stop:\n"
        "    stop.REPEAT_WINDOW_S = float(sys.argv[1])\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.2)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.2)\n"
        "    print('still running, stop requested:', stop.requested)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    # both at once: each window is far from the 0.2 s between its signals, so load cannot flip either
    at_once, later = together(*[lambda window=window: subprocess.run(
        [sys.executable, str(script), window], env=env, capture_output=True, text=True) for window in ("5", "0.1")])
    assert at_once.returncode == 0 and "stop requested: True" in at_once.stdout, at_once.stderr
    assert later.returncode == -signal.SIGTERM and "still running" not in later.stdout


def test_resume_auto_starts_a_run_and_continues_it_with_the_same_command(tiny_build, tmp_path, capsys):
    """A requeued job runs one command: resume=auto starts the named run when it has no checkpoint
    and continues its latest when it has (pretrain.py passes it through fresh_if_nothing_to_resume);
    without a run name it is refused (nothing to find)."""
    from hrm.sweep import fresh_if_nothing_to_resume
    run = tmp_path / "run"
    first = fresh_if_nothing_to_resume(micro_config(tiny_build, run, max_steps=2, resume="auto"), CPU, "")
    assert first.resume is None and f"nothing to resume in {run}: the run starts afresh" in capsys.readouterr().out
    Trainer(first, CPU, progress=False).fit()
    again = fresh_if_nothing_to_resume(micro_config(tiny_build, run, max_steps=4, resume="auto"), CPU, "")
    assert again.resume == "latest"
    trainer = Trainer(again, CPU, progress=False)
    assert trainer.step == 2
    trainer.fit()
    assert sorted(losses_by_step(run)) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="resume=auto needs run_name or checkpoint_path"):
        micro_config(tiny_build, run, checkpoint_path=None, resume="auto")


def test_resume_auto_into_a_folder_in_use_does_not_say_it_starts_afresh(tiny_build, tmp_path, capsys):
    """resume=auto while another process trains into the run folder before its first checkpoint: the
    Trainer refuses the folder as in use, so "nothing to resume ... starts afresh" must not come first."""
    from hrm.run_lock import RunLock
    from hrm.sweep import fresh_if_nothing_to_resume
    run = tmp_path / "run"
    holder = RunLock.acquire(run)
    try:
        config = fresh_if_nothing_to_resume(micro_config(tiny_build, run, max_steps=2, resume="auto"), CPU, "")
        assert config.resume is None and "starts afresh" not in capsys.readouterr().out
        with pytest.raises(ValueError, match=f"{run} is in use: pid {os.getpid()} on "):
            Trainer(config, CPU, progress=False)
    finally:
        holder.release()


def test_a_fresh_start_keeps_the_log_of_an_earlier_start_that_left_no_checkpoint(small_build, tmp_path, capsys):
    """A run that crashed before its first checkpoint, started again with resume=auto (nothing to
    resume: it starts afresh): its log, the only record of why it crashed, and its config were
    overwritten. They are kept under numbered names, said in one line; the new start logs afresh."""
    from hrm.sweep import fresh_if_nothing_to_resume
    run = tmp_path / "run"
    run.mkdir()
    earlier = '{"step": 0, "num_params": 1}\n{"step": 1, "train/loss": 9.5}\n'
    (run / "log.jsonl").write_text(earlier)
    (run / "all_config.yaml").write_text("lr: 1.0\n")
    config = fresh_if_nothing_to_resume(micro_config(small_build, run, max_steps=1, resume="auto"), CPU, "")
    trainer = Trainer(config, CPU, progress=False)
    assert (run / "log.earlier-1.jsonl").read_text() == earlier
    assert (run / "all_config.earlier-1.yaml").read_text() == "lr: 1.0\n"
    assert [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()] == [0]
    assert (f"{run} holds the log of an earlier start with no checkpoint to continue: kept as log.earlier-1.jsonl "
            f"and all_config.earlier-1.yaml; this run writes a new log.jsonl") in capsys.readouterr().out
    trainer.release_run_lock()
    # started afresh once more (no checkpoint yet): the next free number, the first kept as it was
    Trainer(micro_config(small_build, run, max_steps=1), CPU, progress=False).release_run_lock()
    assert (run / "log.earlier-1.jsonl").read_text() == earlier
    assert (run / "log.earlier-2.jsonl").is_file() and (run / "all_config.earlier-2.yaml").is_file()


def test_two_gloo_ranks_agree_with_each_other_and_with_one_process(small_build, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    no_explore = ["arch.halt_exploration_prob=0.0", "max_steps=4"]
    # the accumulating run and the two ranks also keep their evaluation of step 4 (same weights): a
    # batch of 6 over 40 test rows leaves a padded last batch, split over the ranks as 3 + 1 real rows
    # (2 blank rows either way, so even q_halt_loss, which scores them, agrees)
    evaluated = ["eval_batch_size=6", "eval_pass_k=[1,2]"]
    one, accum, two = tmp_path / "one", tmp_path / "accum", tmp_path / "two"

    def saving_predictions(cmd: list[str]) -> list[str]:
        return [arg for arg in cmd if arg != "eval_save_predictions=false"] + evaluated
    # the one-process runs train here (the ranks' processes, one thread each, are what is compared with)
    with one_thread():
        train_as_pretrain(pretrain_cmd(small_build, one, *no_explore), evaluated=False)   # its weights, losses
        train_as_pretrain(saving_predictions(pretrain_cmd(small_build, accum, *no_explore, "grad_accum_steps=2")))
    worker = ROOT / "tests" / "dist_worker.py"
    # the ranks of one gloo group, started as torchrun starts them (run_ranks: without torchrun's own start-up)
    cmd = [sys.executable, str(worker), str(two)] + saving_predictions(pretrain_cmd(small_build, two, *no_explore))[2:]
    ranks = run_ranks(cmd, ROOT, env, port=29517)
    assert [r.returncode for r in ranks] == [0, 0], "".join(r.stderr for r in ranks)[-3000:]
    rank0 = torch.load(two / "weights_rank0.pt", weights_only=True)
    rank1 = torch.load(two / "weights_rank1.pt", weights_only=True)
    single = torch.load(one / "step_4" / "model.pt", weights_only=True)["state"]
    assert rank0.keys() == rank1.keys() == single.keys()
    # Ranks: bit-identical. Against one process: the gradient sums differ in float order only. AdamATan2's
    # update atan2(m, sqrt(v)) ignores the gradient's scale, so an element whose gradient is pure
    # round-off noise (~1e-12) can still move by up to lr * pi/2 per step in either run; allow a
    # handful of such elements, bounded by that, and require the rest to agree to 1e-5.
    lr, steps = 1e-3, 4
    off, total = 0, 0
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key
        diff = (rank0[key] - single[key]).abs()
        off += int((diff > 1e-5).sum())
        total += diff.numel()
        assert diff.max() <= lr * math.pi / 2 * steps, key
    assert off <= max(2, total // 10_000), f"{off} of {total} weights differ from the 1-process run"
    assert losses_by_step(two).keys() == losses_by_step(one).keys()
    for step, loss in losses_by_step(one).items():
        assert losses_by_step(two)[step] == pytest.approx(loss, rel=1e-4)

    # Gradient accumulation: one process, two micro-batches of 4 rows, each with its slice of the
    # carry, is the two-rank run (same rows per micro-batch as per rank, gradients of two terms
    # added, puzzle rows gathered in the same order): the same weights and losses, bit for bit.
    accumulated = torch.load(accum / "step_4" / "model.pt", weights_only=True)["state"]
    for key in rank0:
        assert torch.equal(accumulated[key], rank0[key]), key
    assert losses_by_step(accum) == losses_by_step(two)
    # and so is every logged metric (summed over micro-batches as over ranks, in float64)
    assert train_records(accum) == train_records(two)

    # Its evaluation of those weights: the metrics summed over the ranks' real rows, then divided,
    # are one process's, and so is pass@K voted over the two rank files; every test row is in
    # exactly one of them, with the prediction one process makes for it.
    [evaluation_two], [evaluation_one] = eval_metrics(two), eval_metrics(accum)
    assert evaluation_two.keys() == evaluation_one.keys() >= {"eval/count", "eval/pass@1", "eval/q_halt_loss"}
    assert evaluation_two["eval/count"] == evaluation_one["eval/count"] == 40
    for key, value in evaluation_one.items():
        assert evaluation_two[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    folder_two, folder_one = two / "predictions" / "step_4", accum / "predictions" / "step_4"
    assert json.loads((folder_two / "info.json").read_text())["world_size"] == 2
    rows_two = real_prediction_rows(folder_two, ranks=2)
    rows_one = real_prediction_rows(folder_one, ranks=1)
    assert len(rows_two) == len(rows_one) == 40 and rows_two.keys() == rows_one.keys()
    for row, (preds, q_halt) in rows_one.items():
        assert np.array_equal(rows_two[row][0], preds)
        assert rows_two[row][1] == pytest.approx(q_halt, rel=1e-5, abs=1e-6)


def eval_metrics(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k.startswith("eval/")}
            for r in map(json.loads, (run_dir / "log.jsonl").read_text().splitlines()) if "eval/count" in r]


def real_prediction_rows(folder: Path, ranks: int) -> dict:
    """(identifier, input tokens) -> (preds, q_halt logit) of every real row of the folder's rank files;
    a row in two places is an error."""
    rows = {}
    assert sorted(p.name for p in folder.glob("*.npz")) == [f"rank_{r}.npz" for r in range(ranks)]
    for rank in range(ranks):
        with np.load(folder / f"rank_{rank}.npz") as f:
            for ident, inputs, preds, q_halt in zip(f["puzzle_identifiers"], f["inputs"], f["preds"],
                                                    f["q_halt_logits"]):
                if ident:
                    key = (int(ident), inputs.tobytes())
                    assert key not in rows, f"{folder}: a test row written twice"
                    rows[key] = (preds, float(q_halt))
    return rows


def train_records(run_dir: Path) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "log.jsonl").read_text().splitlines()) if "train/loss" in r]


def test_grad_norm_is_the_unclipped_norm_and_grad_clip_bounds_what_the_optimizer_sees(small_build, tmp_path):
    seen, logged = {}, {}
    for clip in (None, 1e-3):
        trainer = Trainer(micro_config(small_build, tmp_path / str(clip), grad_clip=clip), CPU, progress=False)
        dense = trainer.optimizers["dense"]
        step = dense.step

        def spy(step=step, model=trainer.model, clip=clip):
            norms = [p.grad.double().norm() for p in model.parameters() if p.grad is not None]
            seen[clip] = torch.stack(norms).norm().item()
            return step()
        dense.step = spy
        logged[clip] = trainer.train_step(next(trainer.reader.iteration_batches()))["train/grad_norm"]
    assert logged[None] > 1e-2                                     # so the clip bites
    assert seen[None] == pytest.approx(logged[None], rel=1e-5)     # unclipped: the optimizer sees it all
    assert logged[1e-3] == pytest.approx(logged[None], rel=1e-5)   # the log keeps the unclipped norm
    assert seen[1e-3] == pytest.approx(1e-3, rel=1e-3)


def test_gradient_accumulation_steps_as_the_whole_batch_does(small_build, tmp_path):
    """grad_accum_steps=2 on one process is the step of the whole batch at once (the rows are
    independent, the loss is summed over rows and divided by the global batch): the same loss and
    gradient norm, each row's carry at its own position, the losses divided by the global batch
    (train/loss = lm_loss + 0.5 * (q_halt_loss + q_continue_loss)) and the other metrics by the rows
    that halted. Worked by hand on the micro arch (halt_max_steps=2, no exploration, q_head
    bias -5 on both logits, so nothing halts early): step 1 takes fresh rows everywhere and halts
    none; step 2 halts all 8, each after 2 segments, so train/steps is 16 / 8 = 2."""
    arch = dict(MICRO_ARCH, halt_exploration_prob=0.0)
    records, carries, batches = {}, {}, {}
    for parts in (1, 2):
        trainer = Trainer(micro_config(small_build, tmp_path / str(parts), arch=arch, grad_accum_steps=parts), CPU,
                          progress=False)
        it = trainer.reader.iteration_batches()
        batches[parts] = [next(it), next(it)]
        first = trainer.train_step(batches[parts][0])
        carries[parts] = trainer.carry
        records[parts] = [first, trainer.train_step(batches[parts][1])]
        trainer.release_run_lock()
    assert torch.equal(batches[1][0]["inputs"], batches[2][0]["inputs"])   # the same data for both
    for parts in (1, 2):
        # every row was fresh at step 1: its carry holds the batch row at its own position
        for key, rows in batches[parts][0].items():
            assert torch.equal(carries[parts].current_data[key], rows), (parts, key)
        assert records[parts][0]["train/steps"] == 0.0                  # none halted at step 1
        assert records[parts][1]["train/steps"] == pytest.approx(2.0)  # all 8 rows halted after 2 segments
        for r in records[parts]:   # the losses per example of the global batch, whatever halted: their parts add up
            parts_sum = r["train/lm_loss"] + 0.5 * (r["train/q_halt_loss"] + r["train/q_continue_loss"])
            assert r["train/loss"] == pytest.approx(parts_sum, rel=1e-5)
    for whole, accumulated in zip(records[1], records[2]):
        assert accumulated["train/loss"] == pytest.approx(whole["train/loss"], rel=1e-6)
        assert accumulated["train/grad_norm"] == pytest.approx(whole["train/grad_norm"], rel=1e-5)
        assert accumulated["train/lm_loss"] == pytest.approx(whole["train/lm_loss"], rel=1e-6)


def test_a_non_finite_gradient_with_a_finite_loss_stops_before_any_update(small_build, tmp_path):
    """The divergence guard reads the gradient norm as well as the loss: a gradient that overflows
    while the loss is finite stops the step before either optimizer touches the weights."""
    trainer = Trainer(micro_config(small_build, tmp_path / "run"), CPU, progress=False)
    trainer.model.lm_head.weight.register_hook(lambda g: torch.full_like(g, math.inf))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(TrainingDiverged, match=r"non-finite gradient norm at step 1 \(loss [0-9.]+, grad norm"):
        trainer.train_step(next(trainer.reader.iteration_batches()))
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert json.loads((tmp_path / "run" / "diverged.json").read_text())["step"] == 1
    trainer.release_run_lock()


def test_the_puzzle_rows_move_by_the_scheduled_puzzle_emb_lr(small_build, tmp_path):
    """Sign-SGD on the zero-initialised table at step 1 (warmup 2): each looked-up row becomes
    0 * (1 - lr * wd) - lr * sign(g) with lr = puzzle_emb_lr * 1/2 = 5e-3, not the dense lr's 5e-4;
    the rows no batch example uses stay 0."""
    trainer = Trainer(micro_config(small_build, tmp_path / "run", puzzle_emb_lr=1e-2, lr=1e-3), CPU, progress=False)
    batch = next(trainer.reader.iteration_batches())
    trainer.train_step(batch)
    table = trainer.model.puzzle_embedding.table
    used = torch.zeros(len(table), dtype=torch.bool)
    used[batch["puzzle_identifiers"].long()] = True
    assert torch.equal(table[~used], torch.zeros_like(table[~used]))
    moved = table[used].abs()
    assert (moved > 0).float().mean() > 0.5
    assert torch.allclose(moved[moved > 0], torch.full_like(moved[moved > 0], 5e-3))
    trainer.release_run_lock()


def test_resume_restores_the_random_state_the_checkpoint_was_saved_with(tiny_build, tmp_path):
    """Each rank's rank_<r>.pt holds its random state (the exploration draws'): a run resumed in the
    same world draws next exactly what the saving process would have drawn next, not what model
    initialisation left behind."""
    cfg = dict(max_steps=1, eval_save_predictions=False)
    Trainer(micro_config(tiny_build, tmp_path / "run", **cfg), CPU, progress=False).fit()   # saved at its end
    expected = torch.rand(4)
    trainer = Trainer(micro_config(tiny_build, tmp_path / "run", resume="latest", **cfg), CPU, progress=False)
    assert torch.equal(torch.rand(4), expected)
    trainer.release_run_lock()


def test_visit_alignment_diagnostics_are_logged_and_leave_training_unchanged(tiny_build, tmp_path):
    plain = Trainer(micro_config(tiny_build, tmp_path / "plain", max_steps=3), CPU, progress=False)
    plain.fit()
    cfg = micro_config(tiny_build, tmp_path / "diag", max_steps=3, diagnostics_interval=2, diagnostics_rows=3)
    diag = Trainer(cfg, CPU, progress=False)
    diag.fit()
    assert diag.history == plain.history                      # the same losses, bit for bit
    for name, value in plain.model.state_dict().items():
        assert torch.equal(diag.model.state_dict()[name], value), name
    log = [json.loads(line) for line in (tmp_path / "diag" / "log.jsonl").read_text().splitlines()]
    records = [r for r in log if "alignment/mean" in r]
    assert [r["step"] for r in records] == [2]
    # MICRO_ARCH: one H and one L block, so four sublayers
    sublayers = ["H.0.attn", "H.0.mlp", "L.0.attn", "L.0.mlp"]
    for r in records:
        assert set(r) == {"step", "alignment/mean", "alignment/min", "alignment_cosine/mean",
                          *(f"alignment/{s}" for s in sublayers), *(f"alignment_cosine/{s}" for s in sublayers)}
        values = [r[f"alignment/{s}"] for s in sublayers]
        assert all(0 < v <= 1 + 1e-9 for v in values)
        assert r["alignment/mean"] == pytest.approx(sum(values) / 4) and r["alignment/min"] == min(values)
    assert not any("alignment/mean" in r for r in
                   (json.loads(line) for line in (tmp_path / "plain" / "log.jsonl").read_text().splitlines()))


def eval_records(run_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["eval/lm_loss"]) for r in map(json.loads, (run_dir / "log.jsonl").read_text().splitlines())
            if "eval/lm_loss" in r]


@pytest.mark.parametrize("crash_step", [6, 8], ids=["iteration-end", "run-end"])
def test_resume_runs_the_evaluation_a_crash_skipped(crash_step, iterations_build, two_iterations, tmp_path):
    """A crash (SIGKILL, a node lost) during the evaluation after a checkpoint_interval save of
    the same step: the resumed run runs that evaluation, at an iteration's end (the saved reader
    position already points to the next iteration) as at the run's (its last step)."""
    straight, history = two_iterations
    run = tmp_path / "crashed"
    settings = dict(TWO_ITERATIONS, checkpoint_interval=crash_step)
    crashing = Trainer(micro_config(iterations_build, run, **settings), CPU, progress=False)
    evaluate = crashing.run_evaluation

    def crash():
        if crashing.step == crash_step:
            raise KeyboardInterrupt("killed before the evaluation")
        return evaluate()
    crashing.run_evaluation = crash
    with pytest.raises(KeyboardInterrupt):
        crashing.fit()
    saved = torch.load(run / f"step_{crash_step}" / "trainer.pt", weights_only=True)
    if crash_step == 6:     # the cases under test
        assert saved["reader"]["epoch"] == 1 and saved["evaluated_iterations"] == 0
    else:
        assert saved["final_evaluation_pending"] and saved["evaluated_iterations"] == saved["reader"]["epoch"] == 1

    resumed = Trainer(micro_config(iterations_build, run, resume="latest", **settings), CPU, progress=False)
    resumed.fit()
    assert eval_records(run) == eval_records(straight)   # same evaluations, same numbers
    assert resumed.history == [(s, loss) for s, loss in history if s > crash_step]


def test_a_resumed_carry_takes_the_compute_dtype_of_the_new_run(tiny_build, tmp_path):
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False).fit()   # float32
    arch = {**MICRO_ARCH, "forward_dtype": "bfloat16"}    # as a CPU checkpoint resumed on CUDA (auto -> bf16)
    resumed = Trainer(micro_config(tiny_build, tmp_path / "run", arch=arch, max_steps=2, resume="latest"), CPU,
                      progress=False)
    assert resumed.carry.z_H.dtype == resumed.carry.z_L.dtype == torch.bfloat16
    resumed.train_step(next(resumed.reader.iteration_batches()))
    assert resumed.carry.z_H.dtype == torch.bfloat16


def test_predictions_written_into_a_folder_of_a_bigger_world_replace_it_whole(tmp_path):
    from evaluate.predictions import resolve_predictions
    from hrm.evaluation import _EMPTY, write_predictions
    folder = tmp_path / "predictions" / "step_6"
    folder.mkdir(parents=True)     # what the trainer's evaluation on 2 ranks wrote ...
    for rank in range(2):
        np.savez(folder / f"rank_{rank}.npz", **_EMPTY)
    (folder / "info.json").write_text(json.dumps({"data_path": "/x", "step": 6, "world_size": 2, "checkpoint": None}))
    (folder / "notes.txt").write_text("mine")
    # ... then predict.py on one process into the same folder
    write_predictions(folder, _EMPTY, CPU, data_path=str(tmp_path), step=6, checkpoint="ckpt")
    found = resolve_predictions(str(folder))
    assert found.files == [folder / "rank_0.npz"] and found.info["world_size"] == 1
    assert found.info["checkpoint"] == "ckpt" and (folder / "notes.txt").read_text() == "mine"


def test_predictions_written_over_rank_files_of_other_names_remove_them(tmp_path):
    """Only this evaluation's rank_<r>.npz names stay: `rank_²` (isdigit() but not int()) once
    stopped the write with a traceback, and `rank_01` was kept, a second rank 1 beside rank_1."""
    from evaluate.predictions import resolve_predictions
    from hrm.evaluation import _EMPTY, write_predictions
    folder = tmp_path / "step_6"
    folder.mkdir()
    for name in ("rank_\u00b2", "rank_01", "rank_x"):
        np.savez(folder / f"{name}.npz", **_EMPTY)
    write_predictions(folder, _EMPTY, CPU, data_path=str(tmp_path), step=6, checkpoint=None)
    assert resolve_predictions(str(folder)).files == [folder / "rank_0.npz"]


def test_the_derived_scaling_is_said_once_a_start_goes_ahead_not_for_a_refused_one(tiny_build, tmp_path, capsys):
    """The scaling line was printed as the model was built, before the resume checks: a resume
    refused for another arch (L_cycles=3: N=4) first printed that refused model's M, N, alpha, beta."""
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False).fit()
    assert capsys.readouterr().out.count("[hrm] residual scaling: H and L: deeploop") == 1
    with pytest.raises(ValueError, match="another architecture"):
        Trainer(micro_config(tiny_build, tmp_path / "run", arch={**MICRO_ARCH, "L_cycles": 3}, max_steps=2,
                             resume="latest"), CPU, progress=False)
    assert "residual scaling" not in capsys.readouterr().out


def test_resuming_with_another_architecture_is_refused_naming_the_fields(tiny_build, tmp_path):
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False).fit()
    other = {**MICRO_ARCH, "scaling": {"rule": "none"}, "L_cycles": 3}   # same shapes, another model
    with pytest.raises(ValueError, match=r"another architecture \(arch.L_cycles: 2 in the checkpoint, 3 now, "
                                         r"arch.scaling.rule: 'deeploop' in the checkpoint, 'none' now\); .*"
                                         r"leave arch=<preset> and arch.\* off the command line"):
        Trainer(micro_config(tiny_build, tmp_path / "run", arch=other, max_steps=2, resume="latest"), CPU,
                progress=False)
    renamed = {**MICRO_ARCH, "name": "micro-again"}                      # a label only: fine
    assert Trainer(micro_config(tiny_build, tmp_path / "run", arch=renamed, max_steps=2, resume="latest"), CPU,
                   progress=False).step == 1
    # deeploop's own exponent spelled out (a sweep's p=0.5 job resumed with arch=<preset>): the same model
    spelled = {**MICRO_ARCH, "scaling": {"rule": "deeploop", "p": 0.5}}
    assert Trainer(micro_config(tiny_build, tmp_path / "run", arch=spelled, max_steps=2, resume="latest"), CPU,
                   progress=False).step == 1
    with pytest.raises(ValueError, match=r"arch.scaling.p: None in the checkpoint, 0.45 now, arch.scaling.rule: "
                                         r"'deeploop' in the checkpoint, 'custom' now"):   # another alpha: refused
        Trainer(micro_config(tiny_build, tmp_path / "run", arch={**MICRO_ARCH, "scaling": {"rule": "deeploop",
                                                                                          "p": 0.45}},
                             max_steps=2, resume="latest"), CPU, progress=False)


def test_resume_refuses_another_build_or_batch_order_before_reading_the_weights(tiny_build, tmp_path, monkeypatch):
    """A build with another --seed has the same sizes but other puzzle names (each embedding row
    would belong to another puzzle); seed, global batch and eval_interval fix the batch order the
    saved position refers to. Each is refused by its config name, before model.pt is read."""
    import shutil

    import hrm.train_checkpoint as train_checkpoint
    from arc_data.build import BuildConfig, build
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False).fit()
    other = tmp_path / "seed43"
    # tiny_build's tasks and augmentations, under another seed
    build(BuildConfig(num_aug=2, limit_tasks=2, seed=43, output_dir=str(other)), progress=False)
    read = []
    real_read = train_checkpoint.read_torch_file
    monkeypatch.setattr(train_checkpoint, "read_torch_file", lambda path, hint="": read.append(Path(path).name)
                        or real_read(path, hint))

    def resume(**overrides):
        read.clear()
        return Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=2, resume="latest", **overrides), CPU,
                       progress=False)
    with pytest.raises(ValueError, match=rf"data_path={other} is not the build the run was trained on "
                                         rf"\({tiny_build}\): its puzzle names differ"):
        resume(data_path=str(other))
    assert read == ["trainer.pt"]
    for overrides, named in ((dict(seed=4), "seed: 3 in the checkpoint, 4 now"),
                             (dict(global_batch_size=16), "global_batch_size: 8 in the checkpoint, 16 now"),
                             (dict(eval_interval=50), "eval_interval (epochs between evaluations; `epochs` when "
                                                      "null): 100 in the checkpoint, 50 now")):
        with pytest.raises(ValueError, match=re.escape(named)):
            resume(**overrides)
        assert read == ["trainer.pt"]
    # same puzzle names, other contents (here: another digest in its manifest)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_build, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "digest": "0" * 64}))
    with pytest.raises(ValueError, match="same puzzles, other contents"):
        resume(data_path=str(copy))
    # epochs may grow (eval_interval unchanged); optimizer settings may change and take effect
    resumed = resume(epochs=200, weight_decay=0.05, beta2=0.9, puzzle_emb_weight_decay=0.2)
    assert resumed.step == 1 and read == ["trainer.pt", "model.pt", "rank_0.pt"]
    assert resumed.optimizers["dense"].param_groups[0]["weight_decay"] == 0.05
    assert resumed.optimizers["dense"].param_groups[0]["betas"] == (0.9, 0.9)
    assert resumed.optimizers["puzzle_emb"].param_groups[0]["weight_decay"] == 0.2


def test_a_rank_that_does_not_see_rank_zeros_step_folder_says_the_run_folder_must_be_shared(tmp_path):
    """Several nodes, each saving into a run folder on its own disk (here: each rank its own folder
    under one path): rank 1 cannot see the step folder rank 0 made. It raised alone, so rank 0 waited
    in the save's next collective until its timeout, the reason said by rank 1 only. Both ranks now
    raise the same error at once, naming the rank, the folder and the remedy; rank 0's `.tmp` goes."""
    import socket
    script = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']; "
              "from test_model_checkpoint import tiny_arch; from hrm.model import HRM; "
              "from hrm.distributed import init_distributed, shutdown; "
              "from hrm.train_checkpoint import save_checkpoint, CheckpointNotSaved; "
              "info = init_distributed('cpu'); model = HRM(tiny_arch(), 12, 8, 3, verbose=False)\n"
              "try: save_checkpoint(f'{sys.argv[2]}/node{info.rank}', step=4, model=model, optimizers={}, "
              "reader_state={}, carry=None, config={}, info=info)\n"
              "except CheckpointNotSaved as e: print('failed:', e)\n"
              "shutdown(wait_for_peers=True)")
    ranks = run_ranks([sys.executable, "-c", script, str(ROOT), str(tmp_path)], tmp_path,
                      dict(os.environ, OMP_NUM_THREADS="1"), port=29545, timeout=120)
    assert [r.returncode for r in ranks] == [0, 0], "".join(r.stderr for r in ranks)[-3000:]
    unseen = tmp_path / "node1" / ".step_4.tmp"
    for rank, r in enumerate(ranks):
        assert r.stdout == (f"failed: cannot save step 4 into {tmp_path / f'node{rank}'}: rank 1: {unseen}, which "
                            f"rank 0 made, is not there on {socket.gethostname()}: every rank saves its part of "
                            f"each checkpoint into the run folder, so with several nodes it must be on a filesystem they all share (set "
                            f"checkpoint_path to a folder there); the run's checkpoints are as they were\n"), r.stdout
    assert os.listdir(tmp_path / "node0") == [] and not (tmp_path / "node1").exists()


@pytest.mark.parametrize("damage", ["trainer.pt", "model.pt", "rank_0.pt", "no rank_0.pt"])
def test_a_damaged_checkpoint_is_named_and_the_previous_one_suggested(tiny_build, tmp_path, damage):
    """A truncated file of the newest checkpoint, or a rank file gone under an unchanged world size
    (its carry and random state cannot be made up), is an error naming the file and the previous
    checkpoint; from the command line exit 2 without a traceback."""
    run = tmp_path / "run"
    Trainer(micro_config(tiny_build, run, max_steps=2, checkpoint_interval=1, keep_checkpoints=0), CPU,
            progress=False).fit()
    name = damage.removeprefix("no ")
    target = run / "step_2" / name
    if damage.startswith("no "):
        target.unlink()
        expected = f"{target}: missing"
    else:
        target.write_bytes(target.read_bytes()[:3000])
        expected = str(target)
    hint = f"resume={run / 'step_1'} continues from the previous checkpoint"
    with pytest.raises(ValueError) as raised:
        Trainer(micro_config(tiny_build, run, max_steps=3, resume="latest"), CPU, progress=False)
    assert str(raised.value).startswith(expected) and str(raised.value).endswith(hint), raised.value
    if damage == "trainer.pt":
        cli = subprocess.run([sys.executable, str(ROOT / "pretrain.py"), "arch=hrm_tiny",
                              *[f"arch.{k}={v}" for k, v in MICRO_ARCH.items() if k != "scaling"],
                              "arch.scaling.rule=deeploop", f"data_path={tiny_build}", "global_batch_size=8",
                              "epochs=100", "eval_interval=100", "seed=3", f"checkpoint_path={run}", "resume=latest"],
                             cwd=tmp_path, capture_output=True, text=True, env=dict(os.environ, WANDB_MODE="disabled"))
        assert cli.returncode == 2 and expected in cli.stderr and hint in cli.stderr, cli.stderr[-2000:]
        assert "Traceback" not in cli.stderr
    # the previous checkpoint resumes
    assert Trainer(micro_config(tiny_build, run, max_steps=3, resume=str(run / "step_1")), CPU,
                   progress=False).step == 1


@pytest.mark.parametrize("differs", ["identifiers_sha256", "train"])
def test_ranks_that_read_other_builds_are_refused_before_anything_is_written(small_build, tmp_path, monkeypatch,
                                                                           differs):
    """Several nodes each read data_path from their own disk. Rank 1's copy is another build (other
    puzzle names: another --seed, the same sizes; or other sizes): it would compute the same global
    batch positions over other rows and train other puzzles' embedding rows under the same
    identifiers, silently. Every rank refuses, naming the ranks that differ from rank 0, and the run
    folder is left as it was (none)."""
    import hrm.run_checks as run_checks
    from hrm.distributed import RefusedOnEveryRank
    gathered = []

    def two_ranks(fingerprint, info):   # rank 0's (this process's) and rank 1's, as gathered
        gathered.append(fingerprint)
        other = dict(fingerprint, **{differs: "0" * 64 if differs == "identifiers_sha256" else (1, 2, 3, {})})
        return [fingerprint, other]
    monkeypatch.setattr(run_checks, "gather_objects", two_ranks, raising=False)
    run = tmp_path / "run"
    with pytest.raises(RefusedOnEveryRank) as raised:
        Trainer(micro_config(small_build, run), CPU, progress=False)
    assert str(raised.value) == (f"data_path={small_build}: rank 1 read another build than rank 0 (identifiers.json, "
                                 f"manifest digest or split sizes differ); with several nodes, every node needs the "
                                 f"same build at that path")
    assert not run.exists()
    from arc_data.dataset import load_split
    from arc_data.manifest import build_identity
    split = load_split(small_build, "train")
    assert gathered[0] == {**build_identity(small_build), **gathered[0]} and \
        gathered[0]["train"][:3] == (split.num_groups, split.num_puzzles, split.num_examples)


def test_a_test_split_of_another_build_is_refused_before_training(small_build, tmp_path):
    """The model's identifier table is sized by the train split: a test split copied in from a
    build with more puzzles failed with an IndexError in the embedding at the first evaluation,
    after the whole interval's training."""
    import shutil
    data = tmp_path / "data"
    shutil.copytree(small_build, data)
    meta_path = data / "test" / "dataset.json"
    meta = json.loads(meta_path.read_text())
    table = meta["num_puzzle_identifiers"]
    meta_path.write_text(json.dumps({**meta, "num_puzzle_identifiers": table + 10}))
    ids = np.load(data / "test" / "all__puzzle_identifiers.npy")
    ids[-1] = table + 5
    np.save(data / "test" / "all__puzzle_identifiers.npy", ids)
    with pytest.raises(ValueError, match=rf"^{meta_path}: num_puzzle_identifiers {table + 10} \(train: {table}\): "
                                         rf"the test split does not belong to the same build"):
        Trainer(micro_config(data, tmp_path / "run", max_steps=1), CPU, progress=False).fit()
    assert not (tmp_path / "run").exists()


def test_a_build_without_test_examples_is_warned_of(small_build, tmp_path, capsys):
    """A build from sources without an `evaluation` subset (ConceptARC's folders given as
    --source-dir) trains, but every evaluation would measure nothing: say so at the start."""
    from arc_data.build import BuildConfig, build
    src = tmp_path / "src" / "training"
    src.mkdir(parents=True)
    for i in range(3):
        grid = [[(i + r + c) % 10 for c in range(3)] for r in range(2)]
        (src / f"t{i}.json").write_text(json.dumps({"train": [{"input": grid, "output": grid}] * 2,
                                                     "test": [{"input": grid, "output": grid}]}))
    data = tmp_path / "b"
    build(BuildConfig(source_dir=str(tmp_path / "src"), num_aug=2, output_dir=str(data)), progress=False)
    capsys.readouterr()
    Trainer(micro_config(data, tmp_path / "run", max_steps=1), CPU, progress=False)
    assert f"warning: {data} has an empty test split" in capsys.readouterr().err
    Trainer(micro_config(small_build, tmp_path / "run2", max_steps=1), CPU, progress=False)
    assert "empty test split" not in capsys.readouterr().err


def test_a_warmup_longer_than_the_run_is_warned_of(small_build, tmp_path, capsys):
    """HRM's lr_warmup_steps=2000 kept in a 300-step run trains at lr * k / 2000 throughout (the
    README's stuck quickstart run): nothing said so. The warning names the fraction reached."""
    capsys.readouterr()
    Trainer(micro_config(small_build, tmp_path / "run", max_steps=3, lr_warmup_steps=12), CPU, progress=False)
    assert ("warning: lr_warmup_steps=12 is longer than the run (3 steps): the learning rates rise only to 3/12 "
            "of lr and puzzle_emb_lr (lr=0.001 reaches 0.00025 at its last step)") in capsys.readouterr().err
    Trainer(micro_config(small_build, tmp_path / "run2", max_steps=3, lr_warmup_steps=3), CPU, progress=False)
    assert "lr_warmup_steps" not in capsys.readouterr().err
    # without a puzzle embedding there is no puzzle_emb_lr to name
    Trainer(micro_config(small_build, tmp_path / "run3", max_steps=3, lr_warmup_steps=12,
                         arch={**MICRO_ARCH, "puzzle_emb_ndim": 0}), CPU, progress=False)
    assert "rise only to 3/12 of lr (lr=0.001" in capsys.readouterr().err


def test_a_cosine_decay_that_max_steps_cuts_short_is_noted(small_build, tmp_path, capsys):
    """The decay spans the estimated length, not max_steps: lr_min_ratio=0.1 max_steps=6 of a
    longer run ended near lr, not lr * 0.1, without a word."""
    capsys.readouterr()
    config = micro_config(small_build, tmp_path / "run", max_steps=6, lr_min_ratio=0.1)
    trainer = Trainer(config, CPU, progress=False)
    assert trainer.stop_step == 6 < trainer.total_steps
    reached = lr_at(6, 1e-3, 2, trainer.total_steps, 0.1)
    assert (f"note: lr_min_ratio=0.1: the cosine decay spans the run's estimated length ({trainer.total_steps} "
            f"steps from epochs=100), not max_steps=6: lr=0.001 reaches {reached:.3g} at step 6, not 0.0001; "
            f"lower epochs for a decay that ends with the run") in capsys.readouterr().err
    Trainer(micro_config(small_build, tmp_path / "run2", max_steps=6), CPU, progress=False)   # constant lr
    assert "cosine" not in capsys.readouterr().err


def test_a_cosine_decay_that_the_epochs_cut_short_is_noted_at_the_end(small_build, tmp_path, capsys):
    """The epochs draw one random puzzle per group, fewer batches than HRM's estimate (by the mean):
    the run ended part way down a decay spanning the estimate, above lr * lr_min_ratio, unsaid."""
    import math
    trainer = Trainer(micro_config(small_build, tmp_path / "run", epochs=1, eval_interval=None, max_steps=None,
                                   lr_min_ratio=0.1, lr_warmup_steps=1), CPU, progress=False)
    trainer.fit()
    end, total = trainer.step, trainer.total_steps
    assert 1 < end < total      # the build's epoch ran out before the estimate
    # the cosine by hand: from lr after warmup down to lr * 0.1 at the estimated total
    reached = 1e-4 + (1e-3 - 1e-4) * 0.5 * (1 + math.cos(math.pi * (end - 1) / (total - 1)))
    assert (f"note: lr_min_ratio=0.1: the epochs' batches ran out at step {end}, before the {total} steps the cosine "
            f"decay spans (the estimated length, from epochs=1): lr=0.001 ended at {reached:.3g}, not 0.0001\n"
            ) in capsys.readouterr().err
    # a constant lr (HRM's) has nothing to note; nor has a run that max_steps ends (noted at its start)
    Trainer(micro_config(small_build, tmp_path / "run2", epochs=1, eval_interval=None, max_steps=None,
                         lr_warmup_steps=1), CPU, progress=False).fit()
    Trainer(micro_config(small_build, tmp_path / "run3", epochs=1, eval_interval=None, max_steps=3,
                         lr_min_ratio=0.1, lr_warmup_steps=1), CPU, progress=False).fit()
    assert "ran out" not in capsys.readouterr().err


def test_a_max_steps_beyond_the_epochs_is_noted(small_build, tmp_path, capsys):
    """max_steps=40 with epochs=1 ended at the epochs' end (a few steps) without a word."""
    meta = json.loads((small_build / "train" / "dataset.json").read_text())
    groups, mean = meta["total_groups"], meta["mean_puzzle_examples"]
    per_epoch = groups * mean / 8
    epochs = 2
    assert 1 <= epochs * per_epoch < 40
    capsys.readouterr()
    Trainer(micro_config(small_build, tmp_path / "run", max_steps=40, epochs=epochs, eval_interval=None), CPU,
            progress=False)
    assert (f"note: max_steps=40 is beyond the run's epochs: epochs=2 end it at about step {int(epochs * per_epoch)} "
            f"(an epoch: {groups} puzzle groups x {mean:g} mean examples per puzzle / global_batch_size=8 = "
            f"{per_epoch:.3g} steps); "
            f"raise epochs to train longer") in capsys.readouterr().err
    Trainer(micro_config(small_build, tmp_path / "run2", max_steps=3), CPU, progress=False)   # within: nothing
    assert "max_steps" not in capsys.readouterr().err


def test_ranks_that_do_not_share_the_run_folder_are_refused_at_start_up(small_build, tmp_path):
    """Several nodes, each with checkpoint_path on its own disk (here: each rank its own folder):
    found only at the first save, hours in. Now every rank refuses at start-up, naming the rank, its
    folder and host, rank 0's, and the remedy; a folder that exists on that node, even with a run
    lock left in it (a node's own copy of a resumed run), does not pass for rank 0's. Ranks that do
    share their folder start, and rank 0's probe file is gone."""
    import socket
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / ".lock").write_text("pid 1 on elsewhere since 2020-01-01 00:00:00\n")
    script = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']; from test_train import *; "
              "from hrm.distributed import RefusedOnEveryRank, init_distributed, shutdown; "
              "info = init_distributed('cpu'); data, out = Path(sys.argv[2]), Path(sys.argv[3])\n"
              "try: Trainer(micro_config(data, out / f'node{info.rank}'), info, progress=False)\n"
              "except RefusedOnEveryRank as e: print('refused:', e)\n"
              "trainer = Trainer(micro_config(data, out / 'shared'), info, progress=False)\n"
              "print('shared:', sorted(p.name for p in trainer.run_dir.iterdir())); trainer.release_run_lock()\n"
              "shutdown(wait_for_peers=True)")
    ranks = run_ranks([sys.executable, "-c", script, str(ROOT), str(small_build), str(tmp_path)], tmp_path,
                      dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled"), port=29561, timeout=120)
    assert [r.returncode for r in ranks] == [0, 0], "".join(r.stderr for r in ranks)[-3000:]
    host = socket.gethostname()
    for r in ranks:
        assert (f"refused: rank 1: {tmp_path / 'node1'} on {host} is not the run folder rank 0 holds "
                f"({tmp_path / 'node0'} on {host}): a file rank 0 has just written there is not in it; every rank "
                f"saves its part of each checkpoint into the run folder, so with several nodes it must be on a "
                f"filesystem they all share (set checkpoint_path to a folder there)\n") in r.stdout, r.stdout
        assert "shared: ['.lock', 'all_config.yaml', 'log.jsonl']" in r.stdout, r.stdout
    # the refused start left rank 0's folder as it found it (none), and rank 1's untouched
    assert not (tmp_path / "node0").exists() and os.listdir(tmp_path / "node1") == [".lock"]


def test_a_rank_asks_again_below_a_folder_it_may_not_list(tmp_path, monkeypatch):
    """NFS may answer 'no such file' for rank 0's probe from a lookup cached before the run folder
    existed; listing each folder above it has the server asked again. A folder on the way that
    this user may pass through but not list (a shared /project of mode 711) ended the listing, so
    the run folder's parent was never asked again and a shared folder was refused as not shared."""
    from hrm.train_checkpoint import _sees
    locked, run = tmp_path / "project", tmp_path / "project" / "group" / "run"
    run.mkdir(parents=True)
    probe = run / ".shared_probe.x"
    real_listdir = os.listdir

    def listdir(folder):   # the server, asked again: the probe rank 0 wrote shows up now
        if Path(folder) == locked:
            raise PermissionError(13, "Permission denied", str(folder))
        if Path(folder) == run:
            probe.write_bytes(b"")
        return real_listdir(folder)
    monkeypatch.setattr(os, "listdir", listdir)
    assert _sees(probe)


def test_one_ranks_damaged_checkpoint_file_stops_every_rank(tiny_build, tmp_path):
    """Under torchrun each rank reads its own rank_<r>.pt: when rank 1's is truncated, rank 0 must
    not say "resumed" and go on into a collective rank 1 never reaches; both refuse, naming it.
    The ranks are started as torchrun starts them (run_ranks): every rank's own exit status shows
    that both refuse, where torchrun would stop a rank left waiting and report one status."""
    run = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "pretrain.py"), "arch=hrm_tiny",
           *[f"arch.{k}={v}" for k, v in MICRO_ARCH.items() if k != "scaling"], "arch.scaling.rule=deeploop",
           f"data_path={tiny_build}", "global_batch_size=8", "epochs=100", "eval_interval=100",
           "checkpoint_interval=1", "keep_checkpoints=0", f"checkpoint_path={run}", "eval_save_predictions=false"]
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    first = run_ranks(cmd + ["max_steps=2"], tmp_path, env, port=29523)
    assert [r.returncode for r in first] == [0, 0], "".join(r.stderr for r in first)[-3000:]
    damaged = run / "step_2" / "rank_1.pt"
    damaged.write_bytes(damaged.read_bytes()[:100])
    again = run_ranks(cmd + ["max_steps=3", "resume=latest"], tmp_path, env, port=29549)
    stdout, stderr = "".join(r.stdout for r in again), "".join(r.stderr for r in again)
    assert [r.returncode for r in again] == [2, 2] and "resumed from" not in stdout, (stdout + stderr)[-3000:]
    # said once (both ranks raise it: LOCAL_RANK 0 says it), naming the rank whose file it is
    assert stderr.count(f"pretrain.py: error: rank 1: {damaged} is not a checkpoint") == 1, stderr[-3000:]
    assert stderr.count(f"{damaged} is not a checkpoint") == 1, stderr[-3000:]
    assert f"resume={run / 'step_1'} continues from the previous checkpoint" in again[0].stderr


def test_ranks_resumed_under_another_world_size_draw_their_own_exploration(tiny_build, tmp_path):
    """A checkpoint of one process resumed by two: its random state is not restored (it is another
    world's), and each rank is seeded as a fresh run's is (seed + rank), not left at what model
    init left, which every rank shares (the same exploration draws on every rank)."""
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1), CPU, progress=False).fit()
    draw = ("import sys, torch; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']; from test_train import *; "
            "from hrm.distributed import init_distributed, shutdown; info = init_distributed('cpu'); "
            "Trainer(micro_config(Path(sys.argv[2]), Path(sys.argv[3]), resume='latest'), info, progress=False); "
            "print('draws', torch.rand(4).tolist()); shutdown(wait_for_peers=True)")
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    ranks = run_ranks([sys.executable, "-c", draw, str(ROOT), str(tiny_build), str(tmp_path / "run")], tmp_path, env,
                      port=29539)
    assert [r.returncode for r in ranks] == [0, 0], "".join(r.stderr for r in ranks)[-3000:]
    draws = [next(line for line in r.stdout.splitlines() if line.startswith("draws")) for r in ranks]
    assert draws[0] != draws[1]


def run_ranks(cmd: list[str], cwd: Path, env: dict, port: int, world_size: int = 2,
              timeout: float = 300, while_running=None) -> list[subprocess.CompletedProcess]:
    """`cmd` as the ranks of one gloo group on this machine, each with the environment torchrun
    gives it, but without torchrun: that stops the other ranks as soon as one exits and reports
    one exit status, where this returns every rank's own status and output. `while_running` is
    called with the ranks' processes once all have started."""
    import tempfile
    ranks = []
    try:
        for rank in range(world_size):
            out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                            LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            ranks.append((subprocess.Popen(cmd, cwd=cwd, env=rank_env, stdout=out, stderr=err, text=True), out, err))
        if while_running is not None:
            while_running([proc for proc, _, _ in ranks])
        done = []
        for proc, out, err in ranks:
            proc.wait(timeout=timeout)
            out.seek(0)
            err.seek(0)
            done.append(subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read()))
        return done
    finally:
        for proc, out, err in ranks:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close()
            err.close()


def test_a_start_refused_under_two_ranks_is_said_once_and_every_rank_exits_2(small_build, tmp_path):
    """The trainer's start-up checks are one stage whose outcome the ranks exchange. Refused on
    every rank (resume=latest over a folder without checkpoints): said once, in its own words, and
    every rank exits 2. Refused on one rank only (here its checkpoint_path, by RANK, holds a
    checkpoint; on a cluster, a file missing on one node): the other rank neither trains nor waits
    in a collective, and the message names the rank."""
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    empty = tmp_path / "empty"
    (tmp_path / "run1" / "step_1").mkdir(parents=True)
    (tmp_path / "run1" / "step_1" / "trainer.pt").write_bytes(b"")
    everywhere, on_one = together(
        lambda: run_ranks(pretrain_cmd(small_build, empty, "resume=latest"), tmp_path, env, port=29525),
        lambda: run_ranks(pretrain_cmd(small_build, tmp_path / "run${oc.env:RANK}", "max_steps=1"), tmp_path, env,
                          port=29527))
    ranks = everywhere
    stderr = "".join(r.stderr for r in ranks)
    assert [r.returncode for r in ranks] == [2, 2], stderr[-3000:]
    assert stderr.count("error: resume=latest") == 1, stderr[-3000:]
    assert f"pretrain.py: error: resume=latest: no checkpoint under {empty}\n" in ranks[0].stderr
    assert "Traceback" not in stderr

    ranks = on_one
    stderr = "".join(r.stderr for r in ranks)
    assert [r.returncode for r in ranks] == [2, 2], stderr[-3000:]
    assert stderr.count("already holds checkpoints") == 1, stderr[-3000:]
    assert (f"pretrain.py: error: rank 1: {tmp_path / 'run1'} already holds checkpoints (step_1); pass resume=latest"
            in ranks[0].stderr)
    assert "Traceback" not in stderr and not (tmp_path / "run0").exists()


def test_a_run_that_rank_zero_cannot_open_stops_every_rank_at_once(small_build, tmp_path):
    """Rank 0 alone opens the run's log, after every check passed: W&B 'online' that cannot reach
    its server refused there while rank 1 went on into the first step's all-reduce and waited in
    it until its timeout. Both ranks now raise the same refusal, naming rank 0."""
    script = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']; "
              "import hrm.train; from test_train import micro_config; "
              "from hrm.distributed import RefusedOnEveryRank, init_distributed, shutdown; "
              "info = init_distributed('cpu')\n"
              "def unreachable(*args, **kwargs): raise ValueError(\"W&B mode 'online' could not start\")\n"
              "hrm.train.RunLog = unreachable\n"
              "try: hrm.train.Trainer(micro_config(sys.argv[2], sys.argv[3], max_steps=2), info, progress=False).fit()\n"
              "except RefusedOnEveryRank as e: print('refused:', e)\n"
              "shutdown(wait_for_peers=True)")
    ranks = run_ranks([sys.executable, "-c", script, str(ROOT), str(small_build), str(tmp_path / "run")], tmp_path,
                      dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled"), port=29547, timeout=120)
    assert [r.returncode for r in ranks] == [0, 0], "".join(r.stderr for r in ranks)[-3000:]
    for r in ranks:
        assert r.stdout.endswith("refused: rank 0: W&B mode 'online' could not start\n"), r.stdout
    assert not list((tmp_path / "run").glob("step_*"))


def test_a_divergence_under_two_ranks_is_recorded_and_said_once(small_build, tmp_path):
    """Both ranks see the same all-reduced non-finite loss at the same step: both exit 3, the
    reason is said once, and rank 0's diverged.json is written (a rank exiting first could have
    had torchrun stop rank 0 before it wrote the record the p-sweep reads)."""
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    run = tmp_path / "run"
    ranks = run_ranks(pretrain_cmd(small_build, run, "lr=1e30", "max_steps=6"), tmp_path, env, port=29529)
    stderr = "".join(r.stderr for r in ranks)
    assert [r.returncode for r in ranks] == [3, 3], stderr[-3000:]
    assert stderr.count("training diverged: non-finite") == 1, stderr[-3000:]
    assert "pretrain.py: error: training diverged" in ranks[0].stderr
    assert "Traceback" not in stderr and "terminate called" not in stderr
    assert json.loads((run / "diverged.json").read_text())["step"] <= 6


def test_sigterm_to_one_rank_stops_every_rank_after_the_same_step_saved(small_build, tmp_path):
    """A scheduler's SIGTERM that reaches one rank first: the flag travels with the step's metrics,
    so both ranks save the same step (a complete checkpoint) and exit 143; said once."""
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    run = tmp_path / "run"

    def terminate_rank_1(procs):
        deadline = time.time() + 120
        while time.time() < deadline and len(losses_by_step(run) if (run / "log.jsonl").is_file() else ()) < 2:
            time.sleep(0.02)
        procs[1].send_signal(signal.SIGTERM)
    ranks = run_ranks(pretrain_cmd(small_build, run, "max_steps=40"), tmp_path, env, port=29535,
                      while_running=terminate_rank_1)
    stderr = "".join(r.stderr for r in ranks)
    assert [r.returncode for r in ranks] == [143, 143], stderr[-3000:]
    step = int(re.search(r"stopped by SIGTERM at step (\d+), saved as", ranks[0].stderr)[1])
    assert stderr.count("stopped by SIGTERM") == 1 and "Traceback" not in stderr
    assert step < 40 and (run / "latest").read_text() == f"step_{step}"
    assert sorted(p.name for p in (run / f"step_{step}").iterdir()) == ["model.pt", "rank_0.pt", "rank_1.pt", "trainer.pt"]


def test_ctrl_c_says_where_the_run_stands(small_build, tmp_path):
    """SIGINT (Ctrl-C) during training: exit 130 with the step and how to continue, no traceback."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(ROOT / "pretrain.py"), "arch=hrm_tiny",
                             *[f"arch.{k}={v}" for k, v in MICRO_ARCH.items() if k != "scaling"],
                             "arch.scaling.rule=deeploop", f"data_path={small_build}", "global_batch_size=8",
                             "epochs=1000", "eval_interval=1000", "checkpoint_interval=1", f"checkpoint_path={run}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, WANDB_MODE="disabled"))
    deadline = time.time() + 120
    while not (run / "latest").is_file() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)     # training has begun: a checkpoint is written after every step
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "pretrain.py: interrupted at step" in err and f"continue from the newest with resume={run}" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_ctrl_c_inside_a_checkpoint_write_is_an_interruption(tiny_build, tmp_path):
    """A Ctrl-C that lands inside torch.save stops its zip writer mid-record, and the writer's
    clean-up then raises its own RuntimeError ('unexpected pos ...', the KeyboardInterrupt only its
    context): seen in CI as a traceback and exit 1. Here torch.save does exactly that once the first
    checkpoint is complete (in the second one's first file); the run must end as any Ctrl-C does,
    naming the checkpoint to continue from."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, torch\n"
        "real_save = torch.save\n"
        "def save(*args, **kwargs):\n"
        "    if os.path.exists(os.path.join(os.environ['RUN_DIR'], 'latest')):\n"
        "        try:\n"
        "            raise KeyboardInterrupt\n"
        "        finally:\n"
        "            raise RuntimeError('[enforce fail at inline_container.cc:672] . unexpected pos 47808 vs 47696')\n"
        "    return real_save(*args, **kwargs)\n"
        "torch.save = save\n")
    run = tmp_path / "run"
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1", RUN_DIR=str(run),
               PYTHONPATH=os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "pretrain.py"), "arch=hrm_tiny",
                           *[f"arch.{k}={v}" for k, v in MICRO_ARCH.items() if k != "scaling"],
                           f"data_path={tiny_build}", "global_batch_size=8", "max_steps=4", "checkpoint_interval=1",
                           f"checkpoint_path={run}"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 130, done.stderr[-3000:]
    assert f"pretrain.py: interrupted at step 2; the run's checkpoints are in {run}" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "unexpected pos" not in done.stderr
    # the half-written second checkpoint is not taken for one: the run continues from step 1
    env.pop("RUN_DIR")
    resumed = subprocess.run([sys.executable, str(ROOT / "pretrain.py"), f"resume={run}"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120, env=dict(env, PYTHONPATH=str(ROOT)))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {run / 'step_1'} at step 1" in resumed.stdout and "done: step 4" in resumed.stdout, resumed.stdout


def test_ctrl_c_or_sigterm_in_a_sweep_says_how_to_continue_it(small_build, tiny_build, tmp_path):
    """Ctrl-C in a sweep's job before its first checkpoint: the same command again would be refused
    once an earlier job holds checkpoints (or start a new sweep of default names), so the line names
    the same sweep with resume=latest, as a SIGTERM's does, not 'run the same command again'.
    Ctrl-C or SIGTERM outside any job's training (here as Hydra's launcher starts a job: between
    two jobs, in Hydra's own code): Ctrl-C was Hydra's KeyboardInterrupt traceback, SIGTERM a silent
    death, neither naming the jobs that diverged before nor how to continue the sweep (the run_name
    of default names). Now exit 130 or 143 and one line naming the last job run and the same sweep
    with resume=latest; before any job ran, 'before training'. (The four sweeps run two at a time.)"""

    def ctrl_c_during_a_job() -> tuple[int, str]:
        sweep = tmp_path / "during" / "sweep"
        sweep.parent.mkdir()
        # small_build: its first checkpoint (eval_interval=100 epochs) is thousands of steps away
        proc = subprocess.Popen([*pretrain_cmd(small_build, sweep, "lr=1e-3,2e-3", "hydra.sweep.dir=hydra"), "-m"],
                                cwd=sweep.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(ROOT),
                                         OMP_NUM_THREADS="1"))
        log = sweep / "lr=0.001" / "log.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and "train/lm_loss" not in (
                log.read_text() if log.is_file() else ""):
            time.sleep(0.1)     # the first job trains, with no checkpoint yet (epochs=100)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, signal\n"
        "import hydra.core.utils\n"     # the launcher's module is loaded later, with the run_job found here
        "from omegaconf import OmegaConf\n"
        "launch_job = hydra.core.utils.run_job\n"
        "def stop():\n"
        "    if os.environ['STOP_WITH'] == 'SIGTERM':\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    raise KeyboardInterrupt   # what SIGINT raises (also where a test runner ignores SIGINT)\n"
        "def run_job(*args, **kwargs):\n"
        "    job = kwargs['config'].hydra.job\n"
        "    num = 0 if OmegaConf.is_missing(job, 'num') else job.num\n"
        "    if num == int(os.environ.get('STOP_AT_JOB', -1)):\n"
        "        stop()\n"
        "    ran = launch_job(*args, **kwargs)\n"
        "    if num == int(os.environ.get('STOP_AFTER_JOB', -1)):   # as Hydra closes the sweep, for the last\n"
        "        stop()\n"
        "    return ran\n"
        "hydra.core.utils.run_job = run_job\n"
        "import hydra._internal.hydra\n"  # a single run's: it holds its own name for run_job
        "hydra._internal.hydra.run_job = run_job\n")

    def sweep(at: int, stop: str, when: str = "AT"):
        cwd = tmp_path / f"{stop}-{when}-{at}"
        cwd.mkdir()
        env = dict(os.environ, WANDB_MODE="disabled", STOP_WITH=stop, **{f"STOP_{when}_JOB": str(at)},
                   PYTHONPATH=os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        run = subprocess.run(sweep_cmd(tiny_build, "lr=1e30,1e-3"), cwd=cwd, capture_output=True, text=True,
                             timeout=300, env=env)
        assert "Traceback" not in run.stderr, run.stderr[-3000:]
        return run, cwd / "checkpoints" / "sweep"

    def single_run():   # a run that is no sweep, stopped starting up: said as a sweep's first job is
        env = dict(os.environ, WANDB_MODE="disabled", STOP_AT_JOB="0", STOP_WITH="SIGTERM",
                   PYTHONPATH=os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        return subprocess.run(pretrain_cmd(tiny_build, tmp_path / "single"), capture_output=True, text=True,
                              timeout=300, env=env)
    [(during, during_err), (ctrl_c, ctrl_c_runs), (sigterm, sigterm_runs), (first, first_runs), single,
     (after_last, after_last_runs)] = together(
        ctrl_c_during_a_job, lambda: sweep(1, "SIGINT"), lambda: sweep(1, "SIGTERM"), lambda: sweep(0, "SIGINT"),
        single_run, lambda: sweep(1, "SIGTERM", "AFTER"))
    assert during == 130, during_err[-3000:]
    assert "before the run's first checkpoint" in during_err and "run the same command again" not in during_err
    assert "run the same sweep with resume=latest to continue it" in during_err
    for run, runs, code, said in ((ctrl_c, ctrl_c_runs, 130, "interrupted"), (sigterm, sigterm_runs, 143,
                                                                               "stopped by SIGTERM")):
        assert run.returncode == code, run.stderr[-3000:]
        names = sorted(p.name for p in runs.iterdir())
        assert [name.split("-lr=")[1] for name in names] == ["1e+30"]     # the second job never started
        name = names[0].split("-lr=")[0]                                  # micro-<time>
        assert run.stderr.endswith(
            f"pretrain.py: {said} before the sweep's next job trained, after its job {names[0]}; the sweep stops "
            f"here (any job after this one is not started): run the same sweep with resume=latest run_name={name} "
            f"to continue it\npretrain.py: 1 run(s) of the sweep diverged: {names[0]}\n"), run.stderr[-3000:]
    assert first.returncode == 130 and first.stderr.endswith("\npretrain.py: interrupted before training\n"), \
        first.stderr[-3000:]
    assert not first_runs.exists()
    assert single.returncode == 143 and single.stderr == "pretrain.py: stopped by SIGTERM before training\n", \
        single.stderr[-3000:]
    assert not (tmp_path / "single").exists()
    # after the last job: every job ran, and there is no next job to continue (it said there was)
    names = sorted(p.name for p in after_last_runs.iterdir())
    assert after_last.returncode == 143 and [name.split("-lr=")[1] for name in names] == ["0.001", "1e+30"]
    assert after_last.stderr.endswith(
        f"pretrain.py: stopped by SIGTERM after the sweep's last job {names[0]} ended: every job ran\n"
        f"pretrain.py: 1 run(s) of the sweep diverged: {names[1]}\n"), after_last.stderr[-3000:]


def test_ctrl_c_before_the_first_checkpoint_does_not_suggest_resume(tmp_path):
    """resume=<run folder> is refused while the folder holds no checkpoint: the Ctrl-C line must not
    send the user there, but say to run the command again; once a checkpoint exists it names resume."""
    import importlib.util
    from types import SimpleNamespace
    spec = importlib.util.spec_from_file_location("pretrain_script", ROOT / "pretrain.py")
    pretrain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pretrain)
    run = tmp_path / "run"
    run.mkdir()
    said = pretrain.where_the_run_stands(SimpleNamespace(step=27, run_dir=run))
    assert "at step 27, before the run's first checkpoint" in said and "resume=" not in said
    (run / "step_20").mkdir()
    (run / "step_20" / "trainer.pt").write_bytes(b"")
    assert f"continue from the newest with resume={run}" in pretrain.where_the_run_stands(
        SimpleNamespace(step=27, run_dir=run))
    assert pretrain.where_the_run_stands(None) == "before training"


def test_suggested_resume_of_a_sweep_run_parses_as_that_path(tmp_path, capsys):
    """A sweep names its runs `<name>-<key>=<value>`. The resume= that the Ctrl-C and SIGTERM lines
    and the damaged- or missing-step hints suggest is pasted into a shell and read by Hydra, whose
    grammar stops at a bare second `=` ("mismatched input '='", naming no argument): the suggestion
    is quoted so that it parses as the run's path, and a bare one typed by hand is named, with the
    quoted form. predict.py's checkpoint= splits at the first `=`: left as it is."""
    import importlib.util
    import shlex
    from types import SimpleNamespace

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hrm.run_folders import missing_step_hint, previous_checkpoint_hint
    spec = importlib.util.spec_from_file_location("pretrain_script", ROOT / "pretrain.py")
    pretrain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pretrain)
    run = tmp_path / "S-arch.scaling.p=0.3"
    for step in (10, 20):
        (run / f"step_{step}").mkdir(parents=True)
        (run / f"step_{step}" / "trainer.pt").write_bytes(b"")

    def as_hydra_reads_it(said: str) -> str:
        """The value of the one resume= suggested in `said`, pasted into a shell and read by Hydra."""
        [suggested] = re.findall(r"""'resume=[^']*'|resume=\S+""", said)
        [override] = OverridesParser.create().parse_overrides(shlex.split(suggested))
        return override.value()
    quoted = f"""'resume="{run}"'"""
    stands = pretrain.where_the_run_stands(SimpleNamespace(step=27, run_dir=run))
    assert stands.endswith(f"with {quoted}") and as_hydra_reads_it(stands) == str(run)
    assert as_hydra_reads_it(str(TrainingStopped(20, run / "step_20", run))) == str(run)
    assert as_hydra_reads_it(missing_step_hint(run / "step_3")) == str(run)
    assert as_hydra_reads_it(previous_checkpoint_hint(run / "step_20")) == str(run / "step_10")
    assert f": checkpoint={run} evaluates its newest" in missing_step_hint(run / "step_3", "checkpoint", "evaluates")
    with pytest.raises(SystemExit) as refused:
        pretrain.check_overrides([f"resume={run}", "max_steps=5"])
    said = capsys.readouterr().err
    assert refused.value.code == 2 and said.startswith(f"pretrain.py: invalid config: resume={run}: ")
    assert said.rstrip().endswith(f"quote it for Hydra (and the shell): {quoted}"), said
    pretrain.check_overrides([f'resume="{run}"', "max_steps=5"])   # the quoted form passes

def test_resuming_a_finished_run_says_so(tiny_build, tmp_path):
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1, eval_save_predictions=False), CPU,
            progress=False).fit()
    # resume= alone: the run's own settings (max_steps=1 among them) come from its checkpoint
    again = subprocess.run([sys.executable, str(ROOT / "pretrain.py"), f"resume={tmp_path / 'run'}"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, WANDB_MODE="disabled"))
    assert again.returncode == 0 and "done: the run had already finished at step 1" in again.stdout, \
        again.stdout + again.stderr[-2000:]


def test_a_run_estimated_at_zero_steps_is_refused_before_its_folder_is_made(small_build, tmp_path):
    """epochs x examples / batch below one step: refused with the sum, not a fresh run that trains
    nothing, saves step_0 and says it 'had already finished'."""
    with pytest.raises(ValueError, match=r"would train 0 steps: .*epochs=1 x .*global_batch_size=1024"):
        Trainer(micro_config(small_build, tmp_path / "run", epochs=1, eval_interval=None, global_batch_size=1024),
                CPU, progress=False)
    assert not (tmp_path / "run").exists()
    # ~60 examples an epoch, 4 epochs: 3 steps estimated, but each 1-epoch interval is less than a
    # batch of 64 and its incomplete batch is dropped, so not one step would run
    with pytest.raises(ValueError, match=r"would train 0 steps: each evaluation interval \(eval_interval=1 epochs\) "
                                         r"draws about .* less than one global_batch_size=64"):
        Trainer(micro_config(small_build, tmp_path / "run", epochs=4, eval_interval=1, global_batch_size=64,
                             max_steps=None), CPU, progress=False)
    assert not (tmp_path / "run").exists()


def test_log_interval_still_logs_the_last_step(tiny_build, small_build, tmp_path):
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=4, log_interval=3), CPU, progress=False).fit()
    assert sorted(losses_by_step(tmp_path / "run")) == [3, 4]
    # a run ended by its epochs (as every full run is: the step estimate is high): seed 4 draws 5
    # batches in its one epoch, estimated at 7 steps; step 5 went unlogged
    ended = Trainer(micro_config(small_build, tmp_path / "epochs", epochs=1, eval_interval=None, max_steps=None,
                                 seed=4, log_interval=2, eval_save_predictions=False), CPU, progress=False)
    assert ended.fit()["step"] == 5 and ended.stop_step == 7
    assert sorted(losses_by_step(tmp_path / "epochs")) == [2, 4, 5]


def test_the_progress_bar_into_a_file_is_redrawn_rarely(tiny_build, tmp_path, capsys, monkeypatch):
    """stderr into a file (a SLURM or nohup log): tqdm redrew the bar up to 10 times a second there,
    each redraw kept (~80 MB a day); now the first and last, and one every 30 s between. On a
    terminal it is still live."""
    import hrm.run_log
    step = Trainer.train_step

    def slow(self, batch):   # each step outlasts tqdm's 0.1 s between redraws
        time.sleep(0.15)
        return step(self, batch)
    monkeypatch.setattr(Trainer, "train_step", slow)
    Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=4, eval_interval=None), CPU).fit()
    assert capsys.readouterr().err.count("train: ") == 2
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert hrm.run_log.progress_bar([], file=io.StringIO()).mininterval == 0.1


def test_a_local_rank_beyond_the_visible_gpus_is_named(monkeypatch):
    from hrm.distributed import init_distributed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "3")
    with pytest.raises(RuntimeError, match="LOCAL_RANK 3 but only 2 GPU.s. are visible"):
        init_distributed("auto")


def test_a_world_size_without_torchrun_is_named(small_build, monkeypatch, tmp_path, capsys):
    from evaluate import predict
    from hrm.distributed import init_distributed
    for key in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(RuntimeError, match="WORLD_SIZE=2 is set but RANK, MASTER_ADDR are not: start several "
                                           "processes with torchrun"):
        init_distributed("cpu")
    # predict.py reads the checkpoint first, then says so with exit 2 (no traceback)
    from hrm.checkpoint import save_model
    from hrm.config import ArchConfig
    from hrm.model import HRM
    ids = json.loads((small_build / "test" / "dataset.json").read_text())["num_puzzle_identifiers"]
    save_model(str(tmp_path / "step_1" / "model.pt"), HRM(ArchConfig(**MICRO_ARCH), 12, 900, ids, verbose=False))
    capsys.readouterr()
    assert predict.main([f"checkpoint={tmp_path / 'step_1'}", "device=cpu", "batch_size=8",
                         f"data_path={small_build}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("predict.py: error: WORLD_SIZE=2 is set but RANK, MASTER_ADDR are not") and "Traceback" not in err


def test_compile_eval_compiles_the_evaluation_segment_and_keeps_its_numbers(tiny_build, tmp_path, monkeypatch):
    """compile_eval=auto follows compile (off on CPU by default); compile_eval=true runs the
    evaluation through a compiled segment, which gives the eager evaluation's metrics and trains
    the same (training itself stays eager here)."""
    import torch._dynamo
    import torch._dynamo.testing

    import hrm.train
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(hrm.train, "compiled_segment",   # the real settings, a backend fast enough for a test
                        lambda model: torch.compile(model.segment, backend=counter, dynamic=False))
    plain = Trainer(micro_config(tiny_build, tmp_path / "plain", max_steps=2), CPU, progress=False)
    assert plain.eval_segment is None and plain.step_fn is plain.loss_head
    torch._dynamo.reset()
    try:
        compiled = Trainer(micro_config(tiny_build, tmp_path / "compiled", max_steps=2, compile_eval=True),
                           CPU, progress=False)
        assert compiled.eval_segment is not None and compiled.step_fn is compiled.loss_head
        result = compiled.fit()
    finally:
        torch._dynamo.reset()
    expected = plain.fit()
    assert counter.frame_count == 1 and compiled.history == plain.history
    assert expected["eval"].keys() == result["eval"].keys() and expected["eval"]["count"] > 0
    for key, value in expected["eval"].items():
        assert result["eval"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def sweep_cmd(data: Path, *extra: str) -> list[str]:
    micro = [f"arch.{k}={v}" for k, v in MICRO_ARCH.items() if k != "scaling"] + ["arch.scaling.rule=deeploop"]
    return [sys.executable, str(ROOT / "pretrain.py"), "-m", *extra, "arch=hrm_tiny", *micro, f"data_path={data}",
            "global_batch_size=8", "epochs=100", "eval_interval=100", "max_steps=3", "lr_warmup_steps=0",
            "eval_save_predictions=false", "project_name=sweep"]


def check_sweep(run, runs_dir: Path, tmp_path: Path, prefix: str) -> None:
    """lr 1e30 diverges (it overflows the activations at once), lr 1e-3 trains; the sweep goes on
    after the divergence, then exits 3. Run names: `prefix` then the swept value."""
    assert run.returncode == 3, run.stderr[-3000:]
    runs = {r.name: r for r in runs_dir.iterdir()}
    assert all(name.startswith(prefix) for name in runs), runs
    by_value = {name[name.index("-lr=") + 1:]: r for name, r in runs.items()}
    assert sorted(by_value) == ["lr=0.001", "lr=1e+30"], runs          # as Hydra writes the values
    ok, diverged = by_value["lr=0.001"], by_value["lr=1e+30"]
    assert (ok / "latest").read_text() == "step_3" and not (ok / "diverged.json").exists()
    assert json.loads((diverged / "diverged.json").read_text())["step"] <= 3
    assert f"1 run(s) of the sweep diverged: {diverged.name}" in run.stderr
    records = list((tmp_path / "checkpoints" / "multirun").iterdir())
    assert len(records) == 1 and os.listdir(records[0]) == ["multirun.yaml"]    # no empty job folders


def test_a_hydra_sweep_names_its_runs_by_the_swept_values_and_survives_a_divergence(tiny_build, tmp_path):
    """`pretrain.py -m ... lr=1e30,1e-3`: each job's default run name ends in its swept value; the
    diverging job is recorded and the sweep goes on, then exits 3; Hydra's sweep record lands
    under checkpoints/, not in the working directory.
    The same sweep given in `hydra.sweeper.params` of a config chosen with `--config-name NAME` (a
    flag whose value is a separate argument) and a fixed run_name (this was
    test_a_sweep_from_a_config_file_with_a_run_name): the jobs are still told apart
    (`<run_name>-lr=...`) and the divergence still does not stop the sweep. The two sweeps run at
    once, each in a working directory of its own."""
    configs = tmp_path / "cfgs"
    configs.mkdir()
    (configs / "sweep.yaml").write_text("defaults:\n  - cfg_pretrain\n  - _self_\n"
                                        "hydra:\n  sweeper:\n    params:\n      lr: 1e30,1e-3\n")
    from_file = ["--config-dir", str(configs), "--config-name", "sweep", "run_name=mine"]
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    cli, named = tmp_path / "cli", tmp_path / "named"

    def sweep(cwd: Path, *extra: str) -> subprocess.CompletedProcess:
        cwd.mkdir(exist_ok=True)
        return subprocess.run(sweep_cmd(tiny_build, *extra), cwd=cwd, capture_output=True, text=True, timeout=600,
                              env=env)
    run, run_named = together(lambda: sweep(cli, "lr=1e30,1e-3"), lambda: sweep(named, *from_file))
    check_sweep(run, cli / "checkpoints" / "sweep", cli, prefix="micro-")   # <arch>-<time>-lr=...
    # <time> is the one the sweep's record folder is named after, so each is found from the other
    from datetime import datetime
    record = next((cli / "checkpoints" / "multirun").iterdir()).name          # 2026-12-04_06-10-00
    stamp = datetime.strptime(record, "%Y-%m-%d_%H-%M-%S").strftime("%Y%m%d-%H%M%S")
    assert sorted(r.name for r in (cli / "checkpoints" / "sweep").iterdir()) == \
        [f"micro-{stamp}-lr=0.001", f"micro-{stamp}-lr=1e+30"]
    assert sorted(os.listdir(cli)) == ["checkpoints"]
    check_sweep(run_named, named / "checkpoints" / "sweep", named, prefix="mine-lr=")
    # resume=latest over the sweep: the trained job continues its own run; the diverged one never
    # wrote a checkpoint, so it starts afresh (its old record archived) instead of stopping the sweep
    again = subprocess.run([a.replace("max_steps=3", "max_steps=4") for a in
                            sweep_cmd(tiny_build, *from_file, "resume=latest")],
                           cwd=named, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 3, again.stderr[-3000:]
    runs = named / "checkpoints" / "sweep"
    assert (runs / "mine-lr=0.001" / "latest").read_text() == "step_4"
    assert "resumed from" in again.stdout and "this job of the sweep starts afresh" in again.stdout
    assert (runs / "mine-lr=1e+30" / "diverged.json").is_file()                  # diverged again
    assert [f.name for f in (runs / "mine-lr=1e+30").glob("diverged.*.json")] == ["diverged.2.json"]  # archived


def test_a_sweep_under_torchrun_runs_every_job(tiny_build, tmp_path):
    """2 gloo ranks, 3 jobs: the process group is kept from job to job (made again on the same
    torchrun store, its first collective could deadlock, about every other time)."""
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    # a sweep dir that differs by rank, as ${now} does when the ranks start a second apart: the
    # record is rank 0's alone
    cmd = sweep_cmd(tiny_build, "arch.scaling.p=0.4,0.5,0.6", "hydra.sweep.dir=checkpoints/multirun/rank${oc.env:RANK}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29519"] + cmd[1:]
    run = subprocess.run([a.replace("max_steps=3", "max_steps=1") for a in cmd], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    # Hydra's launcher log, from rank 0 alone
    assert run.stdout.count("Launching 3 jobs locally") == 1 and run.stdout.count("#0 : ") == 1, run.stdout[-3000:]
    runs = sorted(r.name.split("-", 3)[-1] for r in (tmp_path / "checkpoints" / "sweep").iterdir())
    assert runs == ["arch.scaling.p=0.4", "arch.scaling.p=0.5", "arch.scaling.p=0.6"]
    assert os.listdir(tmp_path / "checkpoints" / "multirun") == ["rank0"]
    assert (tmp_path / "checkpoints" / "multirun" / "rank0" / "multirun.yaml").is_file()


def test_a_job_failing_on_one_rank_stops_a_torchrun_sweep(small_build, tmp_path):
    """An exception on one rank only (one GPU out of memory, here an injected error at rank 1's
    second step): Hydra would note it and start the next job on that rank alone while rank 0 waits
    in the first job's collectives (a hang). The failing rank stops; torchrun stops the other."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '1':\n"
        "    import hrm.train\n"
        "    step = hrm.train.Trainer.train_step\n"
        "    def failing(self, batch):\n"
        "        if self.step == 1:\n"
        "            raise RuntimeError('injected failure on rank 1')\n"
        "        return step(self, batch)\n"
        "    hrm.train.Trainer.train_step = failing\n")
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = sweep_cmd(small_build, "arch.scaling.p=0.4,0.5")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29531"] + cmd[1:]
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode != 0, run.stderr[-3000:]
    assert "RuntimeError: injected failure on rank 1" in run.stderr, run.stderr[-3000:]
    runs = [r.name for r in (tmp_path / "checkpoints" / "sweep").iterdir()]
    assert len(runs) == 1 and runs[0].endswith("arch.scaling.p=0.4"), runs    # the second job never started


def test_the_sweep_check_resolves_hydra_interpolations_as_the_jobs_will(small_build, tmp_path):
    """`${hydra:job.num}` in a config file or on the command line resolves in the check as in the
    job (it is not a bad job, and the check is not skipped): only the really bad job is named."""
    configs = tmp_path / "cfgs"
    configs.mkdir()
    (configs / "numbered.yaml").write_text("defaults:\n  - cfg_pretrain\n  - _self_\n"
                                           "checkpoint_path: runs/job${hydra:job.num}\n")
    env = dict(os.environ, WANDB_MODE="disabled")
    for run in together(*[lambda extra=extra: subprocess.run(
            [a for a in sweep_cmd(small_build, *extra, "lr=1e-3,-1") if a != "project_name=sweep"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
            for extra in (["--config-dir", str(configs), "--config-name", "numbered"],
                          ["checkpoint_path=runs/cli${hydra:job.num}"])]):
        assert run.returncode == 2, run.stderr[-3000:]
        assert "invalid sweep: 1 of its 2 jobs cannot run" in run.stderr and "job #1 (lr=-1)" in run.stderr
        assert not (tmp_path / "runs").exists() and not (tmp_path / "checkpoints").exists()


def test_jobs_that_would_share_a_run_folder_stop_the_sweep_before_it_starts(small_build, tmp_path):
    """Hydra writes `lr=1e-3` and `lr=0.001` alike, so both jobs got one tag, one run folder: the
    second was refused (exit 2) once the first had trained, hours in, and the jobs after it never
    ran. Named before the first job; the job of its own (lr=0.002) is not."""
    run = subprocess.run(sweep_cmd(small_build, "lr=1e-3,0.001,2e-3"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, WANDB_MODE="disabled"))
    assert run.returncode == 2, run.stderr[-3000:]
    assert "invalid sweep: 2 of its 3 jobs cannot run; none was started" in run.stderr, run.stderr[-3000:]
    assert "job #0 (lr=0.001), #1 (lr=0.001):" in run.stderr and "#2" not in run.stderr
    assert f"would all train in {Path('checkpoints', 'sweep', 'micro-<time>-lr=0.001')}" in run.stderr
    assert not (tmp_path / "checkpoints").exists()


def test_a_sweep_resumed_without_its_run_name_is_refused_before_the_first_job_naming_it(small_build, tmp_path):
    """`-m ... resume=latest` without run_name: the runs are <arch>-<sweep start>-<swept values>, a
    time the command cannot know. Job #0 said so only as it started; now the check before the first
    job says it, with the run names these swept values were trained under (newest first)."""
    for stamp in ("20261201-090000", "20261203-100000"):
        for tag in ("lr=0.001", "lr=0.002"):
            step = tmp_path / "checkpoints" / "sweep" / f"micro-{stamp}-{tag}" / "step_3"
            step.mkdir(parents=True)
            (step / "trainer.pt").write_bytes(b"")
    run = subprocess.run(sweep_cmd(small_build, "lr=1e-3,2e-3", "resume=latest"), cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, WANDB_MODE="disabled"))
    assert run.returncode == 2, run.stderr[-3000:]
    assert "invalid sweep: 2 of its 2 jobs cannot run; none was started\nevery job:\n" in run.stderr, run.stderr[-3000:]
    assert ("resume=latest needs the sweep's run_name" in run.stderr and "run names these values were trained "
            "under: run_name=micro-20261203-100000, run_name=micro-20261201-090000" in run.stderr), run.stderr[-3000:]
    assert "Launching" not in run.stderr


def test_a_failed_job_of_a_single_process_sweep_is_told_when_it_fails(tiny_build, tmp_path):
    """A job raising an error (out of memory, say; here an injected one at the first step): Hydra
    kept it silent until the sweep's end, then raised the first failed job's alone, so the second
    failure and the diverged job were never told. Each failure is told as it happens and the sweep
    goes on. A save that fails for a full disk would fail the next jobs too: the sweep stops there,
    exit 1, the job after it not started. It left at once, so the jobs that had failed or diverged
    before it were never named, nor how to continue the sweep; both are said now."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import hrm.train\n"
        "from hrm.train_checkpoint import CheckpointNotSaved\n"
        "step, save = hrm.train.Trainer.train_step, hrm.train.Trainer.save\n"
        "def failing(self, batch):\n"
        "    if self.config.lr in (2e-3, 3e-3):\n"
        "        raise RuntimeError(f'injected failure lr={self.config.lr}')\n"
        "    return step(self, batch)\n"
        "def full(self):\n"
        "    if self.config.lr == 4e-3:\n"
        "        raise CheckpointNotSaved(f'cannot save step {self.step}: injected full disk')\n"
        "    return save(self)\n"
        "hrm.train.Trainer.train_step, hrm.train.Trainer.save = failing, full\n")
    env = dict(os.environ, WANDB_MODE="disabled",
               PYTHONPATH=os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run(sweep_cmd(tiny_build, "lr=2e-3,1e30,3e-3,4e-3,5e-3", "run_name=r"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=240, env=env)
    err = run.stderr
    assert run.returncode == 1, err[-3000:]
    assert err.index("RuntimeError: injected failure lr=0.002") < err.index("training diverged") \
        < err.index("RuntimeError: injected failure lr=0.003"), err[-3000:]
    assert "the sweep's job r-lr=0.002 failed (traceback above)" in err
    assert err.endswith("pretrain.py: error: cannot save step 3: injected full disk; the sweep stops here (any job "
                        "after this one is not started): run the same sweep with resume=latest to continue it\n"
                        "pretrain.py: 2 job(s) of the sweep failed with an error: r-lr=0.002, r-lr=0.003\n"
                        "pretrain.py: 1 run(s) of the sweep diverged: r-lr=1e+30\n"), err[-3000:]
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "sweep").iterdir()) == [
        "r-lr=0.002", "r-lr=0.003", "r-lr=0.004", "r-lr=1e+30"]


def test_config_dir_comes_after_the_projects_configs_as_in_hydra(small_build, tmp_path, capsys):
    """A --config-dir holding its own cfg_pretrain.yaml does not shadow the project's (Hydra's order):
    a key only that copy has is unknown, exit 2 from the check, not a pass then Hydra's exit 1."""
    configs = tmp_path / "cfgs"
    configs.mkdir()
    (configs / "cfg_pretrain.yaml").write_text((ROOT / "configs" / "cfg_pretrain.yaml").read_text()
                                               + "my_extra_key: 1\n")
    import pretrain
    with pytest.raises(SystemExit) as stopped:
        pretrain.check_overrides(["--config-dir", str(configs), "my_extra_key=2", f"data_path={small_build}"])
    said = capsys.readouterr().err
    assert stopped.value.code == 2 and "no such key: 'my_extra_key'" in said, said


def test_a_field_that_a_preset_of_ones_own_leaves_out_is_named_with_the_way_to_add_it(small_build, tmp_path, capsys):
    """A preset written with the fields it changes only (the others take ArchConfig's defaults) has
    no key for the rest, so `arch.L_cycles=3` is Hydra's unknown key: the message said "no such key:
    'arch.L_cycles'. Did you mean arch.L_cycles?", the very key typed. It says it is a field the
    preset leaves out, and the `+arch.L_cycles=3` that adds it, which passes."""
    (tmp_path / "cfgs" / "arch").mkdir(parents=True)
    (tmp_path / "cfgs" / "arch" / "my_min.yaml").write_text("name: my_min\nhidden_size: 64\nnum_heads: 2\n")
    import pretrain
    start = ["--config-dir", str(tmp_path / "cfgs"), "arch=my_min", f"data_path={small_build}"]
    for override, add in (("arch.L_cycles=3", "+arch.L_cycles=3"), ("arch.scaling.H.p=0.25", "+arch.scaling.H.p=0.25")):
        with pytest.raises(SystemExit) as stopped:
            pretrain.check_overrides([*start, override])
        said = capsys.readouterr().err
        assert stopped.value.code == 2 and "is a field, but the arch preset does not set it" in said \
            and f"give it as {add} " in said and "Did you mean" not in said, said
        pretrain.check_overrides([*start, add])   # the way out passes
    with pytest.raises(SystemExit):                # a typo is still a typo
        pretrain.check_overrides([*start, "arch.L_cycle=3"])
    assert "no such key: 'arch.L_cycle'. Did you mean arch.L_cycles" in capsys.readouterr().err


def test_a_config_of_its_own_keeps_cfg_pretrains_hydra_settings(small_build, tmp_path, capsys):
    """`--config-name mine` of a file that does not start from cfg_pretrain had Hydra's own settings:
    every run wrote outputs/<date>/<time>/.hydra/ and pretrain.log into the current folder, and a
    sweep's jobs went unchecked. Refused, naming what is missing and the way out, which passes."""
    configs = tmp_path / "cfgs"
    configs.mkdir()
    (configs / "mine.yaml").write_text("defaults:\n  - arch: hrm_tiny\n  - _self_\nglobal_batch_size: 8\n"
                                       "epochs: 10\neval_interval: null\nlr: 1e-3\nlr_warmup_steps: 0\ndata_path: x\n")
    (configs / "inherits.yaml").write_text("defaults:\n  - cfg_pretrain\n  - override arch: hrm_tiny\n  - _self_\n"
                                           "global_batch_size: 8\n")
    import pretrain
    for extra, named in ((["--config-name", "mine"], "hydra.run.dir, hydra.output_subdir, hydra/job_logging as"),
                         (["-m", "--config-name", "mine", "lr=1e-3,1e-2"], "hydra.callbacks.check_every_job as")):
        with pytest.raises(SystemExit) as stopped:
            pretrain.check_overrides(["--config-dir", str(configs), *extra, f"data_path={small_build}"])
        said = capsys.readouterr().err
        assert stopped.value.code == 2 and named in said and "defaults: [cfg_pretrain, _self_]" in said, said
    pretrain.check_overrides(["--config-dir", str(configs), "--config-name", "inherits", f"data_path={small_build}"])
    pretrain.check_overrides(["--config-dir", str(configs), "--config-name", "mine", "hydra.run.dir=.",
                              "hydra.output_subdir=null", "hydra/job_logging=stdout", f"data_path={small_build}"])
    assert capsys.readouterr().err == ""


def test_a_config_not_built_on_cfg_pretrain_is_named_as_such_when_an_override_has_no_key(tmp_path, capsys):
    """Such a file lacks cfg_pretrain's keys too, so an override of one (checkpoint_path=..., a
    usual one) was refused as "no such key: 'checkpoint_path'", hiding the cause: the missing base."""
    configs = tmp_path / "cfgs"
    configs.mkdir()
    (configs / "bare.yaml").write_text("defaults:\n  - arch: hrm_tiny\n  - _self_\nglobal_batch_size: 8\n")
    import pretrain
    with pytest.raises(SystemExit) as stopped:
        pretrain.check_overrides(["--config-dir", str(configs), "--config-name", "bare",
                                  f"checkpoint_path={tmp_path / 'run'}"])
    said = capsys.readouterr().err
    assert stopped.value.code == 2 and "no such key" not in said, said
    assert "--config-name bare: the config leaves hydra.run.dir" in said and "defaults: [cfg_pretrain, _self_]" in said
    assert said.count("\n") == 1 and not (tmp_path / "run").exists()


def test_a_config_of_its_own_without_cfg_pretrain_is_said_so_when_overridden(tmp_path, capsys):
    """The same file given a key it lacks as cfg_pretrain has it (`max_steps=1`: it does not start
    from cfg_pretrain) was refused as "no such key: 'max_steps'", a valid key."""
    configs = tmp_path / "cfgs"
    configs.mkdir()
    (configs / "mine.yaml").write_text("defaults:\n  - arch: hrm_tiny\n  - _self_\ndata_path: x\n")
    import pretrain
    for extra in (["max_steps=1"], ["-m", "lr=1e-3,1e-2"]):
        with pytest.raises(SystemExit) as stopped:
            pretrain.check_overrides(["--config-dir", str(configs), "--config-name", "mine", *extra])
        said = capsys.readouterr().err
        assert stopped.value.code == 2 and "no such key" not in said, said
        assert said.startswith("pretrain.py: invalid config: --config-name mine: the config leaves hydra.") and \
            "defaults: [cfg_pretrain, _self_]" in said, said


def test_a_bad_config_under_torchrun_is_reported_once(small_build, tmp_path):
    """Every rank checks the same config; one of them says what is wrong."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29521",
           str(ROOT / "pretrain.py"), f"data_path={small_build}", "lr=-1", "arch=hrm_tiny"]
    bad_lr, bad_split = together(*[lambda c=c: subprocess.run(
        c, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1"))
        for c in (cmd, [a.replace("lr=-1", "global_batch_size=9").replace("29521", "29537") for a in cmd])])
    run = bad_lr
    assert run.returncode != 0 and run.stderr.count("lr: Input should be greater than or equal to 0") == 1, \
        run.stderr[-3000:]
    run = bad_split
    assert run.returncode != 0 and run.stderr.count("global_batch_size=9 is not divisible by the world size 2") == 1, \
        run.stderr[-3000:]


@pytest.mark.parametrize("local_rank, world_size", [("0", "2"), ("1", "2"), (None, None), ("1", None), ("1", "1")])
def test_a_silent_rank_outwaits_the_one_that_says_why(local_rank, world_size, monkeypatch, capsys):
    """torchrun stops every rank once one exits: a rank that leaves the message to LOCAL_RANK 0 and
    exited first could take it down before it printed (seen: a bad lr with no message at all). The
    silent rank waits instead; the speaker and a lone process exit at once, the latter even with a
    LOCAL_RANK other than 0 left in its environment (by a scheduler, say)."""
    from hrm import pretrain_config
    for name, value in (("LOCAL_RANK", local_rank), ("WORLD_SIZE", world_size)):
        monkeypatch.delenv(name, raising=False)
        if value is not None:
            monkeypatch.setenv(name, value)
    waits = []
    monkeypatch.setattr(pretrain_config.time, "sleep", waits.append)
    with pytest.raises(SystemExit) as stopped:
        pretrain_config.exit_bad_config("error: lr must be >= 0")
    assert stopped.value.code == pretrain_config.EXIT_BAD_CONFIG
    said = capsys.readouterr().err
    if (local_rank, world_size) == ("1", "2"):
        assert said == "" and waits == [pretrain_config.SILENT_RANK_WAIT_S]
    else:
        assert said == "pretrain.py: error: lr must be >= 0\n" and waits == []


@pytest.mark.parametrize("local_rank", ["0", "1"])
def test_device_cuda_without_cuda_is_said_once_under_torchrun(local_rank, small_build, tmp_path, monkeypatch,
                                                               capsys):
    """device=cuda on a machine without CUDA is the same answer on every rank: LOCAL_RANK 0 says it
    and the other ranks wait silently, as for any bad config (it was said once per rank)."""
    import pretrain
    from hrm import pretrain_config
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    waits = []
    monkeypatch.setattr(pretrain_config.time, "sleep", waits.append)
    with pytest.raises(SystemExit) as stopped:
        pretrain.refuse_what_every_rank_would(micro_config(small_build, tmp_path / "run", device="cuda"))
    assert stopped.value.code == 2
    said = capsys.readouterr().err
    if local_rank == "0":
        assert said == ("pretrain.py: error: device=cuda but CUDA is not available on this machine "
                        "(use device=cpu or device=auto)\n") and waits == []
    else:
        assert said == "" and waits == [pretrain_config.SILENT_RANK_WAIT_S]
    pretrain.refuse_what_every_rank_would(micro_config(small_build, tmp_path / "run", device="cpu"))   # passes


def test_a_sweep_checks_every_job_before_the_first_starts(small_build, tmp_path):
    """A bad value in a later job of a sweep stops it before its first job trains (exit 2), with
    every bad job named once per mistake; nothing is written."""
    env = dict(os.environ, WANDB_MODE="disabled", WORLD_SIZE="1")
    # a mistake every job shares is told once; a swept key that does not exist is named; the world
    # size counts: 8 rows do not split over 3 ranks
    bad_value, bad_key, bad_split = together(*[lambda cmd=cmd, ws=ws: subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=dict(env, WORLD_SIZE=ws)) for cmd, ws in (
        (sweep_cmd(small_build, "lr=1e-3,-1", "arch.scaling.p=0.3,1e"), "1"),
        (sweep_cmd(small_build, "arch.scaling.pp=0.3,0.5", "lr=-2"), "1"),
        ([a.replace("global_batch_size=8", "global_batch_size=9,8") for a in sweep_cmd(small_build)], "3"))])
    run = bad_value
    assert run.returncode == 2, run.stderr[-3000:]
    err = run.stderr
    assert "invalid sweep: 3 of its 4 jobs cannot run; none was started" in err and "Traceback" not in err
    assert "job #1 (lr=0.001 arch.scaling.p=1e):\n  invalid config:\n    arch.scaling.p: Input should be a valid number" in err
    assert "job #2 (lr=-1 arch.scaling.p=0.3):\n  invalid config:\n    lr: Input should be greater than or equal to 0" in err
    assert "job #3 (lr=-1 arch.scaling.p=1e):" in err and "job #0" not in err
    run = bad_key
    assert run.returncode == 2 and "no such key: 'arch.scaling.pp'. Did you mean arch.scaling.p" in run.stderr, \
        run.stderr[-3000:]
    run = bad_split
    assert run.returncode == 2, run.stderr[-3000:]
    assert ("invalid sweep: 1 of its 2 jobs cannot run; none was started\njob #1 (global_batch_size=8):\n"
            "  global_batch_size=8 is not divisible by the world size 3") in run.stderr
    assert os.listdir(tmp_path) == []


def test_an_unknown_preset_is_one_line_naming_the_presets(small_build, tmp_path, capsys):
    """Hydra's "Could not find 'arch/hrm_huge'" ran to ten lines (the presets one a line, then its
    config search path), for one run and for a sweep's job alike."""
    import pretrain
    with pytest.raises(SystemExit) as stopped:
        pretrain.check_overrides(["arch=hrm_huge", f"data_path={small_build}"])
    said = capsys.readouterr().err
    presets = ", ".join(sorted(p.stem for p in (ROOT / "configs" / "arch").glob("*.yaml")))
    assert stopped.value.code == 2 and said == (
        f"pretrain.py: invalid config: In 'cfg_pretrain': Could not find 'arch/hrm_huge' (the presets of arch: "
        f"{presets})\n"), said
    run = subprocess.run([sys.executable, str(ROOT / "pretrain.py"), "-m", "arch=hrm_tiny,hrm_huge",
                          f"data_path={small_build}", "global_batch_size=8"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, WANDB_MODE="disabled"))
    assert run.returncode == 2 and run.stderr.endswith(
        f"job #1 (arch=hrm_huge):\n  In 'cfg_pretrain': Could not find 'arch/hrm_huge' (the presets of arch: "
        f"{presets})\n"), run.stderr[-3000:]


def test_a_refused_sweep_whose_output_is_closed_still_stops(small_build, tmp_path):
    """`pretrain.py -m ... 2>&1 | head -1`: printing the refusal hit the closed pipe, the sweep's check
    took that for a check that could not run (a warning) and the sweep went on (exit 1, its record
    written). The refusal stands unsaid: exit 2, nothing written."""
    read_end, write_end = os.pipe()
    os.close(read_end)                    # the reader is gone before anything is printed
    try:
        run = subprocess.run([sys.executable, str(ROOT / "pretrain.py"), "-m", "arch=hrm_tiny,hrm_huge",
                              f"data_path={small_build}", "global_batch_size=8"], cwd=tmp_path, stdout=write_end,
                             stderr=write_end, timeout=120, env=dict(os.environ, WANDB_MODE="disabled"))
    finally:
        os.close(write_end)
    assert run.returncode == 2
    assert os.listdir(tmp_path) == []


def test_a_fresh_sweep_over_runs_that_hold_checkpoints_stops_before_its_first_job(small_build, tmp_path):
    """The same sweep with a run_name run again without resume=latest: the second job's run folder
    already holds a checkpoint, so the job would be refused when it starts, after the first one had
    trained in full. The check names it before any job starts (exit 2), and job #0 writes nothing;
    with checkpoint_path the job's folder is <checkpoint_path>/<swept values>."""
    env = dict(os.environ, WANDB_MODE="disabled", WORLD_SIZE="1")
    cases = (("run_name=sw", tmp_path / "checkpoints" / "sweep" / "sw-arch.scaling.p=0.5"),
             (f"checkpoint_path={tmp_path / 'cp'}", tmp_path / "cp" / "arch.scaling.p=0.5"))
    for _, held in cases:
        (held / "step_1").mkdir(parents=True)
        (held / "step_1" / "trainer.pt").write_bytes(b"")
    runs = together(*[lambda fixed=fixed: subprocess.run(sweep_cmd(small_build, fixed, "arch.scaling.p=0.3,0.5"),
                                                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                                                         env=env) for fixed, _ in cases])
    for (fixed, held), run in zip(cases, runs):
        assert run.returncode == 2, run.stderr[-3000:]
        assert "invalid sweep: 1 of its 2 jobs cannot run; none was started" in run.stderr, run.stderr[-3000:]
        assert (f"job #1 (arch.scaling.p=0.5):\n  {held.relative_to(tmp_path) if fixed[0] == 'r' else held} "
                f"already holds checkpoints (step_1); pass resume=latest") in run.stderr, run.stderr[-3000:]
        assert sorted(p.name for p in held.parent.iterdir()) == [held.name]   # job #0 never started


def test_evaluation_logs_pass_at_k_as_vote_py_scores_the_predictions(tiny_build, tmp_path, monkeypatch):
    """eval/pass@K and eval/pair_pass@K in the log: 1.0 at every K when every prediction is the
    right answer (the first evaluation's predictions are replaced by the build's labels), and for
    the model's own predictions exactly what evaluate/vote.py reports for the same folder."""
    import hrm.train
    from evaluate import vote

    real_evaluate, calls = hrm.train.evaluate, []
    labels = np.load(tiny_build / "test" / "all__labels.npy")

    def first_one_perfect(*args, **kwargs):
        metrics, arrays = real_evaluate(*args, **kwargs)
        if not calls:
            real = arrays["puzzle_identifiers"] != 0
            arrays["preds"][real] = labels          # the right output of every test row
        calls.append(1)
        return metrics, arrays

    monkeypatch.setattr(hrm.train, "evaluate", first_one_perfect)
    cfg = micro_config(tiny_build, tmp_path / "run", epochs=2, eval_interval=1, max_steps=None,
                       eval_pass_k=[1, 2, 10])
    Trainer(cfg, CPU, progress=False).fit()
    evals = [r for r in map(json.loads, (tmp_path / "run" / "log.jsonl").read_text().splitlines())
             if "eval/lm_loss" in r]
    assert len(evals) == len(calls) == 2
    for k in (1, 2, 10):
        assert evals[0][f"eval/pass@{k}"] == evals[0][f"eval/pair_pass@{k}"] == 1.0
    assert "eval/pass@100" not in evals[0]
    step = evals[1]["step"]
    assert vote.main(["--predictions", str(tmp_path / "run" / "predictions" / f"step_{step}"),
                      "--K", "1", "2", "10", "--json", str(tmp_path / "vote.json")]) == 0
    voted = json.loads((tmp_path / "vote.json").read_text())["pass_at_k"]
    for k in ("1", "2", "10"):
        assert evals[1][f"eval/pass@{k}"] == voted[k]["task"]
        assert evals[1][f"eval/pair_pass@{k}"] == voted[k]["pair"]


def test_a_build_voting_cannot_read_is_said_once_not_at_every_evaluation(tmp_path, monkeypatch, capsys):
    """pass@K needs the build's test tasks; a build voting cannot read (not ARC's layout) was read
    again, and warned about, at every evaluation of the run."""
    from types import SimpleNamespace

    import evaluate.build_reader
    from evaluate.errors import EvaluationInputError
    reads = []

    def unreadable(path):
        reads.append(path)
        raise EvaluationInputError(f"{path}: not ARC tasks")
    monkeypatch.setattr(evaluate.build_reader, "load_test_split", unreadable)
    trainer = SimpleNamespace(_vote_split=None, config=SimpleNamespace(data_path=str(tmp_path), eval_pass_k=[1]))
    for step in (1, 2, 3):
        assert Trainer.pass_at_k(trainer, tmp_path / f"step_{step}") == {}
    assert len(reads) == 1
    assert capsys.readouterr().out == f"warning: no pass@K in this run: voting cannot read the build: {tmp_path}: not ARC tasks\n"


def test_a_pass_at_k_that_fails_on_rank_zero_is_a_warning_and_the_run_goes_on(small_build, tmp_path, monkeypatch,
                                                                               capsys):
    """Rank 0 scores pass@K alone, between collectives: a build unreadable for a moment (an NFS
    hiccup) or memory short while voting raised on rank 0 alone, and the other ranks waited for it in
    their next collective; the run was lost for a metric. Now a warning naming the folder, no pass@K
    for that evaluation (its other metrics are logged), and the build is read again next time."""
    from types import SimpleNamespace

    import evaluate.build_reader
    import hrm.train
    real_load = evaluate.build_reader.load_test_split
    trainer = SimpleNamespace(_vote_split=None, config=SimpleNamespace(data_path=str(small_build), eval_pass_k=[1]))

    def unreadable(path):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(evaluate.build_reader, "load_test_split", unreadable)
    assert Trainer.pass_at_k(trainer, tmp_path / "step_1") == {}
    assert trainer._vote_split is None          # not given up on: read again at the next evaluation
    monkeypatch.setattr(evaluate.build_reader, "load_test_split", real_load)

    def short_of_memory(*args):
        raise MemoryError()
    monkeypatch.setattr(hrm.train, "score_predictions", short_of_memory)
    assert Trainer.pass_at_k(trainer, tmp_path / "step_2") == {}
    assert trainer._vote_split.tasks
    assert capsys.readouterr().out == (
        f"warning: no pass@K for {tmp_path / 'step_1'}: cannot read the build's test tasks (OSError: [Errno 5] "
        f"Input/output error)\n"
        f"warning: no pass@K for {tmp_path / 'step_2'} (MemoryError); training goes on, and "
        f"`python evaluate/vote.py --predictions {tmp_path / 'step_2'}` can score it later\n")


def test_visit_alignment_that_fails_on_rank_zero_is_said_once_and_training_goes_on(small_build, tmp_path,
                                                                                     monkeypatch, capsys):
    """Rank 0 computes the diagnostics alone, between the step's collectives: out of memory there
    (its full-graph step grows with diagnostics_rows) stopped rank 0 alone while the other ranks
    waited in the next all-reduce. Now one warning, and no further try (it would fail alike)."""
    import hrm.diagnostics
    tries = []

    def out_of_memory(modules, run):
        tries.append(run())            # the diagnostic forward ran, with its hooks, then:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(hrm.diagnostics, "record_visit_gradients", out_of_memory)
    cfg = micro_config(small_build, tmp_path / "run", max_steps=2, diagnostics_interval=1,
                       eval_save_predictions=False)
    trainer = Trainer(cfg, CPU, progress=False)
    trainer.run_evaluation = dict     # the run's end evaluates the whole test split: not what is tested here
    assert trainer.fit()["step"] == 2
    assert len(tries) == 1 and not trainer.model.full_graph_segments
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and ("warning: the visit-alignment diagnostics failed at step 1 "
                                           "(OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB); "
                                           "training goes on without them") in err, err
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "train/loss" in r] == [1, 2]
    assert not any(k.startswith("alignment") for r in log for k in r)


def test_wandb_auto_with_a_key_and_no_route_to_the_server_trains_logged_offline(tiny_build, tmp_path, monkeypatch):
    """wandb.mode=auto with credentials goes online; with no route to the server (a compute node) it
    logs offline, as docs/train.md says. The Trainer handed RunLog the mode auto had resolved to,
    'online', which RunLog takes for one asked for by name: the start was refused (exit 2)."""
    import types

    import wandb
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    asked = []

    def init(**kwargs):   # a server that cannot be reached: online fails as wandb's CommError, offline starts
        asked.append(kwargs["mode"])
        runs = Path(kwargs["dir"]) / "wandb"
        if kwargs["mode"] == "online":   # leaving its run folder, as wandb does
            (runs / f"run-20261204_062000-{kwargs['id']}" / "logs").mkdir(parents=True)
            raise wandb.errors.CommError("context deadline exceeded")
        (runs / f"offline-run-20261204_062030-{kwargs['id']}").mkdir(parents=True)
        return types.SimpleNamespace(define_metric=lambda *a, **k: None, log=lambda *a, **k: None,
                                     finish=lambda: None)
    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setattr(wandb, "teardown", lambda *a, **k: None)
    trainer = Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1, wandb={"mode": "auto"}), CPU,
                      progress=False)
    try:
        assert asked == ["online", "offline"] and trainer.log.mode == "offline"
        # the failed online start's folder is gone: `wandb sync --sync-all` would upload it as a run
        assert [p.name for p in (tmp_path / "run" / "wandb").iterdir()] == \
            [f"offline-run-20261204_062030-{trainer.log.wandb_id}"]
    finally:
        trainer.log.close()
        trainer.release_run_lock()


def test_wandb_that_cannot_start_offline_is_refused_on_every_rank(small_build, tmp_path, monkeypatch):
    """wandb raises errors of its own (its service not starting, in offline mode too), neither
    ValueError nor OSError: rank 0 raised it alone out of the start's agreed stage, and the other
    ranks waited for the agreement until their collective's timeout. Now it is that stage's refusal
    (RefusedOnEveryRank: every rank raises it, pretrain.py says it once), with the error as its cause."""
    import hrm.train
    from hrm.distributed import RefusedOnEveryRank

    class ServiceStartTimeoutError(Exception):   # as wandb's, a plain Exception
        pass

    def no_service(*args, **kwargs):
        raise ServiceStartTimeoutError("Timed out waiting for wandb service to start after 30.0 seconds")
    monkeypatch.setattr(hrm.train, "RunLog", no_service)
    with pytest.raises(RefusedOnEveryRank) as refused:
        Trainer(micro_config(small_build, tmp_path / "run", max_steps=1), CPU, progress=False)
    assert str(refused.value) == ("W&B could not start (ServiceStartTimeoutError: Timed out waiting for wandb "
                                  "service to start after 30.0 seconds); wandb.mode=disabled (WANDB_MODE, if set) "
                                  f"logs to {tmp_path / 'run' / 'log.jsonl'} only")
    assert isinstance(refused.value.__cause__.__cause__, ServiceStartTimeoutError)


def test_run_names_of_a_sweep_job(small_build, tmp_path):
    from hrm.run_naming import run_names
    cfg = micro_config(small_build, tmp_path / "fixed")
    _, name, folder = run_names(cfg, CPU, "lr=0.001")     # default name: <arch>-<time>-<tag>
    assert name.startswith("micro-") and name.endswith("-lr=0.001") and folder == tmp_path / "fixed" / "lr=0.001"
    # the sweep's later jobs keep the first job's time stamp, however long the first one trained
    later = micro_config(small_build, None, checkpoint_path=None)
    with mock.patch("hrm.run_naming.datetime") as clock:
        clock.now.return_value = datetime(2031, 1, 2, 3, 4, 5)
        assert run_names(later, CPU, "lr=0.003")[1] == name.replace("lr=0.001", "lr=0.003")
        assert run_names(later, CPU)[1] == "micro-20310102-030405"    # a single run: its own time
    assert run_names(cfg, CPU)[2] == tmp_path / "fixed"
    named = micro_config(small_build, None, checkpoint_path=None, run_name="mine", project_name="p")
    assert run_names(named, CPU, "lr=0.001")[1:] == ("mine-lr=0.001", Path("checkpoints") / "p" / "mine-lr=0.001")
    assert run_names(named, CPU)[1:] == ("mine", Path("checkpoints") / "p" / "mine")


def test_keep_checkpoints_never_prunes_the_checkpoint_just_written(tiny_build, tmp_path):
    """A run resumed from an earlier step of its own (resume=<run>/step_1, with step_2..4 beside it)
    and a smaller keep_checkpoints: the step it saves is the run's `latest`, and must survive the
    pruning; the later steps of the abandoned line are not `newer` than it."""
    run = tmp_path / "run"
    Trainer(micro_config(tiny_build, run, max_steps=4, checkpoint_interval=1, keep_checkpoints=0,
                         eval_save_predictions=False), CPU, progress=False).fit()
    assert (run / "latest").read_text() == "step_4"
    Trainer(micro_config(tiny_build, run, max_steps=2, keep_checkpoints=2, resume=str(run / "step_1"),
                         eval_save_predictions=False), CPU, progress=False).fit()
    latest = (run / "latest").read_text()
    assert latest == "step_2" and (run / latest / "trainer.pt").is_file()
    from hrm.run_folders import resolve_resume
    assert resolve_resume("latest", run).name == "step_2"
    # keep_checkpoints=2: step_2 and the one before it; the abandoned line's later steps are left alone
    assert sorted(c.name for c in run.glob("step_*")) == ["step_1", "step_2", "step_3", "step_4"]
    # step_2 was saved again: the old one set aside, then removed once the new one was in place
    assert not any(p.name.startswith(".step_") for p in run.iterdir())


def a_full_disk(fails_for: str):
    """torch.save as on a disk that fills up while writing a file whose name contains `fails_for`:
    some bytes land, then ENOSPC, without a file name as a real write raises it (the path form is
    what the save code passed before it wrote through a file object)."""
    import errno
    real_save = torch.save

    def save(payload, f, *args, **kwargs):
        name = str(getattr(f, "name", f))
        if fails_for not in Path(name).name:
            return real_save(payload, f, *args, **kwargs)
        if isinstance(f, (str, os.PathLike)):
            Path(f).write_bytes(b"PK" * 512)
        else:
            f.write(b"PK" * 512)
        raise OSError(errno.ENOSPC, "No space left on device")    # as a real write: no file name
    return save


def test_a_save_that_fills_the_disk_says_so_and_leaves_the_runs_checkpoints_as_they_were(tiny_build, tmp_path,
                                                                                          monkeypatch):
    """A full disk while model.pt is written: one error naming the file and the reason (torch's own
    writer says 'unexpected pos 704 vs 598'), the cut-short `.step_<N>.tmp` removed (its space is
    what the disk lacks), `latest` and the checkpoint it names untouched; the next save works."""
    from hrm.train_checkpoint import CheckpointNotSaved
    from hrm.run_folders import list_checkpoints
    run = tmp_path / "run"
    trainer = Trainer(micro_config(tiny_build, run, max_steps=1, eval_save_predictions=False), CPU, progress=False)
    trainer.fit()
    before = {p.name: p.read_bytes() for p in (run / "step_1").iterdir()}
    trainer.step = 2
    with monkeypatch.context() as patched:
        patched.setattr(torch, "save", a_full_disk("model.pt"))
        with pytest.raises(CheckpointNotSaved) as failed:
            trainer.save()
    message = str(failed.value)
    assert message.startswith(f"cannot save step 2 into {run}: [Errno 28] No space left on device: ")
    assert "model.pt.tmp" in message and message.endswith("the run's checkpoints are as they were (latest: step_1)")
    assert sorted(p.name for p in run.iterdir() if "step" in p.name or "tmp" in p.name) == ["step_1"]
    assert (run / "latest").read_text() == "step_1" and list_checkpoints(run) == [run / "step_1"]
    assert {p.name: p.read_bytes() for p in (run / "step_1").iterdir()} == before
    assert trainer.save() == run / "step_2" and (run / "latest").read_text() == "step_2"


def test_a_save_whose_folder_cannot_be_made_on_a_full_disk_says_so(tiny_build, tmp_path, monkeypatch):
    """A disk already full refuses the save's `.step_<N>.tmp/` folder itself (mkdir: ENOSPC): the same
    CheckpointNotSaved as a write that fills it (pretrain.py's one line, exit 1), not a bare OSError
    raised by rank 0 alone while the other ranks wait at the barrier after it."""
    import errno

    from hrm.train_checkpoint import CheckpointNotSaved
    from hrm.run_folders import list_checkpoints
    run = tmp_path / "run"
    trainer = Trainer(micro_config(tiny_build, run, max_steps=1, eval_save_predictions=False), CPU, progress=False)
    trainer.fit()
    trainer.step = 2
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self.name == ".step_2.tmp":
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_mkdir(self, *args, **kwargs)
    with monkeypatch.context() as patched:
        patched.setattr(Path, "mkdir", mkdir)
        with pytest.raises(CheckpointNotSaved) as failed:
            trainer.save()
    assert str(failed.value).startswith(f"cannot save step 2 into {run}: [Errno 28] No space left on device: ")
    assert str(failed.value).endswith("(latest: step_1)")
    assert list_checkpoints(run) == [run / "step_1"] and (run / "latest").read_text() == "step_1"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads which file a descriptor is from /proc")
def test_every_file_of_a_checkpoint_is_on_disk_before_it_is_renamed(tiny_build, tmp_path, monkeypatch):
    """After a crash of the machine (not just the process) a renamed file whose bytes were still in
    the page cache can come back empty, under a `latest` that names it: each file is fsync'd."""
    import hrm.train_checkpoint as train_checkpoint
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name),
                                                 real_fsync(fd))[1])
    trainer = Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=1, eval_save_predictions=False), CPU,
                      progress=False)
    trainer.fit()
    step = tmp_path / "run" / "step_1"
    assert train_checkpoint.list_checkpoints(tmp_path / "run") == [step]
    assert sorted(f"{p.name}.tmp" for p in step.iterdir()) == sorted(set(synced))


def test_keep_checkpoints_that_cannot_remove_a_step_warns_and_leaves_no_half_removed_checkpoint(
        tiny_build, tmp_path, monkeypatch, capsys):
    """Pruning an old step comes after the new one is in place: a deletion that fails part-way (a
    file held open on NFS; a SIGKILL cutting it short behaves alike) must neither stop the run nor
    leave a `step_<N>/` that lacks some of its files yet still counts as a checkpoint (or no longer
    does, and is never pruned). The step is renamed aside first; the next start removes the rest."""
    import shutil

    from hrm.train_checkpoint import remove_unfinished_saves
    from hrm.run_folders import list_checkpoints
    real_rmtree = shutil.rmtree

    def rmtree_cut_short(path, *args, **kwargs):
        if "step_1" in Path(path).name:
            (Path(path) / "model.pt").unlink()
            raise OSError(16, "Device or resource busy", str(Path(path) / "trainer.pt"))
        return real_rmtree(path, *args, **kwargs)
    run = tmp_path / "run"
    with monkeypatch.context() as patched:
        patched.setattr(shutil, "rmtree", rmtree_cut_short)
        Trainer(micro_config(tiny_build, run, max_steps=2, checkpoint_interval=1, keep_checkpoints=1,
                             eval_save_predictions=False), CPU, progress=False).fit()
    assert (f"warning: could not remove {run / '.step_1.pruned'} ([Errno 16] Device or resource busy: "
            f"'{run / '.step_1.pruned' / 'trainer.pt'}'); the run's next start or save tries again") in capsys.readouterr().err
    assert (run / "latest").read_text() == "step_2"
    assert list_checkpoints(run) == [run / "step_2"] and not (run / "step_1").exists()
    # the next start: still held open, a warning (it stopped the start with a traceback); then gone
    with monkeypatch.context() as patched:
        patched.setattr(shutil, "rmtree", rmtree_cut_short)
        assert remove_unfinished_saves(run) == []
    assert f"warning: could not remove {run / '.step_1.pruned'}" in capsys.readouterr().err
    assert remove_unfinished_saves(run) == [".step_1.pruned"]


def test_a_log_that_cannot_be_written_during_training_warns_once_and_the_run_goes_on(tiny_build, tmp_path,
                                                                                      capsys):
    """The disk under log.jsonl fills up, and W&B's service goes away, after the start: rank 0 raised
    alone in its log write (the other ranks then waited in the next all-reduce until the collective
    timed out). The run now trains to its end with one warning for each, and saves its checkpoint; a
    disk that is really full stops every rank at that save (CheckpointNotSaved, agreed)."""
    from test_run_log import BrokenWandb, FillsUp
    trainer = Trainer(micro_config(tiny_build, tmp_path / "run", max_steps=3, eval_save_predictions=False), CPU,
                      progress=False)
    trainer.log.file, trainer.log.wandb = FillsUp(trainer.log.file), BrokenWandb()
    assert trainer.fit()["step"] == 3
    err = capsys.readouterr().err
    assert err.count(f"warning: cannot write the record of step 1 to {tmp_path / 'run' / 'log.jsonl'}") == 1, err
    assert err.count("warning: W&B stopped logging at step 1") == 1 and err.count("warning:") == 2, err
    assert (tmp_path / "run" / "latest").read_text() == "step_3"


def test_a_divergence_record_that_cannot_be_written_still_stops_the_run_as_diverged(small_build, tmp_path, capsys):
    """Rank 0 writes diverged.json alone: an OSError there replaced, on rank 0 only, the divergence
    every rank stops on (and pretrain.py's exit 3 that a sweep reads)."""
    trainer = Trainer(micro_config(small_build, tmp_path / "run", lr=1e30), CPU, progress=False)
    (tmp_path / "run" / "diverged.json").mkdir()     # cannot be written as a file
    with pytest.raises(TrainingDiverged, match="training diverged: non-finite"):
        trainer.fit()
    assert f"warning: cannot write {tmp_path / 'run' / 'diverged.json'} (Is a directory)" in capsys.readouterr().err


def test_a_save_that_fails_on_one_rank_fails_on_every_rank_at_once(tmp_path):
    """Rank 1's disk fills up while it writes its part: rank 0 must not wait at the save's next
    barrier for it (until the collective times out, half an hour under gloo); both ranks raise the
    same error, naming rank 1, and the cut-short save is removed."""
    script = ("import sys, torch; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']; "
              "from test_train import a_full_disk; from test_model_checkpoint import tiny_arch; "
              "from hrm.model import HRM; from hrm.distributed import init_distributed, shutdown; "
              "from hrm.train_checkpoint import save_checkpoint, CheckpointNotSaved; "
              "info = init_distributed('cpu'); model = HRM(tiny_arch(), 12, 8, 3, verbose=False)\n"
              "if info.rank == 1: torch.save = a_full_disk('rank_1')\n"
              "try: save_checkpoint(sys.argv[2], step=5, model=model, optimizers={}, reader_state={}, carry=None, "
              "config={}, info=info)\n"
              "except CheckpointNotSaved as e: print('failed:', e)\n"
              "shutdown(wait_for_peers=True)")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ranks = run_ranks([sys.executable, "-c", script, str(ROOT), str(tmp_path / "run")], tmp_path, env, port=29541,
                      timeout=120)
    assert [r.returncode for r in ranks] == [0, 0], "".join(r.stderr for r in ranks)[-3000:]
    for r in ranks:
        assert f"failed: cannot save step 5 into {tmp_path / 'run'}: rank 1: [Errno 28] No space left" in r.stdout
    assert os.listdir(tmp_path / "run") == []


def test_pretrain_says_a_save_that_fills_the_disk_in_one_line(tiny_build, tmp_path):
    """Every rank raises CheckpointNotSaved with the same message: said once, exit 1, no traceback."""
    script = ("import runpy, sys, torch; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests']; "
              "from test_train import a_full_disk; torch.save = a_full_disk('model.pt'); "
              "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    run = tmp_path / "run"
    ran = subprocess.run([sys.executable, "-c", script, str(ROOT), *pretrain_cmd(tiny_build, run, "max_steps=1")[1:]],
                         capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert ran.returncode == 1 and "Traceback" not in ran.stderr, ran.stderr[-3000:]
    said = [line for line in ran.stderr.splitlines() if "cannot save step 1" in line]
    assert len(said) == 1 and said[0].startswith(f"pretrain.py: error: cannot save step 1 into {run}: "), ran.stderr


def test_predictions_that_fail_on_one_rank_fail_on_every_rank_at_once(tmp_path):
    """Rank 1's disk fills while it writes its predictions: rank 0 waited at the next barrier for
    it (half an hour under gloo) while rank 1 died with numpy's traceback. Both raise the same
    error naming rank 1, and the folder holds neither info.json (no vote reads it) nor a .tmp."""
    script = ("import errno, sys, numpy as np; sys.path[:0] = [sys.argv[1]]; "
              "from hrm.distributed import init_distributed, shutdown; "
              "from hrm.evaluation import _EMPTY, PredictionsNotWritten, write_predictions; "
              "info = init_distributed('cpu')\n"
              "def full(path, **arrays):\n"
              "    open(path, 'wb').write(b'PK' * 512)\n"
              "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
              "if info.rank == 1: np.savez = full\n"
              "try: write_predictions(sys.argv[2], dict(_EMPTY), info, data_path='.', step=3, checkpoint=None)\n"
              "except PredictionsNotWritten as e: print('failed:', e)\n"
              "shutdown(wait_for_peers=True)")
    out = tmp_path / "predictions"
    ranks = run_ranks([sys.executable, "-c", script, str(ROOT), str(out)], tmp_path, dict(os.environ, OMP_NUM_THREADS="1"),
                      port=29543, timeout=120)
    assert [r.returncode for r in ranks] == [0, 0], "".join(r.stderr for r in ranks)[-3000:]
    for r in ranks:
        assert (f"failed: cannot write the predictions into {out}: rank 1: [Errno 28] No space left on device: "
                f"'{out / '.rank_1.tmp.npz'}'") in r.stdout, r.stdout
    assert sorted(p.name for p in out.iterdir()) == ["rank_0.npz"]
