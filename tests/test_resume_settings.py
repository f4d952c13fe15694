"""`pretrain.py resume=...` keeps the run's own settings (hrm/resume_settings.py): what the command
line does not give comes from the checkpoint, except the settings that name this start and the
machine's."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import yaml

from conftest import MICRO_ARCH, ROOT, together
from hrm.checkpoint import CheckpointError
from hrm.resume_settings import describe, given_keys, known_settings, saved_config, with_saved_settings
from hrm.train_checkpoint import FORMAT
from hrm.train import Trainer
from test_train import CPU, compose, losses_by_step, micro_config


def test_given_keys_are_the_dotted_keys_of_the_overrides():
    assert given_keys(["lr=1e-3", "arch=hrm_tiny", "+extra.key=1", "~wandb.entity", "arch.scaling.H.p=0.25",
                       "eval_pass_k=[1,2]"]) == {"lr", "arch", "extra.key", "wandb.entity", "arch.scaling.H.p",
                                                 "eval_pass_k"}


def test_what_the_command_line_does_not_give_comes_from_the_checkpoint():
    composed = {"arch": {"name": "hrm_v1", "hidden_size": 512, "scaling": {"rule": "none", "p": None}},
                "data_path": "data/arc-aug-1000", "lr": 1e-4, "max_steps": None, "seed": 0,
                "device": "auto", "compile": "auto", "run_name": None, "checkpoint_path": None,
                "resume": "runs/a", "project_name": None, "new_setting": 7,
                "wandb": {"mode": "auto", "entity": None}}
    saved = {"arch": {"name": "hrm_tiny", "hidden_size": 64, "scaling": {"rule": "deeploop", "p": None,
                                                                         "H": {"p": 0.25}}},
             "data_path": "data/tiny", "lr": 3e-4, "max_steps": 300, "seed": 5, "device": "cpu",
             "compile": False, "run_name": "a", "checkpoint_path": "runs/a", "resume": None,
             "project_name": "p", "wandb": {"mode": "disabled", "entity": "me"}}
    merged, changed = with_saved_settings(composed, saved, {"max_steps", "resume", "wandb.entity"})
    assert merged == {
        # the run's: its arch (with a key the preset lacks), build, schedule, seed, wandb mode
        "arch": {"name": "hrm_tiny", "hidden_size": 64, "scaling": {"rule": "deeploop", "p": None, "H": {"p": 0.25}}},
        "data_path": "data/tiny", "lr": 3e-4, "seed": 5, "wandb": {"mode": "disabled", "entity": None},
        "max_steps": None,                                  # given (max_steps=null ends the run by epochs)
        "device": "auto", "compile": "auto",                # this machine's
        "run_name": None, "checkpoint_path": None, "resume": "runs/a", "project_name": None,   # this start's
        "new_setting": 7}                                   # newer than the checkpoint
    assert changed == ["arch.name", "arch.hidden_size", "arch.scaling.rule", "arch.scaling.H", "data_path", "lr", "seed",
                       "wandb.mode"]
    # a whole group given (arch=...) is this start's, and nothing is changed when all is given
    merged, changed = with_saved_settings(composed, saved, {"arch", "data_path", "lr", "seed", "wandb", "max_steps"})
    assert merged == composed and changed == []


def test_the_resume_note_shows_the_arch_fields_that_differ_from_the_runs_preset():
    """A run of hrm_tiny with arch.hidden_size=128, resumed where the config files say hrm_v1: the
    note said `arch=hrm_tiny` alone, as if the run were the preset, hiding its size."""
    composed = compose()
    saved = compose("arch=hrm_tiny", "arch.hidden_size=128", "arch.scaling.H.p=0.3", "lr=3e-4")
    merged, changed = with_saved_settings(composed, saved, set())
    assert describe(changed, merged) == ("arch=hrm_tiny arch.hidden_size=128 arch.puzzle_emb_ndim=128 "
                                         "arch.scaling.H.p=0.3, lr=0.0003")
    # the preset itself: its name alone
    merged, changed = with_saved_settings(composed, compose("arch=hrm_tiny"), set())
    assert describe(changed, merged) == "arch=hrm_tiny"
    # a name no preset has: every field that differs from the config files', by name
    saved = compose("arch=hrm_tiny", "arch.name=mine")
    merged, changed = with_saved_settings(composed, saved, set())
    assert describe(changed, merged).startswith("arch.name=mine arch.hidden_size=64 arch.num_heads=2 ")
    # the same preset: only its changed fields, as before
    merged, changed = with_saved_settings(composed, compose("arch.L_cycles=3", "seed=4"), set())
    assert describe(changed, merged) == "arch.L_cycles=3, seed=4"


def test_the_resume_note_names_a_ninth_setting_rather_than_saying_and_1_more():
    """Nine settings differ: "... and 1 more" hid one setting in the room it would take; ten or more
    are cut after eight."""
    merged = {f"k{i}": i for i in range(10)}
    nine = describe([f"k{i}" for i in range(9)], merged)
    assert nine == ", ".join(f"k{i}={i}" for i in range(9)) and "more" not in nine
    assert describe([f"k{i}" for i in range(10)], merged) == ", ".join(f"k{i}={i}" for i in range(8)) + " and 2 more"


def test_the_resume_note_leaves_out_what_the_command_line_gives_and_says_values_as_typed():
    """`resume=<hrm_tiny run> arch.hidden_size=128`: the note named arch.hidden_size=128 among the
    run's own settings (it differs from the preset, but is this start's); and it said None, False,
    [1, 2] where an override takes null, false, [1,2] (eval_interval=None is the text 'None')."""
    given = {"arch.hidden_size"}
    composed = compose("arch.hidden_size=128")
    saved = compose("arch=hrm_tiny", "eval_interval=null", "eval_save_predictions=false", "eval_pass_k=[1,2]")
    merged, changed = with_saved_settings(composed, saved, given)
    assert merged["arch"]["hidden_size"] == 128 and merged["arch"]["name"] == "hrm_tiny"
    assert describe(changed, merged, given) == ("arch=hrm_tiny, eval_interval=null, eval_save_predictions=false, "
                                                "eval_pass_k=[1,2]")


def test_a_scaling_rule_given_on_resume_comes_with_its_own_exponent():
    """`resume=<a run of hrm_deeploop arch.scaling.p=0.45> arch.scaling.rule=deeploop` took p=0.45
    from the checkpoint, so the rule asked for became custom 0.45 again (hrm.config): the run went on
    as before, the rule given ignored, instead of being refused as another scaling."""
    from hrm.config import ArchConfig

    def resumed(*given: str) -> dict:
        merged, _ = with_saved_settings(compose(*given), saved, given_keys(list(given)))
        scaling = ArchConfig(**merged["arch"]).scaling
        return {m: (scaling.for_module(m)["rule"], scaling.for_module(m)["p"]) for m in ("H", "L")}
    saved = compose("arch=hrm_deeploop", "arch.scaling.p=0.45", "arch.scaling.H.p=0.25")
    assert resumed() == {"H": ("custom", 0.25), "L": ("custom", 0.45)}                 # the run's own
    assert resumed("arch.scaling.rule=deeploop") == {"H": ("custom", 0.25), "L": ("deeploop", 0.5)}
    assert resumed("arch.scaling.H.rule=deeploop") == {"H": ("deeploop", 0.5), "L": ("custom", 0.45)}
    # custom reads the run's exponent, unless one is given with it
    assert resumed("arch.scaling.rule=custom")["L"] == ("custom", 0.45)
    assert resumed("arch.scaling.rule=custom", "arch.scaling.p=0.3")["L"] == ("custom", 0.3)


def test_settings_a_checkpoint_holds_that_this_version_does_not_have_are_left_out():
    from hrm.pretrain_config import PretrainConfig
    saved = {"lr": 1.0, "retired_setting": 3, "arch": {"name": "a", "old_arch_field": 1,
                                                     "scaling": {"rule": "custom", "lambda": 2.0, "gone": 0,
                                                                 "H": {"p": 0.25, "gone_too": 1}}},
             "wandb": {"mode": "auto", "project": "x"}}
    assert known_settings(PretrainConfig, saved) == {"lr": 1.0, "arch": {"name": "a", "scaling": {
        "rule": "custom", "lambda": 2.0, "H": {"p": 0.25}}}, "wandb": {"mode": "auto"}}


def test_a_relative_build_of_another_directory_is_found_by_its_resolved_path(small_build, tmp_path, monkeypatch):
    step = tmp_path / "run" / "step_1"
    step.mkdir(parents=True)
    torch.save({"format": FORMAT, "config": {"data_path": "data/elsewhere", "lr": 1.0},
                "data_path_resolved": str(small_build),
                "optimizers": {"dense": {"state": {0: torch.zeros(3)}}}}, step / "trainer.pt")
    assert saved_config(step) == {"data_path": str(small_build), "lr": 1.0}
    # also where the path as typed names another build from here: the one trained on counts
    (tmp_path / "data" / "elsewhere" / "train").mkdir(parents=True)
    (tmp_path / "data" / "elsewhere" / "train" / "dataset.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert saved_config(step) == {"data_path": str(small_build), "lr": 1.0}


def test_a_trainer_file_that_cannot_be_read_is_named_not_the_config_files_values(tmp_path):
    """A damaged (or foreign) trainer.pt is refused naming it, with the previous checkpoint; left to
    the Trainer, the config files' values would be validated first (`data_path: not a build`)."""
    run = tmp_path / "run"
    for step in (1, 2):
        (run / f"step_{step}").mkdir(parents=True)
        torch.save({"format": FORMAT, "config": {"lr": 1.0}}, run / f"step_{step}" / "trainer.pt")
    (run / "step_2" / "trainer.pt").write_bytes(b"damaged")
    with pytest.raises(CheckpointError, match=rf"{run / 'step_2' / 'trainer.pt'} is not a checkpoint.*"
                                              rf"resume={run / 'step_1'} continues from the previous checkpoint"):
        saved_config(run / "step_2")
    torch.save({"config": {"lr": 1.0}}, run / "step_2" / "trainer.pt")      # not this trainer's format
    with pytest.raises(CheckpointError, match=f"not a {FORMAT} checkpoint"):
        saved_config(run / "step_2")
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    refused = subprocess.run([sys.executable, str(ROOT / "pretrain.py"), f"resume={run}"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 2 and f"pretrain.py: error: {run / 'step_2' / 'trainer.pt'}: not a" in refused.stderr, \
        refused.stderr[-3000:]
    assert "data_path" not in refused.stderr and "Traceback" not in refused.stderr


def test_a_nested_key_deleted_on_the_command_line_stays_deleted():
    """`~wandb.mode` on resume: the config's default, not a placeholder object refused as a bad value."""
    from hrm.pretrain_config import WandbConfig
    composed = {"wandb": {"entity": None}}      # as Hydra composes `~wandb.mode ~max_steps`
    saved = {"max_steps": 5, "wandb": {"mode": "offline", "entity": "me"}}
    merged, _ = with_saved_settings(composed, saved, given_keys(["~wandb.mode", "~max_steps"]))
    assert merged == {"wandb": {"entity": "me"}}
    assert WandbConfig(**merged["wandb"]).mode == "auto"


def test_a_run_continued_in_its_folder_keeps_its_project(small_build, tmp_path):
    """resume=<run folder> alone continues that run in place, under its name: its project_name too
    (W&B's run is found by project and id), also with checkpoint_path=<its folder>. A branch
    (run_name=, checkpoint_path=<another folder>) names its own."""
    from hrm.resume_settings import resume_with_saved_settings
    step = tmp_path / "run" / "step_1"
    step.mkdir(parents=True)
    torch.save({"format": FORMAT, "config": {"data_path": str(small_build), "project_name": "mine", "lr": 1.0}},
               step / "trainer.pt")
    merged, note = resume_with_saved_settings(compose(f"resume={step.parent}"), [f"resume={step.parent}"])
    assert merged["project_name"] == "mine" and "project_name=mine" in note
    for branch in ("run_name=other", f"checkpoint_path={tmp_path / 'other'}"):
        merged, _ = resume_with_saved_settings(compose(f"resume={step.parent}", branch),
                                               [f"resume={step.parent}", branch])
        assert merged["project_name"] is None, branch
    # checkpoint_path= the run's own folder continues it in place, as the Trainer does (it keeps the run's name)
    merged, _ = resume_with_saved_settings(compose("resume=latest", f"checkpoint_path={step.parent}"),
                                           ["resume=latest", f"checkpoint_path={step.parent}"])
    assert merged["project_name"] == "mine"
    merged, _ = resume_with_saved_settings(compose(f"resume={step.parent}", "project_name=new"),
                                           [f"resume={step.parent}", "project_name=new"])
    assert merged["project_name"] == "new"


def test_a_sweep_resumed_with_its_runs_settings_passes_the_sweep_check(tiny_build, tmp_path):
    """`-m resume=latest checkpoint_path=<sweep> lr=...` from a folder without the config files'
    build: the check of every job validates each job as it will run, with its checkpoint's settings
    (it refused `data_path: not a build` for the config files' data/arc-aug-1000), as a single
    `resume=` run does."""
    sweep = tmp_path / "sweep"
    for lr in ("0.001", "0.002"):
        Trainer(micro_config(tiny_build, sweep / f"lr={lr}", lr=float(lr), max_steps=1, eval_save_predictions=False),
                CPU, progress=False).fit()
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1", WORLD_SIZE="1")
    run = subprocess.run([sys.executable, str(ROOT / "pretrain.py"), "-m", "resume=latest",
                          f"checkpoint_path={sweep}", "lr=0.001,0.002"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "invalid sweep" not in run.stderr and run.stdout.count("the run had already finished at step 1") == 2, \
        run.stdout


def test_pretrain_resume_of_a_run_folder_alone_continues_that_run(tiny_build, tmp_path):
    """`pretrain.py resume=<run folder> max_steps=3` from another directory: the micro arch, build,
    batch and schedule are the run's (the config files' hrm_v1 defaults would be refused), max_steps
    is the command line's. And `resume=<run>/step_<N>` alone, step_<N> removed by keep_checkpoints
    (or mistyped): the refusal names the run's step folders and suggests the run folder, as the
    README says, rather than refusing the config files' data_path that stood in for the run's
    (nothing to take it from)."""
    run = tmp_path / "run"
    Trainer(micro_config(tiny_build, run, max_steps=2, eval_save_predictions=False), CPU, progress=False).fit()
    other = tmp_path / "other"      # another run's folder, for the refusal: `run` gets step_3 meanwhile
    (other / "step_1").mkdir(parents=True)
    (other / "step_1" / "trainer.pt").write_bytes(b"")
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")

    def pretrain(*args):
        return lambda: subprocess.run([sys.executable, str(ROOT / "pretrain.py"), *args], cwd=workdir,
                                      capture_output=True, text=True, timeout=300, env=env)
    resumed, *refused = together(pretrain(f"resume={run}", "max_steps=3"), pretrain(f"resume={other / 'step_9'}"),
                                 pretrain(f"resume={tmp_path / 'nothing'}"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {run / 'step_2'} at step 2" in resumed.stdout
    assert (f"resume: settings the command line does not give are the run's own, saved in {run / 'step_2'}: "
            f"arch.name=micro arch.hidden_size=16 arch.num_heads=1 arch.expansion=2.0 arch.H_layers=1 "
            f"arch.L_layers=1 arch.halt_max_steps=2 arch.puzzle_emb_ndim=16 arch.scaling.rule=deeploop, "
            f"data_path={tiny_build}, global_batch_size=8") in resumed.stderr, resumed.stderr
    assert sorted(losses_by_step(run)) == [1, 2, 3]
    config = yaml.safe_load((run / "all_config.yaml").read_text())
    assert (config["arch"]["hidden_size"], config["max_steps"], config["seed"]) == (MICRO_ARCH["hidden_size"], 3, 3)
    assert os.listdir(workdir) == []            # nothing written where it ran
    for said, refusal in zip((f"resume={other / 'step_9'}: no such folder; the run folder {other} holds step_1: "
                              f"resume={other} continues from its newest",
                              f"resume={tmp_path / 'nothing'}: no such folder"), refused):
        assert refusal.returncode == 2, refusal.stderr[-3000:]
        assert f"pretrain.py: error: {said}" in refusal.stderr and "not a build" not in refusal.stderr, refusal.stderr

    # the settings saved at step 3 are the resumed run's own: max_steps=3 now comes from there
    composed = compose(f"resume={run}")
    assert composed["arch"]["name"] == "hrm_v1"
    from hrm.resume_settings import resume_with_saved_settings
    merged, _ = resume_with_saved_settings(composed, [f"resume={run}"])
    assert merged["max_steps"] == 3 and merged["arch"]["name"] == "micro"


def test_resume_latest_that_finds_nothing_is_said_before_the_config_files_data_path(tmp_path, monkeypatch):
    """`resume=latest run_name=X` for a run of another build's project, from a checkout without the
    config files' data/arc-aug-1000: the refusal names where run X's checkpoints are (as the README
    says), not `data_path: not a build` of the default build that stood in for the run's. In a sweep
    (a tag), a job without a checkpoint starts afresh: nothing to say."""
    from hrm.resume_settings import resume_path_problem
    (tmp_path / "checkpoints" / "small-hrm" / "X" / "step_5").mkdir(parents=True)
    (tmp_path / "checkpoints" / "small-hrm" / "X" / "step_5" / "trainer.pt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    config = {"resume": "latest", "run_name": "X", "project_name": None, "checkpoint_path": None,
              "data_path": "data/arc-aug-1000"}
    problem = resume_path_problem(config)
    assert problem.startswith("resume=latest: no checkpoint under checkpoints/arc-aug-1000-hrm/X; ")
    assert "another project: checkpoints/small-hrm/X (pass its project_name=" in problem
    assert resume_path_problem(dict(config, project_name="small-hrm")) is None       # found: the run's settings
    assert resume_path_problem(config, tag="lr=0.1") is None
    assert resume_path_problem(dict(config, resume="auto")) is None


def test_a_resume_path_mistake_is_found_without_loading_torch(tmp_path):
    """pretrain.py says a `resume=` mistake before anything loads torch (seconds, where the config
    checks take a fraction of one): the path rules (hrm.run_folders) and the settings code import
    none of it on the way. Checked in a fresh interpreter: this one has torch loaded."""
    (tmp_path / "sweep" / "lr=0.1" / "step_2").mkdir(parents=True)
    (tmp_path / "sweep" / "lr=0.1" / "step_2" / "trainer.pt").write_bytes(b"")
    code = ("import sys\n"
            "from hrm.resume_settings import resume_path_problem, resume_with_saved_settings\n"
            f"config = {{'resume': {str(tmp_path / 'sweep')!r}, 'run_name': None, 'project_name': None,\n"
            "          'checkpoint_path': None, 'data_path': 'data/none'}\n"
            "print(resume_path_problem(config))\n"
            "print(resume_path_problem(dict(config, resume='latest', run_name='X')))\n"
            "print(resume_with_saved_settings(dict(config, resume='latest', run_name='X'), [])[1])\n"
            "print('torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr
    said = run.stdout.splitlines()
    assert said[0].startswith(f"resume={tmp_path / 'sweep'}: neither a checkpoint folder") and "lr=0.1" in said[0]
    assert said[1].startswith("resume=latest: no checkpoint under ") and said[2] == "None"
    assert said[3] == "False", run.stdout


def test_resume_latest_of_a_run_in_another_project_is_refused_naming_it(tmp_path, monkeypatch):
    """`resume=latest run_name=X` without the data_path X trained on: the project is the config
    files' build's (`arc-aug-1000-hrm`), where X is not. The refusal names where X's checkpoints
    are, before the config files' data_path stands in for the run's (`data_path: not a build`); a
    sweep's job resumed so is refused too, rather than started afresh in that project. A job whose
    name is nowhere (one that diverged before its first checkpoint) still starts afresh."""
    from hrm.resume_settings import resume_with_saved_settings
    monkeypatch.chdir(tmp_path)
    for run in ("X", "X-lr=0.001"):
        (tmp_path / "checkpoints" / "quickstart-hrm" / run / "step_2").mkdir(parents=True)
        torch.save({"format": FORMAT, "config": {"lr": 1.0}},
                   tmp_path / "checkpoints" / "quickstart-hrm" / run / "step_2" / "trainer.pt")
    for tag in ("", "lr=0.001"):
        with pytest.raises(ValueError) as refused:
            resume_with_saved_settings(compose("resume=latest", "run_name=X"), ["resume=latest", "run_name=X"], tag)
        name = f"X-{tag}" if tag else "X"
        assert str(refused.value) == (
            f"resume=latest: no checkpoint under {os.path.join('checkpoints', 'arc-aug-1000-hrm', name)}; a run of "
            f"that name has checkpoints in another project: {os.path.join('checkpoints', 'quickstart-hrm', name)} "
            f"(pass its project_name=; the project defaults to '<data folder>-hrm')")
    composed = compose("resume=latest", "run_name=X")
    assert resume_with_saved_settings(composed, ["resume=latest", "run_name=X"], "lr=0.002") == (composed, None)
    # from pretrain.py (no build of the config files' here), and for a run name found nowhere (a typo)
    env = dict(os.environ, WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    elsewhere, nowhere = together(*[lambda name=name: subprocess.run(
        [sys.executable, str(ROOT / "pretrain.py"), "resume=latest", f"run_name={name}"], cwd=tmp_path,
        capture_output=True, text=True, timeout=120, env=env) for name in ("X", "Y")])
    for run, said in ((elsewhere, "X; a run of that name has checkpoints in another project: "
                                  f"{os.path.join('checkpoints', 'quickstart-hrm', 'X')}"), (nowhere, "Y\n")):
        assert run.returncode == 2, run.stderr[-3000:]
        assert (f"pretrain.py: error: resume=latest: no checkpoint under "
                f"{os.path.join('checkpoints', 'arc-aug-1000-hrm', said)}") in run.stderr, run.stderr[-3000:]
        assert "not a build" not in run.stderr
