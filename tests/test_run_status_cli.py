"""scripts/run_status.py from the command line: one status line per run folder, errors without a traceback."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts.run_status import main, unigram_floor

REPO = Path(__file__).resolve().parents[1]


def write_run(folder: Path, losses: list[float], data_path=None, diverged=False, evals=()) -> Path:
    """A run folder as pretrain.py leaves it: log.jsonl, all_config.yaml, diverged.json on divergence."""
    folder.mkdir(parents=True)
    records = [{"step": 0, "num_params": 10}] + [{"step": i + 1, "train/lm_loss": x} for i, x in enumerate(losses)]
    records += list(evals)
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if data_path is not None:
        (folder / "all_config.yaml").write_text(yaml.safe_dump({"data_path": str(data_path), "max_steps": 50}))
    if diverged:
        (folder / "diverged.json").write_text(json.dumps({"step": len(losses) + 1, "reason": "non-finite loss"}))
    return folder


def test_a_run_stopped_by_sigterm_says_so_until_it_is_resumed(small_build, tmp_path, capsys):
    stopped = write_run(tmp_path / "stopped", [1.0] * 4, small_build, evals=[{"step": 4, "stopped": 1}])
    resumed = write_run(tmp_path / "resumed", [1.0] * 4, small_build,
                        evals=[{"step": 4, "stopped": 1}, {"step": 5, "train/lm_loss": 1.0}])
    assert main([str(stopped), str(resumed)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(stopped by SIGTERM at step 4: resume it to finish)") and "stopped by" not in out[1]


def test_a_run_stopped_before_its_last_evaluation_is_finished_once_the_resume_runs_it(small_build, tmp_path, capsys):
    """SIGTERM on the run's last step: the resume logs its start and the pending evaluation at that
    same step, no new training step; the run is complete, not still 'stopped'."""
    finished = write_run(tmp_path / "finished", [1.0] * 4, small_build,
                         evals=[{"step": 4, "stopped": 1}, {"step": 4, "num_params": 10},
                                {"step": 4, "eval/lm_loss": 1.0}])
    assert main([str(finished)]) == 0
    assert "stopped by" not in capsys.readouterr().out


def test_each_run_is_classified_against_the_floor_of_its_build(small_build, tmp_path, capsys):
    floor = unigram_floor(small_build)[0]
    trained = write_run(tmp_path / "trained", [floor * 1.5] * 10 + [floor * 0.5] * 50, small_build)
    stuck = write_run(tmp_path / "stuck", [floor] * 50, small_build)
    diverged = write_run(tmp_path / "diverged", [floor] * 5, small_build, diverged=True)
    assert main([str(trained), str(stuck), str(diverged)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [[f"{trained}:", "trained"], [f"{stuck}:", "stuck"],
                                                   [f"{diverged}:", "diverged"]]
    assert f"steps 60  final loss {floor * 0.5:.4f} (mean of the last 50)" in lines[0]
    assert f"floor {floor:.4f}" in lines[0]
    assert lines[0].endswith(f"floor {floor:.4f}  no evaluation yet")      # was "eval lm_loss nan  eval pass@2 nan"


def test_min_is_labelled_as_the_lowest_window_mean_not_the_lowest_loss(small_build, tmp_path, capsys):
    """min is a moving mean: for 4 steps with one loss of 1.0 it is the mean, 2.5, and must not read
    as the lowest loss (a newcomer saw `min` equal to `final loss` above a lower logged one)."""
    run = write_run(tmp_path / "run", [4.0, 1.0, 3.0, 2.0], small_build)
    assert main([str(run)]) == 0
    assert "final loss 2.5000 (mean of the last 4)  min 2.5000 (4-step mean)  floor" in capsys.readouterr().out
    assert main([str(run), "--window", "2"]) == 0
    assert "min 2.0000 (2-step mean)" in capsys.readouterr().out          # (1 + 3) / 2, the lowest pair


def test_the_last_evaluation_is_shown(small_build, tmp_path, capsys):
    evals = [{"step": 20, "eval/lm_loss": 1.5, "eval/pass@2": 0.125}, {"step": 40, "eval/lm_loss": 1.25, "eval/pass@2": 0.25}]
    run = write_run(tmp_path / "run", [0.1] * 40, small_build, evals=evals)
    assert main([str(run)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("eval lm_loss 1.2500  eval pass@2 0.2500")


def test_a_run_resumed_from_an_earlier_checkpoint_is_read_without_the_attempt_it_replaced(small_build, tmp_path,
                                                                                        capsys):
    """Diverged at step 13 (steps 1-12 logged, an evaluation at 10), resumed from step 8 with a lower
    lr, diverged again at 11: the run's steps are 10, its losses those of the resume after step 8,
    and the evaluation at 10 of the replaced attempt is not its own (it read steps 12 and the old
    losses and evaluation)."""
    run = write_run(tmp_path / "run", [2.0] * 8 + [9.0] * 4, small_build, diverged=True,
                    evals=[{"step": 10, "eval/lm_loss": 7.0}, {"step": 13, "diverged": 1},
                           {"step": 8, "num_params": 10}, {"step": 9, "train/lm_loss": 1.0},
                           {"step": 10, "train/lm_loss": 1.0}, {"step": 11, "diverged": 1}])
    assert main([str(run)]) == 0
    line = capsys.readouterr().out.rstrip()
    assert "diverged  steps 10  final loss 1.8000 (mean of the last 10)" in line     # (8 * 2 + 2 * 1) / 10
    assert line.endswith("no evaluation yet")


def test_a_run_that_has_logged_no_step_yet_is_not_called_an_error(small_build, tmp_path, capsys):
    """A run starting (torch.compile before its first step) or stopped before it: its log holds only
    its start. It read `error  steps 0  final loss nan (mean of the last 0)  min nan (0-step mean)`."""
    starting = write_run(tmp_path / "starting", [], small_build)
    assert main([str(starting)]) == 0
    floor = unigram_floor(small_build)[0]
    assert capsys.readouterr().out == (f"{starting}: no-steps  no training step logged yet (starting, or stopped "
                                       f"before its first step)  floor {floor:.4f}  no evaluation yet\n")


def test_an_evaluation_without_pass_at_k_shows_its_loss_alone(small_build, tmp_path, capsys):
    run = write_run(tmp_path / "run", [0.1] * 40, small_build, evals=[{"step": 40, "eval/lm_loss": 1.25}])
    assert main([str(run)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("eval lm_loss 1.2500")     # eval_pass_k=[]: no "pass@2 nan"


def test_the_runs_own_build_wins_over_one_of_the_same_name_in_the_working_directory(small_build, tmp_path,
                                                                                     monkeypatch, capsys):
    """Both runs recorded data_path=data/b, relative to where they trained; run_status.py is run
    from another project whose data/b is another build. Each run is classified against its own:
    the first (default layout) by the folder above checkpoints/<project>/<run>, the second (a
    checkpoint_path elsewhere) by the absolute path its checkpoint recorded."""
    import shutil
    import torch
    from arc_data.build import BuildConfig, build
    own = tmp_path / "a" / "data" / "b"
    shutil.copytree(small_build, own)
    elsewhere = tmp_path / "elsewhere"
    build(BuildConfig(num_aug=1, limit_tasks=2, output_dir=str(elsewhere / "data" / "b")), progress=False)
    default_layout = write_run(tmp_path / "a" / "checkpoints" / "p" / "r", [9.0] * 3, "data/b")
    custom = write_run(tmp_path / "runs" / "r", [9.0] * 3, "data/b")
    (custom / "step_3").mkdir()
    torch.save({"data_path_resolved": str(own)}, custom / "step_3" / "trainer.pt")
    monkeypatch.chdir(elsewhere)
    assert main([str(default_layout), str(custom)]) == 0, capsys.readouterr().err
    floor = unigram_floor(own)[0]
    assert floor != pytest.approx(unigram_floor(elsewhere / "data" / "b")[0])
    assert [f"floor {floor:.4f}" in line for line in capsys.readouterr().out.splitlines()] == [True, True]


def test_data_option_stands_in_for_the_config(small_build, tmp_path, capsys):
    run = write_run(tmp_path / "run", [9.0] * 3)            # no all_config.yaml
    assert main([str(run)]) == 2
    err = capsys.readouterr().err
    assert err == f"run_status.py: error: {run}: no data_path in {run / 'all_config.yaml'}; pass --data BUILD\n"
    assert main([str(run), "--data", str(small_build)]) == 0
    assert capsys.readouterr().out.startswith(f"{run}: too-short  steps 3")


def test_data_other_than_the_runs_build_is_noted(small_build, tmp_path, capsys):
    """--data with a build other than the one the run recorded (here: another --seed, the same
    tasks): classified against --data's floor, as asked, with a note saying so."""
    from arc_data.build import BuildConfig, build
    other = tmp_path / "seed7"
    build(BuildConfig(num_aug=4, limit_tasks=8, seed=7, output_dir=str(other)), progress=False)
    run = write_run(tmp_path / "run", [9.0] * 3, small_build)
    assert main([str(run), "--data", str(other)]) == 0
    out = capsys.readouterr()
    assert out.err == (f"run_status.py: note: {run} was trained on {small_build}, another build than --data {other} "
                       f"(their manifest digests differ): it is classified against the floor of --data\n")
    assert f"floor {unigram_floor(other)[0]:.4f}" in out.out
    assert main([str(run), "--data", str(small_build)]) == 0     # the run's own build: nothing to note
    assert capsys.readouterr().err == ""


def test_a_build_moved_since_training_suggests_data(small_build, tmp_path, capsys):
    run = write_run(tmp_path / "run", [9.0] * 3, tmp_path / "moved")
    assert main([str(run)]) == 2
    assert capsys.readouterr().err == (f"run_status.py: error: {tmp_path / 'moved'} (from data_path in "
                                       f"{run / 'all_config.yaml'}): not a build (no train/dataset.json); if the "
                                       f"build has moved since, pass --data BUILD\n")
    assert main([str(run), "--data", str(tmp_path / "elsewhere")]) == 2   # no such advice for --data itself
    assert capsys.readouterr().err.endswith("(from --data): not a build (no train/dataset.json)\n")


def test_a_relative_data_path_is_found_from_another_folder(small_build, tmp_path, monkeypatch, capsys):
    """Trained from PROJECT with data_path=data/b (as typed), the run in PROJECT/checkpoints/p/r:
    run_status.py run from elsewhere finds the build where training ran."""
    import shutil
    project = tmp_path / "project"
    shutil.copytree(small_build, project / "data" / "b")
    run = write_run(project / "checkpoints" / "p" / "r", [9.0] * 3, "data/b")
    monkeypatch.chdir(tmp_path)
    assert main([str(run)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith(f"{run}: too-short  steps 3  final loss 9.0000")


def test_a_run_with_fewer_steps_than_the_window_is_too_short_to_tell_not_stuck(small_build, tmp_path, capsys):
    """Four steps at the floor: every run starts there, so it is no sign of being stuck (a run read
    while it trains); the same steps averaged over a window they fill are."""
    floor = unigram_floor(small_build)[0]
    run = write_run(tmp_path / "run", [floor] * 4, small_build)
    assert main([str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"{run}: too-short  steps 4  final loss {floor:.4f} (mean of the last 4)")
    assert main([str(run), "--window", "4"]) == 0
    assert capsys.readouterr().out.startswith(f"{run}: stuck  steps 4")
    below = write_run(tmp_path / "below", [floor * 0.5] * 4, small_build)   # already below: trained
    assert main([str(below)]) == 0
    assert capsys.readouterr().out.startswith(f"{below}: trained  steps 4")


def test_a_branch_says_how_many_steps_its_mean_covers(small_build, tmp_path, capsys):
    """A branch (`resume=<step_21> run_name=B`) logs from its parent's step 21 on: at step 30 its mean
    is of its own 9 steps. It read "(mean of the last 30)  min ... (30-step mean)"."""
    floor = unigram_floor(small_build)[0]
    run = tmp_path / "branch"
    write_run(run, [], small_build)
    records = [{"step": 21, "num_params": 10}] + [{"step": s, "train/lm_loss": floor * 0.5} for s in range(22, 31)]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main([str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"{run}: trained  steps 30  final loss {floor * 0.5:.4f} "
                                              f"(mean of the last 9)  min {floor * 0.5:.4f} (9-step mean)")


def test_a_branch_with_fewer_own_steps_than_the_window_is_too_short(small_build, tmp_path, capsys):
    """A branch from step 51 that has trained 9 steps at the floor has logged fewer steps than the
    window, as the too-short rule says, although its step count is 60: it read `stuck`, judged on a
    9-step mean."""
    floor = unigram_floor(small_build)[0]
    run = tmp_path / "branch"
    write_run(run, [], small_build)
    records = [{"step": 51, "num_params": 10}] + [{"step": s, "train/lm_loss": floor} for s in range(52, 61)]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main([str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"{run}: too-short  steps 60  final loss {floor:.4f} (mean of the last 9)")


def test_steps_and_window_are_optimizer_steps_when_every_third_step_is_logged(small_build, tmp_path, capsys):
    """log_interval=3 over 60 steps logs 20 losses: the run has 60 steps (not 20), a window of 6
    steps averages the last 2 logged losses, and the default 50 does not make it too short."""
    floor = unigram_floor(small_build)[0]
    run = tmp_path / "run"
    write_run(run, [], small_build)
    curve = [floor * 2.0] * 18 + [floor * 0.9, floor * 0.5]          # logged at steps 3, 6, ..., 60
    (run / "log.jsonl").write_text("".join(json.dumps({"step": 3 * (i + 1), "train/lm_loss": x}) + "\n"
                                           for i, x in enumerate(curve)))
    assert main([str(run), "--window", "6"]) == 0
    assert capsys.readouterr().out.startswith(f"{run}: trained  steps 60  final loss {floor * 0.7:.4f} "
                                              f"(mean of the last 6)")
    assert main([str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"{run}: stuck  steps 60")    # 50 steps: 17 losses, mean > floor


def test_a_folder_that_is_not_a_run_fails_before_any_line_is_printed(small_build, tmp_path, capsys):
    good = write_run(tmp_path / "good", [1.0] * 3, small_build)
    assert main([str(good), str(tmp_path / "typo")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"run_status.py: error: {tmp_path / 'typo'}: no log.jsonl, not a run folder of pretrain.py\n"


def test_a_folder_of_runs_given_alone_names_them(small_build, tmp_path, capsys):
    """`run_status.py checkpoints/<project>` (or a sweep's checkpoint_path) for its runs."""
    for name in ("b", "a"):
        write_run(tmp_path / "project" / name, [1.0] * 3, small_build)
    assert main([str(tmp_path / "project")]) == 2
    assert capsys.readouterr().err == (f"run_status.py: error: {tmp_path / 'project'}: no log.jsonl, not a run folder "
                                       f"of pretrain.py; it holds the runs a, b: pass them, e.g. "
                                       f"{tmp_path / 'project'}/*\n")


def test_a_folder_without_a_run_among_several_is_passed_over(small_build, tmp_path, capsys):
    """`run_status.py checkpoints/<project>/*` may meet a folder that holds no run (one that failed
    before logging) or a file (compare.py's build.log beside its arms): it is named and skipped, and
    the runs are still reported."""
    good = write_run(tmp_path / "good", [1.0] * 3, small_build)
    (tmp_path / "empty").mkdir()
    assert main([str(good), str(tmp_path / "empty")]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{good}: ") and err == f"run_status.py: note: {tmp_path / 'empty'}: no log.jsonl, not a run folder; skipped\n"
    assert main([str(tmp_path / "empty")]) == 2     # the one folder asked for: an error
    capsys.readouterr()
    (tmp_path / "build.log").write_text("")        # a file the glob meets (compare.py's folder): passed over too
    assert main([str(tmp_path / "build.log"), str(good)]) == 0
    said = capsys.readouterr().err
    assert said == f"run_status.py: note: {tmp_path / 'build.log'}: no log.jsonl, not a run folder; skipped\n"
    (tmp_path / "empty2").mkdir()
    assert main([str(tmp_path / "empty"), str(tmp_path / "empty2")]) == 2
    assert "none of the 2 folders holds a run" in capsys.readouterr().err


def test_folders_among_several_that_hold_their_runs_one_level_down_name_them(small_build, tmp_path, capsys):
    """p_sweep.py's cells hold their run in run/ (`run_status.py WORK/lr*/*` meets the cells): each
    was skipped with no word of the run inside, then 'none of the 2 folders holds a run'."""
    cells = [tmp_path / "lr0.001_loops2x2" / f"p{p}_seed0" for p in ("0.300", "0.500")]
    for cell in cells:
        write_run(cell / "run", [1.0] * 3, small_build)
    assert main([str(c) for c in cells]) == 2
    err = capsys.readouterr().err
    for cell in cells:
        assert f"{cell}: no log.jsonl, not a run folder; skipped; it holds the runs run: pass them, e.g. {cell}/*" in err


def test_the_script_has_a_help_and_runs_from_anywhere(small_build, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # it must find the repository itself

    def script(*args):
        return subprocess.run([sys.executable, str(REPO / "scripts" / "run_status.py"), *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)
    usage = script("--help")
    assert usage.returncode == 0 and "RUN_DIR" in usage.stdout
    assert "stuck" in usage.stdout and "too-short" in usage.stdout
    run = write_run(tmp_path / "run", [0.1] * 5, small_build)
    out = script(str(run))
    assert out.returncode == 0 and out.stdout.startswith(f"{run}: trained  steps 5"), out.stderr


def test_a_damaged_log_line_is_named_and_a_cut_last_line_is_not(small_build, tmp_path, capsys):
    """A record cut short at the end (a run killed while writing it) is left out; a line in the
    middle that is not a JSON object names the file and line, without a traceback."""
    cut = write_run(tmp_path / "cut", [1.0] * 3, small_build)
    with open(cut / "log.jsonl", "a") as log:
        log.write('{"step": 4, "train/lm_')
    assert main([str(cut)]) == 0 and capsys.readouterr().out.startswith(f"{cut}: ")
    for name, line in (("garbled", '{"step": 2, "train'), ("listed", "[1, 2]")):
        run = write_run(tmp_path / name, [1.0] * 3, small_build)
        lines = (run / "log.jsonl").read_text().splitlines()
        (run / "log.jsonl").write_text("\n".join(lines[:2] + [line] + lines[2:]) + "\n")
        assert main([str(run)]) == 2
        assert capsys.readouterr().err.startswith(f"run_status.py: error: {run / 'log.jsonl'}: line 3 is not a JSON"), name
    binary = write_run(tmp_path / "binary", [1.0] * 3, small_build)
    (binary / "log.jsonl").write_bytes(b"\x80\x81 not text\n")
    assert main([str(binary)]) == 2
    assert capsys.readouterr().err.startswith(f"run_status.py: error: {binary / 'log.jsonl'}: not text")


def test_a_config_that_is_not_text_is_named(small_build, tmp_path, capsys):
    """A binary all_config.yaml: the error names it (it said only "'utf-8' codec can't decode byte 0x80")."""
    run = write_run(tmp_path / "run", [1.0] * 3, small_build)
    (run / "all_config.yaml").write_bytes(b"\x80\x81\xff\n")
    assert main([str(run)]) == 2
    assert capsys.readouterr().err.startswith(f"run_status.py: error: {run / 'all_config.yaml'}: not text")


def test_log_records_that_are_not_the_trainers_are_named_without_a_traceback(small_build, tmp_path, capsys):
    """JSON objects, but a loss without its step or a loss that is no number: one line naming the log
    (a KeyError or TypeError traceback before, or a message not naming the file)."""
    for name, record in (("no_step", {"train/lm_loss": 1.0}), ("null_loss", {"step": 2, "train/lm_loss": None}),
                         ("word_loss", {"step": 2, "train/lm_loss": "low"})):
        run = write_run(tmp_path / name, [1.0] * 3, small_build)
        with open(run / "log.jsonl", "a") as log:
            log.write(json.dumps(record) + "\n" + json.dumps({"step": 9, "train/lm_loss": 1.0}) + "\n")
        assert main([str(run)]) == 2, name
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(f"run_status.py: error: {run / 'log.jsonl'}: a train/lm_loss record"), err


def test_a_reader_that_stops_early_ends_the_script_quietly(small_build, tmp_path):
    """`run_status.py checkpoints/<project>/* | head -1`: a BrokenPipeError traceback and exit 1
    (deterministic here: the pipe is closed before the script writes)."""
    run = write_run(tmp_path / "run", [1.0] * 3, small_build)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "run_status.py"),
                             str(run)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and err == ""


def with_settings(run: Path, **settings) -> Path:
    """`run`'s all_config.yaml with nested settings added (`arch={"scaling": {"p": 0.3}}`)."""
    config = yaml.safe_load((run / "all_config.yaml").read_text())
    config.update(settings)
    (run / "all_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return run


def test_the_settings_that_tell_runs_apart_end_each_line(small_build, tmp_path, capsys):
    """An ablation's runs named by hand (run_name=abl1): each line ends with the settings whose values
    are not the same in every run listed, as overrides; names, folders and logging are not settings."""
    common = {"eval_pass_k": [1, 2], "grad_clip": None, "compile": False}
    a = with_settings(write_run(tmp_path / "abl1", [1.0] * 3, small_build), run_name="abl1", log_interval=1,
                      lr=0.001, arch={"name": "mine", "scaling": {"p": 0.3, "H": {"p": None}}}, **common)
    b = with_settings(write_run(tmp_path / "abl2", [1.0] * 3, small_build), run_name="abl2", log_interval=5,
                      lr=0.001, arch={"name": "mine", "scaling": {"p": 0.5, "H": {"p": 0.25}}}, **common)
    c = with_settings(write_run(tmp_path / "abl3", [1.0] * 3, small_build), run_name="abl3", log_interval=1,
                      lr=0.003, arch={"name": "mine", "scaling": {"p": 0.3, "H": {"p": None}}},
                      **{**common, "eval_pass_k": [1, 2, 10]})
    assert main([str(a), str(b), str(c)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  settings: ")[1] for line in lines] == [
        "lr=0.001 arch.scaling.p=0.3 arch.scaling.H.p=null eval_pass_k=[1,2]",
        "lr=0.001 arch.scaling.p=0.5 arch.scaling.H.p=0.25 eval_pass_k=[1,2]",
        "lr=0.003 arch.scaling.p=0.3 arch.scaling.H.p=null eval_pass_k=[1,2,10]"]


def test_runs_that_share_every_setting_have_no_settings_column(small_build, tmp_path, capsys):
    runs = [with_settings(write_run(tmp_path / name, [1.0] * 3, small_build), run_name=name, lr=0.001)
            for name in ("seedless1", "seedless2")]
    assert main([str(r) for r in runs]) == 0
    out = capsys.readouterr().out
    assert "settings:" not in out and len(out.splitlines()) == 2
    assert main([str(runs[0])]) == 0          # one run: nothing to tell it apart from
    assert "settings:" not in capsys.readouterr().out


def test_a_setting_one_run_lacks_and_a_run_without_its_config_are_said(small_build, tmp_path, capsys):
    new = with_settings(write_run(tmp_path / "new", [1.0] * 3, small_build), grad_accum_steps=2)
    old = write_run(tmp_path / "old", [1.0] * 3, small_build)          # written before the field existed
    bare = write_run(tmp_path / "bare", [1.0] * 3)                     # no all_config.yaml: --data tells its build
    assert main([str(new), str(old), str(bare), "--data", str(small_build)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  settings: ")[1] for line in lines] == [
        "grad_accum_steps=2", "grad_accum_steps=(not set)", "unknown (no readable all_config.yaml)"]
