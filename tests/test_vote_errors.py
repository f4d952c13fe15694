"""Inputs that cannot be voted on fail with a message naming the file, row or puzzle."""
import json

import numpy as np
import pytest
from vote_fixtures import AUGS, TASKS, WRONG, Predictions, g, make_build, truth

from arc_data.encoding import encode_grid
from evaluate.build_reader import load_test_split
from evaluate.errors import EvaluationInputError
from evaluate.predictions import resolve_predictions
from evaluate.vote import main
from evaluate.voting import vote


@pytest.fixture
def build(tmp_path):
    return make_build(tmp_path / "build", TASKS, {"task_one": AUGS[:2]}, training_tasks={"train_only": TASKS["task_one"]})


def voted(build, path):
    return vote([path], load_test_split(build))


def test_identifier_out_of_range_names_file_row_and_value(build, tmp_path):
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"))
    p.add_raw(len(p.names) + 3, p.inputs[0], p.preds[0])
    path = p.save(tmp_path / "rank_0.npz")
    with pytest.raises(EvaluationInputError, match=rf"rank_0.npz: row 1 has identifier {len(p.names) + 3}, outside"):
        voted(build, path)


def test_identifier_of_another_split_names_the_puzzle(build, tmp_path):
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"))
    p.add_raw(p.names.index("train_only"), p.inputs[0], p.preds[0])
    with pytest.raises(EvaluationInputError, match=r"row 1 has identifier \d+ \('train_only'\), which is not a "
                                                   r"puzzle of the test split.*do not belong together"):
        voted(build, p.save(tmp_path / "p.npz"))


def test_input_that_is_not_a_test_input_of_its_task_is_an_error(build, tmp_path):
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"))
    name = "task_one_t1_0234567891"
    # the right input of task_one, but not rotated as its name says
    p.add_raw(p.names.index(name), encode_grid(TASKS["task_one"]["test"][0][0]), p.preds[0])
    with pytest.raises(EvaluationInputError, match=rf"p.npz: row 1 \('{name}'\): its input, with the augmentation "
                                                   r"undone, is none of the test inputs of task 'task_one'"):
        voted(build, p.save(tmp_path / "p.npz"))


def test_missing_array_and_bad_shape_name_the_file(build, tmp_path):
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"))
    path = tmp_path / "no_q.npz"
    arrays = p.arrays()
    del arrays["q_halt_logits"]
    np.savez(path, **arrays)
    with pytest.raises(EvaluationInputError, match=r"no_q.npz: missing array\(s\) q_halt_logits"):
        voted(build, path)
    bad = p.save(tmp_path / "bad.npz", preds=np.zeros((1, 30, 30), np.uint8))
    with pytest.raises(EvaluationInputError, match=r"bad.npz: array 'preds' has shape \(1, 30, 30\)"):
        voted(build, bad)


def test_a_damaged_compressed_member_names_the_file(build, tmp_path):
    import zipfile
    p = Predictions(build, TASKS)
    for _ in range(50):
        p.add("task_one", 0, truth("task_one"))
    arrays = p.arrays()
    arrays["preds"] = np.random.RandomState(0).randint(0, 12, arrays["preds"].shape).astype(np.uint8)
    path = tmp_path / "damaged.npz"
    np.savez_compressed(path, **arrays)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        member = z.getinfo("preds.npy")
    start = member.header_offset + 30 + len(member.filename) + 600
    raw[start:start + 200] = bytes(b ^ 0x5A for b in raw[start:start + 200])
    path.write_bytes(bytes(raw))
    with pytest.raises(EvaluationInputError, match=r"damaged.npz: array 'preds' cannot be read"):
        voted(build, path)



def test_a_compressed_member_damaged_in_its_header_names_the_file(build, tmp_path):
    # the first bytes of a deflated member hold the .npy header, read when the file is opened
    import zipfile
    from evaluate.npz_reader import _member_data_offset
    path = tmp_path / "damaged.npz"
    np.savez_compressed(path, **Predictions(build, TASKS).add("task_one", 0, truth("task_one")).arrays())
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        start = _member_data_offset(f, z.getinfo("preds.npy"))
    raw[start:start + 8] = bytes(b ^ 0xA5 for b in raw[start:start + 8])
    path.write_bytes(bytes(raw))
    with pytest.raises(EvaluationInputError, match=r"damaged.npz: not a readable .npz file"):
        voted(build, path)


def unbalance_npy_header(raw: bytes) -> bytes:
    """An .npy header (alone or inside a stored .npz member) with its shape's bracket left open and
    the same length: numpy's parser for Python 2 headers then fails in the tokenizer."""
    start = raw.index(b"'shape': (")
    end = raw.index(b"}", start)
    return raw[:start] + raw[start:end].replace(b")", b" ").replace(b",", b" ") + b" " + raw[end + 1:]


def test_a_prediction_array_with_an_unreadable_header_names_the_file(build, tmp_path):
    path = Predictions(build, TASKS).add("task_one", 0, truth("task_one")).save(tmp_path / "p.npz")
    path.write_bytes(unbalance_npy_header(path.read_bytes()))
    with pytest.raises(EvaluationInputError, match=r"p.npz: not a readable .npz file"):
        voted(build, path)


@pytest.mark.parametrize("name", ["all__inputs.npy", "all__puzzle_indices.npy"])
def test_a_build_array_with_an_unreadable_header_names_the_file(build, name):
    path = build / "test" / name
    path.write_bytes(unbalance_npy_header(path.read_bytes()))
    with pytest.raises(EvaluationInputError, match=rf"{path}: not a complete .npy"):
        load_test_split(build)

def test_int64_predictions_are_accepted(build, tmp_path):
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"))
    path = p.save(tmp_path / "p.npz", preds=p.arrays()["preds"].astype(np.int64),
                  puzzle_identifiers=p.arrays()["puzzle_identifiers"].astype(np.int64))
    assert voted(build, path).correct.tolist() == [True]


def test_identifiers_json_that_is_not_utf8_is_named(build):
    path = build / "identifiers.json"
    path.write_bytes(path.read_bytes().replace(b"task_three", b"task_thr\xe9e"))    # Latin-1, say
    with pytest.raises(EvaluationInputError, match=rf"{path}: not valid JSON \('utf-8' codec can't decode"):
        load_test_split(build)


def test_incomplete_build_names_the_missing_file(build, tmp_path):
    (build / "test" / "all__labels.npy").unlink()
    with pytest.raises(EvaluationInputError, match=r"all__labels.npy not found"):
        load_test_split(build)


@pytest.mark.parametrize("name, change", [
    ("puzzle_indices", lambda a: np.append(a[:-1], a[-1] + 5)),    # past the last row
    ("puzzle_indices", lambda a: a[::-1].copy()),                    # decreasing
    ("group_indices", lambda a: np.append(a[:-1], a[-1] + 1)),       # past the last puzzle
    ("group_indices", lambda a: np.append(a, a[-1])),                # a group without puzzles at the end
    ("group_indices", lambda a: np.insert(a, 1, a[1]))])             # ... and in the middle
def test_index_arrays_that_do_not_cut_the_rows_name_the_file(build, name, change):
    path = build / "test" / f"all__{name}.npy"
    np.save(path, change(np.load(path)))
    with pytest.raises(EvaluationInputError, match=rf"{path} does not cut the split's \d+ (rows|puzzles)"):
        load_test_split(build)


@pytest.mark.parametrize("name", ["puzzle_identifiers", "puzzle_indices", "group_indices"])
@pytest.mark.parametrize("change", [lambda a: a.astype(np.float64), lambda a: a[:, None]], ids=["float", "2-D"])
def test_index_arrays_of_another_type_or_shape_name_the_file(build, name, change):
    # the builder writes 1-D int32; these gave tracebacks (a float index, int() of a row)
    path = build / "test" / f"all__{name}.npy"
    np.save(path, change(np.load(path)))
    with pytest.raises(EvaluationInputError, match=rf"{path}: expected a 1-D array of whole numbers"):
        load_test_split(build)


def test_a_task_in_two_test_groups_is_refused_by_name(build):
    # the report and the submission, keyed by task name, would keep only one of the two
    path = build / "test" / "all__puzzle_identifiers.npy"
    ids, groups = np.load(path), np.load(build / "test" / "all__group_indices.npy")
    ids[groups[1]] = ids[groups[0]]
    np.save(path, ids)
    with pytest.raises(EvaluationInputError, match=rf"{path}: task 'task_one' begins test groups 0 and 1"):
        load_test_split(build)


def test_a_test_group_that_starts_with_an_augmented_puzzle_is_refused(build):
    # the first puzzle of a test group is its task's original: its labels are the ground truth that
    # un-augmented answers are compared with, and its name the task's in the report and submission
    path = build / "test" / "all__puzzle_identifiers.npy"
    ids = np.load(path)
    names = json.loads((build / "identifiers.json").read_text())
    assert names[ids[0]] == "task_one" and names[ids[1]] == "task_one_t0_0312456789"
    ids[[0, 1]] = ids[[1, 0]]
    np.save(path, ids)
    with pytest.raises(EvaluationInputError, match=r"test group 0 of .* starts with 'task_one_t0_0312456789', an "
                                                   r"augmented puzzle; the original must come first"):
        load_test_split(build)


@pytest.mark.parametrize("value", ["0", "-2", "abc", "1.5"])
def test_unknown_k_value_is_rejected(value, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--K", "1", value])
    assert e.value.code == 2
    assert f"K must be a positive whole number, got '{value}'" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--data", "--predictions", "--json", "--submission", "--checkpoints"])
def test_an_empty_path_is_refused_not_taken_as_the_default(build, tmp_path, monkeypatch, capsys, option):
    """`--data "$BUILD"` with BUILD unset: not the build info.json records, nor the current folder."""
    folder = tmp_path / "step_3"
    Predictions(build, TASKS).add("task_one", 0, truth("task_one")).save(folder / "rank_0.npz")
    (folder / "info.json").write_text(json.dumps({"data_path": str(build), "step": 3, "world_size": 1,
                                                  "checkpoint": None}))
    monkeypatch.chdir(tmp_path)
    args = {"--predictions": str(folder), "--data": str(build), option: ""}
    with pytest.raises(SystemExit) as e:
        main([item for pair in args.items() for item in pair])
    assert e.value.code == 2
    assert f"argument {option}: empty (an unset shell variable?)" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == sorted([build, folder])      # nothing written here


def test_folder_with_fewer_rank_files_than_world_size(build, tmp_path):
    folder = tmp_path / "step_10"
    Predictions(build, TASKS).add("task_one", 0, truth("task_one")).save(folder / "rank_0.npz")
    (folder / "info.json").write_text(json.dumps({"data_path": str(build), "step": 10, "world_size": 2,
                                                  "checkpoint": None}))
    with pytest.raises(EvaluationInputError, match=r"world_size 2 but the folder holds 1 .npz files"):
        resolve_predictions(str(folder))


def test_no_predictions_under_checkpoints(tmp_path, capsys):
    assert main(["--checkpoints", str(tmp_path / "checkpoints")]) == 2
    assert "no predictions found under" in capsys.readouterr().err


def test_an_unfinished_hidden_rank_file_is_not_voted(build, tmp_path):
    folder = tmp_path / "step_3"
    Predictions(build, TASKS).add("task_one", 0, truth("task_one")).save(folder / "rank_0.npz")
    (folder / "info.json").write_text(json.dumps({"data_path": str(build), "step": 3, "world_size": 1,
                                                  "checkpoint": None}))
    # what a write killed before its rename leaves behind (hrm/evaluation.py writes .rank_<r>.tmp.npz)
    Predictions(build, TASKS).add("task_one", 0, truth("task_one"), count=5).save(folder / ".rank_1.tmp.npz")
    assert resolve_predictions(str(folder)).files == [folder / "rank_0.npz"]


def test_a_folder_without_info_json_is_refused_and_its_files_can_be_voted_by_glob(build, tmp_path, capsys):
    """info.json is written last and removed first on a rewrite (hrm/evaluation.py): a folder without
    it is an evaluation that did not finish, whose rank files may come from two evaluations (here
    rank_1 of an earlier one), which no rank count could tell."""
    folder = tmp_path / "step_3"
    Predictions(build, TASKS).add("task_one", 0, truth("task_one")).save(folder / "rank_0.npz")
    Predictions(build, TASKS).add("task_one", 0, WRONG, count=5).save(folder / "rank_1.npz")
    assert main(["--predictions", str(folder), "--data", str(build)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vote.py: error: {folder} has no info.json") and err.count("\n") == 1
    assert f"--predictions '{folder}/*.npz'" in err
    # the files themselves, as the message says, when they are wanted anyway
    assert main(["--predictions", str(folder / "*.npz"), "--data", str(build), "--K", "1"]) == 0


def test_a_glob_over_a_predictions_folder_takes_its_rank_files_and_reads_its_info(build, tmp_path):
    folder = tmp_path / "step_3"
    Predictions(build, TASKS).add("task_one", 0, truth("task_one")).save(folder / "rank_0.npz")
    (folder / "info.json").write_text(json.dumps({"data_path": str(build), "step": 3, "world_size": 1,
                                                  "checkpoint": None}))
    found = resolve_predictions(str(folder / "*"))
    assert found.files == [folder / "rank_0.npz"] and found.info["step"] == 3


def test_a_glob_that_matches_only_folders_names_them_and_the_glob_of_their_files(build, tmp_path, capsys):
    """`--predictions 'run/predictions/step_*'` (an ensemble of steps meant) matches the step folders:
    not "no such file", which reads as a wrong path."""
    for step in (3, 6):
        folder = tmp_path / "predictions" / f"step_{step}"
        Predictions(build, TASKS).add("task_one", 0, truth("task_one")).save(folder / "rank_0.npz")
        (folder / "info.json").write_text(json.dumps({"data_path": str(build), "step": step, "world_size": 1,
                                                      "checkpoint": None}))
    spec = str(tmp_path / "predictions" / "step_*")
    assert main(["--predictions", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vote.py: error: --predictions {spec} matches only folders ({tmp_path}/predictions/step_3, "
                          f"{tmp_path}/predictions/step_6)") and err.count("\n") == 1, err
    assert f"--predictions '{spec}/*.npz' --data BUILD" in err
    # what it suggests votes
    assert main(["--predictions", f"{spec}/*.npz", "--data", str(build), "--K", "1"]) == 0


def test_a_task_with_two_equal_test_inputs_is_refused_by_name(tmp_path):
    twins = {"train": TASKS["task_one"]["train"],
             "test": [TASKS["task_one"]["test"][0], (TASKS["task_one"]["test"][0][0], g([[3]]))]}
    build = make_build(tmp_path / "build", {"twins": twins, "task_three": TASKS["task_three"]})
    with pytest.raises(EvaluationInputError, match=r"task 'twins' of .*: test inputs 0 and 1 are the same grid"):
        load_test_split(build)


@pytest.mark.parametrize("content, message", [
    (b'{"data_path": "x", "step": ', "not valid JSON"),            # a write cut short
    (b"\xff\xfe\x00garbage", "not valid JSON"),                      # not even text
    (b"[1, 2]", "must hold a JSON object, got list"),
    (b'{"data_path": 5}', "data_path must be a string, got 5"),
    (b'{"world_size": "2"}', "world_size must be a positive whole number, got '2'"),
])
def test_bad_info_json_is_named_even_with_data_given(build, tmp_path, capsys, content, message):
    folder = tmp_path / "step_1"
    Predictions(build, TASKS).add("task_one", 0, truth("task_one")).save(folder / "rank_0.npz")
    (folder / "info.json").write_bytes(content)
    # refused although --data makes its data_path unneeded: its world_size guards the rank count
    assert main(["--predictions", str(folder), "--data", str(build)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vote.py: error: {folder / 'info.json'}") and message in err and err.count("\n") == 1
