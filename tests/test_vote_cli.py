"""vote.py end to end: finding the newest predictions, the table, the JSON and the submission."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vote_fixtures import AUGS, TASKS, WRONG, Predictions, make_build, truth

REPO = Path(__file__).resolve().parents[1]


def write_evaluation(build, folder: Path, preds: Predictions, step: int, mtime: float):
    preds.save(folder / "rank_0.npz")
    info = folder / "info.json"
    info.write_text(json.dumps({"data_path": str(build), "step": step, "world_size": 1, "checkpoint": None}))
    os.utime(info, (mtime, mtime))


@pytest.fixture
def workdir(tmp_path):
    build = make_build(tmp_path / "data" / "arc-tiny", TASKS, {name: AUGS[:3] for name in TASKS})
    runs = tmp_path / "checkpoints" / "proj" / "run" / "predictions"
    # step_5 predicts everything wrong; step_2 is newer on disk (by info.json mtime) and is mostly right
    wrong = Predictions(build, TASKS).add("task_one", 0, WRONG, count=2)
    write_evaluation(build, runs / "step_5", wrong, 5, 1_000_000)
    good = Predictions(build, TASKS)
    good.add("task_one", 0, truth("task_one"), t=1, colour_map=AUGS[1][1], count=3, q=2.0)
    good.add("task_one", 0, WRONG, t=2, colour_map=AUGS[2][1], count=1, q=4.0)
    good.add("task_two", 0, truth("task_two", 0), count=1, q=-1.0).add("task_two", 0, WRONG, count=1, q=1.0)
    good.add("task_two", 1, truth("task_two", 1), t=2, colour_map=AUGS[2][1], count=2)
    good.add("task_three", 0, WRONG, count=2)
    write_evaluation(build, runs / "step_2", good, 2, 2_000_000)
    return tmp_path


def run_vote(cwd, *args):
    # no PYTHONPATH: the script must find the package from its own location
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(REPO / "evaluate" / "vote.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def vote_here(monkeypatch, capsys):
    """run_vote's counterpart in this process, for what is not about the script's start (the tests
    that use run_vote keep that): no interpreter to start, no voting kernels to load. A traceback
    fails the test here too."""
    from evaluate.vote import main

    def run(cwd, *args):
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as e:     # argparse's refusals
            code = e.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["vote.py", *args], code, out, err)
    return run


def test_vote_script_defaults_to_newest_predictions_and_writes_outputs(workdir):
    out = run_vote(workdir, "--K", "2", "1", "--json", "out/results.json", "--submission", "out/sub.json")
    assert out.returncode == 0, out.stderr
    assert "step_2" in out.stdout and "step: 2" in out.stdout
    report = json.loads((workdir / "out" / "results.json").read_text())
    # task_one solved at rank 1; task_two: input 0 at rank 2, input 1 at rank 1; three wrong; four unseen
    assert report["pass_at_k"] == {
        "1": {"task": 0.25, "pair": pytest.approx((1 + 0.5) / 4), "tasks_solved": 1, "pairs_solved": 2},
        "2": {"task": 0.5, "pair": pytest.approx(2 / 4), "tasks_solved": 2, "pairs_solved": 3}}
    one = report["tasks"]["task_one"]
    assert one["solved_at"] == 1 and one["margin"] == pytest.approx((3 - 1) / 4)
    pair = one["pairs"][0]
    assert (pair["rank"], pair["votes"], pair["candidates"], pair["correct_votes"]) == (1, 4, 2, 3)
    assert pair["top"][0]["grid"] == truth("task_one").tolist() and pair["top"][0]["correct"] is True
    assert pair["top"][1]["grid"] == WRONG.tolist() and pair["top"][1]["votes"] == 1
    assert pair["correct_confidence"] == pytest.approx(1 / (1 + 2.718281828459045 ** -2.0), rel=1e-6)
    two = report["tasks"]["task_two"]
    assert two["solved_at"] == 2 and [p["rank"] for p in two["pairs"]] == [2, 1]
    assert report["tasks"]["task_three"]["solved_at"] is None
    assert report["tasks"]["task_three"]["pairs"][0]["margin"] == -1.0
    assert report["missing"] == {"tasks": ["task_four"], "pairs": []}
    assert report["meta"]["tasks_seen"] == 3 and report["meta"]["pairs_seen"] == 4 and report["meta"]["step"] == 2
    assert "tasks without predictions (1, counted wrong): task_four" in out.stdout

    sub = json.loads((workdir / "out" / "sub.json").read_text())
    assert list(sub) == ["task_one", "task_two", "task_three", "task_four"]
    assert sub["task_one"] == [{"attempt_1": truth("task_one").tolist(), "attempt_2": WRONG.tolist()}]
    assert sub["task_two"][0] == {"attempt_1": WRONG.tolist(), "attempt_2": truth("task_two", 0).tolist()}
    # one answer only: repeated; no predictions: [[0]] twice
    assert sub["task_two"][1] == {"attempt_1": truth("task_two", 1).tolist(), "attempt_2": truth("task_two", 1).tolist()}
    assert sub["task_four"] == [{"attempt_1": [[0]], "attempt_2": [[0]]}]


def test_the_newest_predictions_are_found_at_any_depth_under_checkpoints(workdir):
    """checkpoint_path=checkpoints/sweeps/lr/p=0.5 puts a run three folders down, not two."""
    from evaluate.predictions import newest_predictions
    build = workdir / "data" / "arc-tiny"
    deep = workdir / "checkpoints" / "sweeps" / "lr" / "p=0.5" / "predictions" / "step_7"
    write_evaluation(build, deep, Predictions(build, TASKS), 7, 3_000_000)
    assert newest_predictions(workdir / "checkpoints") == deep


def test_vote_script_explicit_file_and_data(workdir, vote_here):
    folder = workdir / "checkpoints" / "proj" / "run" / "predictions" / "step_5"
    out = vote_here(workdir, "--predictions", str(folder / "rank_*.npz"), "--data", str(workdir / "data" / "arc-tiny"),
                    "--K", "1")
    assert out.returncode == 0, out.stderr
    assert "0/4" in out.stdout and "step: 5" in out.stdout


def test_vote_script_reports_errors_without_traceback(workdir, vote_here):
    out = vote_here(workdir, "--predictions", str(workdir / "nowhere.npz"), "--data", "x")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--predictions" in out.stderr and "nowhere.npz" in out.stderr


def test_a_run_folder_as_predictions_names_its_newest_step(workdir):
    """`--predictions checkpoints/<project>/<run>` (or its predictions/): the step folders inside
    are what was meant; the error names the newest."""
    from evaluate.errors import EvaluationInputError
    from evaluate.predictions import resolve_predictions
    run = workdir / "checkpoints" / "proj" / "run"
    for name in ("step_x", "step_", "step_\u00b2"):      # no step numbers (the last: isdigit() but not int())
        (run / "predictions" / name).mkdir()
        (run / "predictions" / name / "info.json").write_text("{}")
    for folder in (run, run / "predictions"):
        with pytest.raises(EvaluationInputError, match=f"the newest: --predictions {run / 'predictions' / 'step_5'}"):
            resolve_predictions(str(folder))
    with pytest.raises(EvaluationInputError, match=r"no .npz prediction files in \S+$"):
        resolve_predictions(str(workdir / "data"))     # no hint where there is nothing to point at


def test_the_table_keeps_its_columns_for_a_k_of_many_digits(workdir, vote_here):
    """--K 12345678 pushed its row's columns right of the header's and the other rows'."""
    out = vote_here(workdir, "--K", "1", "12345678")
    assert out.returncode == 0, out.stderr
    header, small, large = out.stdout.splitlines()[4:7]
    assert header.split()[0] == "K" and small.split()[0] == "1" and large.split()[0] == "12345678"
    k_end = header.index("K")   # right-aligned: the header's K over each value's last digit
    assert small.index("1") == k_end and large.index("12345678") + 7 == k_end, out.stdout
    # every column where the other rows and the header have it
    assert [i for i, c in enumerate(small) if c in "%/("] == [i for i, c in enumerate(large) if c in "%/("], out.stdout
    assert header.index("pair") == small.index("%", small.index("%") + 1) - 6, out.stdout


def test_a_checkpoint_folder_as_predictions_names_its_predictions(workdir, vote_here):
    """`--predictions run/step_5` (the checkpoint, or its model.pt) for `run/predictions/step_5`: the
    error names the latter, or predict.py when the step has none."""
    run = workdir / "checkpoints" / "proj" / "run"
    for step in ("step_5", "step_7"):
        (run / step).mkdir()
        (run / step / "model.pt").write_bytes(b"")
    out = vote_here(workdir, "--predictions", str(run / "step_5"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.endswith(f"({run / 'step_5'} is a checkpoint; its predictions: "
                               f"--predictions {run / 'predictions' / 'step_5'})\n"), out.stderr
    out = vote_here(workdir, "--predictions", str(run / "step_7"))
    assert out.stderr.endswith(f"python evaluate/predict.py checkpoint={run / 'step_7'} writes its predictions)\n")
    # one of its files: said so, where it read as an .npz with no arrays ('missing array(s) ...')
    out = vote_here(workdir, "--predictions", str(run / "step_5" / "model.pt"))
    assert out.returncode == 2 and out.stderr.endswith(
        f"--predictions {run / 'step_5' / 'model.pt'} is a file of a checkpoint, not predictions ({run / 'step_5'} "
        f"is a checkpoint; its predictions: --predictions {run / 'predictions' / 'step_5'})\n"), out.stderr


def test_empty_answers_take_no_attempt_and_nan_confidence_stays_valid_json(workdir, tmp_path):
    from arc_data.encoding import encode_grid
    from evaluate.vote import main
    build = workdir / "data" / "arc-tiny"
    p = Predictions(build, TASKS)
    blank = np.zeros(900, dtype=np.uint8)        # no colour cell at all: crops to a 0x0 grid

    def add_blank(task, count):
        for _ in range(count):
            p.add_raw(p.names.index(task), encode_grid(TASKS[task]["test"][0][0]), blank, q=0.0)
    add_blank("task_one", 3)
    p.add("task_one", 0, WRONG, q=float("nan"), count=2).add("task_one", 0, truth("task_one"), q=1.0)
    add_blank("task_three", 1)
    path = p.save(tmp_path / "p.npz")
    assert main(["--predictions", str(path), "--data", str(build), "--K", "1", "3",
                 "--json", str(tmp_path / "r.json"), "--submission", str(tmp_path / "s.json")]) == 0

    def no_nan(name):
        raise AssertionError(f"{name} in the JSON")
    report = json.loads((tmp_path / "r.json").read_text(), parse_constant=no_nan)
    top = report["tasks"]["task_one"]["pairs"][0]["top"]
    assert [(c["votes"], c["grid"]) for c in top] == [(3, []), (2, WRONG.tolist()), (1, truth("task_one").tolist())]
    assert top[1]["confidence"] is None and top[2]["confidence"] == pytest.approx(1 / (1 + np.exp(-1.0)))
    assert report["tasks"]["task_one"]["solved_at"] == 3        # the empty answer still counts for pass@K
    sub = json.loads((tmp_path / "s.json").read_text())
    assert sub["task_one"] == [{"attempt_1": WRONG.tolist(), "attempt_2": truth("task_one").tolist()}]
    assert sub["task_three"] == [{"attempt_1": [[0]], "attempt_2": [[0]]}]


def test_a_recorded_build_that_moved_names_the_info_json_and_data(workdir, vote_here):
    """The build comes from info.json when --data is not given: a build moved since (or a path
    relative to another machine) is named as that record, with --data as the way out."""
    (workdir / "data" / "arc-tiny").rename(workdir / "data" / "moved")
    folder = Path("checkpoints") / "proj" / "run" / "predictions" / "step_2"
    out = vote_here(workdir, "--predictions", str(folder))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"it is the data_path recorded in {folder / 'info.json'}: pass --data DIR" in out.stderr
    assert vote_here(workdir, "--predictions", str(folder), "--data", "data/moved").returncode == 0


def test_vote_script_names_a_corrupt_info_json_without_traceback(workdir, vote_here):
    # the newest predictions (found without --predictions) have an info.json cut short
    info = workdir / "checkpoints" / "proj" / "run" / "predictions" / "step_2" / "info.json"
    info.write_text('{"data_path": "')
    os.utime(info, (3_000_000, 3_000_000))
    out = vote_here(workdir, "--data", str(workdir / "data" / "arc-tiny"))
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stdout == ""
    assert out.stderr.startswith(f"vote.py: error: {info.relative_to(workdir)}: not valid JSON")


# ------------------------------------------------------------------------------ damaged builds
def cut_short(path: Path, size: int) -> int:
    """Keep the first ``size`` bytes of a file (a copy or download cut short); returns its old size."""
    data = path.read_bytes()
    path.write_bytes(data[:size])
    return len(data)


@pytest.mark.parametrize("name, keep", [("all__inputs.npy", lambda size: size // 2),   # rows missing
                                        ("all__labels.npy", lambda size: size - 1),
                                        ("all__inputs.npy", lambda size: 60),          # inside the header
                                        ("all__puzzle_indices.npy", lambda size: size - 4)])
def test_a_truncated_build_array_is_named_without_traceback(workdir, name, keep, vote_here):
    build = workdir / "data" / "arc-tiny"
    path = build / "test" / name
    size = cut_short(path, keep(path.stat().st_size))
    out = vote_here(workdir, "--predictions", str(workdir / "checkpoints/proj/run/predictions/step_2"),
                    "--data", str(build), "--K", "2")
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stdout == "", out.stderr
    assert out.stderr.startswith(f"vote.py: error: {path}") and out.stderr.count("\n") == 1, out.stderr
    if name.endswith("inputs.npy") and keep(size) > 128:    # past the header: both sizes are given
        assert f"holds {keep(size)} bytes" in out.stderr and f"needs {size}" in out.stderr


def test_npy_rows_refuses_a_file_longer_than_its_header_says(workdir):
    from evaluate.build_reader import NpyRows
    from evaluate.errors import EvaluationInputError
    path = workdir / "data" / "arc-tiny" / "test" / "all__inputs.npy"
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + b"\0" * 900)       # one row more than the header counts
    with pytest.raises(EvaluationInputError, match=rf"{path} holds {size + 900} bytes, .* needs {size}"):
        NpyRows(path)


# ------------------------------------------------------------------------------ output files
def predictions_args(workdir):
    return ["--predictions", str(workdir / "checkpoints/proj/run/predictions/step_2"),
            "--data", str(workdir / "data" / "arc-tiny"), "--K", "1"]


def test_a_folder_given_as_output_file_is_refused_before_voting(workdir, vote_here):
    (workdir / "taken").mkdir()
    out = vote_here(workdir, *predictions_args(workdir), "--json", "taken")
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stdout == "", out.stderr
    assert out.stderr == "vote.py: error: --json taken is a directory; give a file name\n"
    # the second output bad: the first is not written either
    out = vote_here(workdir, *predictions_args(workdir), "--json", "ok.json", "--submission", "taken")
    assert out.returncode == 2 and "--submission taken is a directory" in out.stderr and out.stdout == ""
    assert not (workdir / "ok.json").exists()


def test_an_output_under_a_file_is_refused_before_voting(workdir, vote_here):
    (workdir / "afile").write_text("x")
    out = vote_here(workdir, *predictions_args(workdir), "--submission", "afile/deeper/sub.json")
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stdout == "", out.stderr
    assert out.stderr == ("vote.py: error: --submission afile/deeper/sub.json: afile is in its path and is not "
                          "a directory\n")


def test_json_and_submission_cannot_be_one_file(workdir, vote_here):
    out = vote_here(workdir, *predictions_args(workdir), "--json", "same.json", "--submission", "./same.json")
    assert out.returncode == 2 and "are the same file" in out.stderr and out.stdout == ""


@pytest.mark.parametrize("option, name", [("--json", "info.json"), ("--submission", "rank_0.npz")])
def test_an_output_onto_the_predictions_own_files_is_refused(workdir, capsys, option, name):
    """`--json step_2/info.json` (meant: beside it) would replace the predictions' record, and a rank
    file the predictions themselves."""
    from evaluate.vote import main
    target = workdir / "checkpoints" / "proj" / "run" / "predictions" / "step_2" / name
    before = target.read_bytes()
    assert main([*predictions_args(workdir), option, str(target)]) == 2
    assert capsys.readouterr().err == (f"vote.py: error: {option} {target} is one of the predictions' own "
                                       f"files; give another file name\n")
    assert target.read_bytes() == before


@pytest.mark.parametrize("option, name", [("--json", "identifiers.json"), ("--submission", "test/dataset.json")])
def test_an_output_onto_the_build_files_is_refused(workdir, capsys, option, name):
    """`--json data/arc-tiny/identifiers.json` would replace the build's names with the results, after
    the vote: every later vote and training of that build would fail."""
    from evaluate.vote import main
    build = workdir / "data" / "arc-tiny"
    target = build / name
    before = target.read_bytes()
    # the build as info.json records it, and as --data names it
    for data in ([], ["--data", str(build)]):
        assert main(["--predictions", str(workdir / "checkpoints" / "proj" / "run" / "predictions" / "step_2"),
                     *data, option, str(target)]) == 2
        assert capsys.readouterr().err == (f"vote.py: error: {option} {target} is one of the files of the build "
                                           f"{build}; give another file name\n")
        assert target.read_bytes() == before
    # beside them is fine
    assert main([*predictions_args(workdir), option, str(build / "results.json")]) == 0


def test_a_glob_over_several_folders_is_said_and_needs_data(workdir, capsys):
    """`step_*/*.npz` votes two evaluations together: said on stderr; without --data, the error
    names the folders rather than claiming there is no info.json."""
    from evaluate.vote import main
    runs = workdir / "checkpoints" / "proj" / "run" / "predictions"
    spec = str(runs / "step_*" / "*.npz")
    assert main(["--predictions", spec, "--K", "1"]) == 2
    assert capsys.readouterr().err == (f"vote.py: error: --predictions {spec} matches files in 2 folders "
                                       f"({runs / 'step_2'}, {runs / 'step_5'}): pass --data for the build they "
                                       f"all predict\n")
    assert main(["--predictions", spec, "--data", str(workdir / "data" / "arc-tiny"), "--K", "1"]) == 0
    assert (f"note: voting the predictions of 2 folders together: {runs / 'step_2'}, {runs / 'step_5'}\n"
            in capsys.readouterr().err)


def test_a_build_file_that_cannot_be_read_is_named(workdir, monkeypatch, capsys):
    """A build of another user (mode 700, or an NFS permission) is a one-line error, not a traceback."""
    import evaluate.vote
    from evaluate.vote import main
    identifiers = workdir / "data" / "arc-tiny" / "identifiers.json"

    def refused(data_dir):
        raise PermissionError(13, "Permission denied", str(identifiers))
    monkeypatch.setattr(evaluate.vote, "load_test_split", refused)
    assert main(predictions_args(workdir)) == 2
    assert capsys.readouterr().err == f"vote.py: error: cannot read {identifiers}: Permission denied\n"


def test_outputs_are_written_whole_or_not_at_all(workdir, monkeypatch, capsys):
    import evaluate.outputs
    from evaluate.vote import main
    results = workdir / "new" / "folder" / "results.json"       # missing folders are created
    assert main([*predictions_args(workdir), "--json", str(results)]) == 0
    assert json.loads(results.read_text())["meta"]["step"] == 2
    assert os.listdir(results.parent) == ["results.json"]        # no temporary file left behind
    capsys.readouterr()

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(evaluate.outputs.os, "replace", full_disk)
    results.write_text("the previous results")
    assert main([*predictions_args(workdir), "--json", str(results)]) == 2
    assert capsys.readouterr().err == f"vote.py: error: cannot write {results}: No space left on device\n"
    assert results.read_text() == "the previous results" and os.listdir(results.parent) == ["results.json"]


def test_a_reader_that_stops_early_ends_the_script_quietly(workdir):
    """`vote.py ... | head -1`: the reader is gone before the table is written (deterministic here:
    the pipe is closed before the script gets to write)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # unbuffered stdout (PYTHONUNBUFFERED=1, common in containers) meets the closed pipe at once; the
    # files named on the command line are written all the same
    env["PYTHONUNBUFFERED"] = "1"
    outputs = ["--json", str(workdir / "r.json"), "--submission", str(workdir / "s.json")]
    proc = subprocess.Popen([sys.executable, str(REPO / "evaluate" / "vote.py"), *predictions_args(workdir), *outputs],
                            cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141 and err == ""
    assert json.loads((workdir / "r.json").read_text())["pass_at_k"] and (workdir / "s.json").is_file()
