"""render.py: the files are written, and the grids drawn equal the data (pixels decoded back)."""
import base64
import json
import re
import struct
import zlib

import numpy as np
import pytest
from vote_fixtures import AUGS, TASKS, WRONG, WRONG2, Predictions, make_build, truth

from evaluate.pictures import PALETTE, grid_image, task_sheet
from evaluate.png import decode_png, encode_png, read_png
from evaluate.render import main as render
from evaluate.task_view import BuildTasks
from evaluate.vote import main as vote

TRAINING = {"train": [(np.array([[3, 0]], np.uint8), np.array([[0, 3]], np.uint8))],
            "test": [(np.array([[4], [0]], np.uint8), np.array([[0], [4]], np.uint8))]}


def test_png_bytes_follow_the_format():
    rgb = np.array([[[255, 0, 0], [0, 116, 217]]], dtype=np.uint8)       # 1 x 2 pixels
    data = encode_png(rgb)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[8:16] == struct.pack(">I", 13) + b"IHDR"
    assert struct.unpack(">IIBBBBB", data[16:29]) == (2, 1, 8, 2, 0, 0, 0)
    idat = data.index(b"IDAT")
    (length,) = struct.unpack(">I", data[idat - 4:idat])
    assert zlib.decompress(data[idat + 4:idat + 4 + length]) == bytes([0, 255, 0, 0, 0, 116, 217])
    assert data.endswith(b"IEND\xaeB`\x82")
    noise = np.random.default_rng(0).integers(0, 256, (17, 23, 3), dtype=np.uint8)
    assert np.array_equal(decode_png(encode_png(noise)), noise)


def test_grid_image_cells_and_lines_by_hand():
    image = grid_image(np.array([[1, 9]], np.uint8), cell=2)     # 1 + 2 + 1 rows, 1 + 2 + 1 + 2 + 1 cols
    assert image.shape == (4, 7, 3)
    assert (image[1:3, 1:3] == [0x00, 0x74, 0xD9]).all() and (image[1:3, 4:6] == [0x87, 0x0C, 0x25]).all()
    assert (image[0] == 85).all() and (image[:, 3] == 85).all() and (image[:, 6] == 85).all()


def cells_of(image: np.ndarray, y: int, x: int, cell: int, shape) -> np.ndarray:
    """Read a grid back from its picture: the palette index of each cell's centre pixel."""
    rows, cols = shape
    centres = image[y + 1 + np.arange(rows)[:, None] * (cell + 1) + cell // 2,
                    x + 1 + np.arange(cols)[None, :] * (cell + 1) + cell // 2]       # [rows, cols, 3]
    match = (centres[:, :, None, :] == PALETTE[None, None]).all(axis=3)           # [rows, cols, 10]
    assert match.any(axis=2).all(), "a cell centre is not a palette colour"
    return match.argmax(axis=2)


@pytest.fixture
def voted(tmp_path):
    build = make_build(tmp_path / "build", TASKS, {name: AUGS[:2] for name in TASKS},
                       training_tasks={"train_only": TRAINING})
    p = Predictions(build, TASKS)
    p.add("task_one", 0, truth("task_one"), count=3).add("task_one", 0, WRONG, t=1, colour_map=AUGS[1][1])
    p.add("task_two", 0, WRONG, count=3).add("task_two", 0, truth("task_two", 0), count=2)
    p.add("task_two", 0, WRONG2, count=1).add("task_two", 1, truth("task_two", 1), count=2)
    p.add("task_three", 0, WRONG2, count=4)
    p.save(tmp_path / "p.npz")
    assert vote(["--predictions", str(tmp_path / "p.npz"), "--data", str(build),
                 "--json", str(tmp_path / "results.json")]) == 0
    return build, tmp_path / "results.json"


# margins by construction: task_one (3-1)/4 = +0.5; task_two min((2-3)/6, 1) = -1/6;
# task_three (0-4)/4 = -1; task_four has no predictions (no margin)
EXPECTED_ANSWERS = {"task_one": [[truth("task_one"), WRONG]],
                    "task_two": [[WRONG, truth("task_two", 0), WRONG2], [truth("task_two", 1)]],
                    "task_three": [[WRONG2]]}


def expected_panels(name: str, top: int = 3) -> dict:
    task = TASKS[name]
    panels = {}
    for i, (a, b) in enumerate(task["train"]):
        panels[("demo-input", i, 0)], panels[("demo-output", i, 0)] = a, b
    for i, (a, b) in enumerate(task["test"]):
        panels[("test-input", i, 0)], panels[("truth", i, 0)] = a, b
        for k, g in enumerate(EXPECTED_ANSWERS.get(name, [[]] * len(task["test"]))[i][:top]):
            panels[("answer", i, k + 1)] = g
    return panels


def test_best_and_worst_of_tied_margins_are_different_tasks():
    from evaluate.task_view import by_margin
    results = {"tasks": {name: {"margin": -1.0} for name in ("a", "b", "c", "d")} | {"e": {"margin": None}}}
    assert by_margin(results, 2, best=True) == ["a", "b"]
    assert by_margin(results, 2, best=False) == ["d", "c"]
    results["tasks"]["c"]["margin"] = 0.5
    assert by_margin(results, 1, best=True) == ["c"] and by_margin(results, 3, best=False) == ["d", "b", "a"]


def test_png_pictures_draw_exactly_the_build_and_the_votes(voted, tmp_path):
    build, results = voted
    out = tmp_path / "pictures"
    assert render(["--votes", str(results), "--best", "1", "--worst", "1", "--format", "png",
                   "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["task_one.png", "task_three.png"]   # best, worst
    for name in ("task_one", "task_three"):
        image = read_png(out / f"{name}.png")
        view = BuildTasks(build).task(name)
        from evaluate.task_view import add_votes
        add_votes(view, json.loads(results.read_text())["tasks"][name], top=3)
        _, placed = task_sheet(view)
        expected = expected_panels(name)
        assert {(p.role, p.index, p.rank) for p in placed} == set(expected)
        for p in placed:
            grid = expected[p.role, p.index, p.rank]
            assert np.array_equal(cells_of(image, p.y, p.x, p.cell, grid.shape), grid), (name, p.role)


def figures(page: str) -> dict:
    found = {}
    pattern = (r"<figure[^>]*data-task='([^']*)' data-role='([^']*)' data-pair='(\d+)' data-rank='(\d+)' "
               r"data-cell='(\d+)'><img alt='(\d+)x(\d+) grid' src='data:image/png;base64,([^']*)'>")
    for task, role, pair, rank, cell, rows, cols, data in re.findall(pattern, page):
        image = decode_png(base64.b64decode(data))
        found[task, role, int(pair), int(rank)] = cells_of(image, 0, 0, int(cell), (int(rows), int(cols)))
    return found


def test_html_page_is_self_contained_and_draws_the_data(voted, tmp_path):
    build, results = voted
    out = tmp_path / "pages"
    assert render(["--votes", str(results), "--task", "task_two", "task_four", "--top", "2", "--out", str(out)]) == 0
    page = (out / "tasks.html").read_text()
    assert "http" not in page and "<script" not in page and "<link" not in page
    drawn = figures(page)
    expected = {("task_two", *key): grid for key, grid in expected_panels("task_two", top=2).items()}
    expected.update({("task_four", *key): grid for key, grid in expected_panels("task_four").items()})
    assert set(drawn) == set(expected)
    for key, grid in expected.items():
        assert np.array_equal(drawn[key], grid), key
    assert "solved at K=2, margin -0.17" in page and "not solved, no predictions" in page


def test_any_task_of_a_build_without_votes(voted, tmp_path):
    build, _ = voted
    out = tmp_path / "plain"
    assert render(["--data", str(build), "--task", "train_only", "task_one_t1_0234567891", "--format", "both",
                   "--out", str(out)]) == 0
    page = (out / "tasks.html").read_text()
    drawn = figures(page)
    # a training task: all its pairs are demonstrations (the build put them all in the train split)
    assert np.array_equal(drawn["train_only", "demo-output", 1, 0], TRAINING["test"][0][1])
    assert not any(k[0] == "train_only" and k[1] == "test-input" for k in drawn)
    # an augmented puzzle is drawn as the build holds it: rotated and recoloured
    from arc_data.augment import augment_grid
    assert np.array_equal(drawn["task_one_t1_0234567891", "truth", 0, 0],
                          augment_grid(truth("task_one"), 1, AUGS[1][1]))
    assert (out / "train_only.png").is_file() and (out / "task_one_t1_0234567891.png").is_file()


def test_render_errors_are_one_line(voted, tmp_path, capsys):
    build, results = voted
    assert render(["--data", str(build), "--task", "no_such_task", "--out", str(tmp_path)]) == 2
    assert "no puzzle named 'no_such_task'" in capsys.readouterr().err
    assert render(["--data", str(build), "--worst", "3", "--out", str(tmp_path)]) == 2
    assert "--best/--worst need --votes" in capsys.readouterr().err


def test_a_vote_on_a_relative_build_is_drawn_from_another_folder(voted, tmp_path, monkeypatch):
    """vote.py --data build (relative) recorded meta.data as typed: render.py --votes run elsewhere
    then looked for the build there."""
    build, _ = voted
    monkeypatch.chdir(tmp_path)
    assert vote(["--predictions", "p.npz", "--data", "build", "--json", "relative.json"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert render(["--votes", str(tmp_path / "relative.json"), "--worst", "1", "--out", "out"]) == 0
    assert list((elsewhere / "out").iterdir())


def test_a_recorded_build_that_moved_is_named_with_data_as_the_way_out(voted, tmp_path, capsys):
    build, results = voted
    moved = build.parent / "moved"
    build.rename(moved)
    assert render(["--votes", str(results), "--worst", "1", "--out", str(tmp_path / "out")]) == 2
    assert f"it is the build recorded in {results} (meta.data): pass --data DIR" in capsys.readouterr().err
    assert render(["--votes", str(results), "--data", str(moved), "--worst", "1", "--out", str(tmp_path / "out")]) == 0


@pytest.mark.parametrize("text, message", [
    ("{\n", "not valid JSON (Expecting property name"),
    ("[1, 2]\n", "is not the --json output of vote.py (it holds a list, not an object with tasks and meta)"),
    ('{"tasks": {}, "meta": []}\n', "is not the --json output of vote.py (its meta is a list"),
])
def test_votes_that_are_not_vote_results_are_named(text, message, voted, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    assert render(["--votes", str(bad), "--worst", "1", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"render.py: error: {bad}") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_votes_that_cannot_be_read_are_named(tmp_path, capsys):
    assert render(["--votes", str(tmp_path), "--worst", "1"]) == 2        # a folder
    err = capsys.readouterr().err
    assert err.startswith(f"render.py: error: {tmp_path}: cannot read it (") and err.count("\n") == 1, err


def test_a_truncated_build_array_is_named(voted, tmp_path, capsys):
    build, _ = voted
    path = build / "train" / "all__labels.npy"
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[:size - 900])
    assert render(["--data", str(build), "--task", "task_one", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"render.py: error: {path} holds {size - 900} bytes, but its header "
                                       f"([{(size - 128) // 900}, 900] uint8) needs {size}: the file is cut "
                                       f"short; rebuild the data\n")


def test_an_output_folder_that_is_a_file_is_refused_without_traceback(voted, tmp_path, capsys):
    build, _ = voted
    (tmp_path / "afile").write_text("x")
    for out in ("afile", "afile/deeper"):
        assert render(["--data", str(build), "--task", "task_one", "--out", str(tmp_path / out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"render.py: error: --out {tmp_path / out}") and "not a directory" in err, err


@pytest.mark.parametrize("option", ["--out", "--data", "--votes"])
def test_an_empty_path_is_refused_not_taken_as_the_current_folder(voted, tmp_path, monkeypatch, capsys, option):
    """`--out "$DIR"` with DIR unset: no pictures in the current folder."""
    build, results = voted
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    args = {"--votes": str(results), "--data": str(build), "--out": str(tmp_path / "pictures"), option: ""}
    with pytest.raises(SystemExit) as e:
        render([item for pair in args.items() for item in pair] + ["--task", "task_one"])
    assert e.value.code == 2
    assert f"argument {option}: empty (an unset shell variable?)" in capsys.readouterr().err
    assert not any(here.iterdir()) and not (tmp_path / "pictures").exists()


def test_renders_folder_is_ignored_by_git():
    """render.py's default output folder stays out of commits."""
    import shutil
    import subprocess
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", "renders/tasks.html"], cwd=repo)
    assert ignored.returncode == 0


def test_a_task_with_some_test_inputs_unpredicted_is_not_called_without_predictions(voted, tmp_path):
    build, _ = voted
    p = Predictions(build, TASKS).add("task_two", 0, WRONG, count=2)      # test input 2 gets none
    p.save(tmp_path / "some.npz")
    assert vote(["--predictions", str(tmp_path / "some.npz"), "--data", str(build),
                 "--json", str(tmp_path / "some.json")]) == 0
    out = tmp_path / "some"
    assert render(["--votes", str(tmp_path / "some.json"), "--task", "task_two", "task_four", "--out", str(out)]) == 0
    page = (out / "tasks.html").read_text()
    assert "task_two <small>not solved, no predictions for test input 2</small>" in page
    assert "task_four <small>not solved, no predictions</small>" in page


def test_best_or_worst_with_no_task_to_pick_says_why(voted, tmp_path, capsys):
    _, results = voted
    report = json.loads(results.read_text())
    for task in report["tasks"].values():
        task["margin"] = None                       # as when no task has every test input predicted
    unpicked = tmp_path / "unpicked.json"
    unpicked.write_text(json.dumps(report))
    assert render(["--votes", str(unpicked), "--worst", "2", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (f"render.py: error: --best/--worst: no task of {unpicked} has a vote margin (it needs "
                   f"predictions for every test input of the task); name tasks with --task\n"), err


def test_task_names_with_slashes_stay_inside_out(tmp_path):
    build = make_build(tmp_path / "build", {"../escaped": TASKS["task_one"], "sub/x": TASKS["task_two"]})
    out = tmp_path / "out"
    assert render(["--data", str(build), "--task", "../escaped", "sub/x", "--format", "both", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["..%2Fescaped.png", "sub%2Fx.png", "tasks.html"]
    assert render(["--data", str(build), "--task", "../escaped", "--out", str(out)]) == 0
    assert (out / "..%2Fescaped.html").is_file() and not (tmp_path / "escaped.png").exists()


@pytest.mark.parametrize("edit, where", [
    (lambda t: t["task_one"]["pairs"][0]["top"][0].update(grid="12"), "the entry of task 'task_one' is"),
    (lambda t: t["task_one"]["pairs"][0]["top"][0].update(grid=[[1, 2], [3]]), "the entry of task 'task_one' is"),
    (lambda t: t["task_one"]["pairs"][0]["top"][0].update(grid=[[300]]), "the entry of task 'task_one' is"),
    # 265 passed as colour 9 under NumPy 1.x (the cast to uint8 wrapped it); 1.5 as 1 under any
    (lambda t: t["task_one"]["pairs"][0]["top"][0].update(grid=[[265]]), "the entry of task 'task_one' is"),
    (lambda t: t["task_one"]["pairs"][0]["top"][0].update(grid=[[1.5]]), "the entry of task 'task_one' is"),
    (lambda t: t["task_one"]["pairs"][0]["top"][0].update(grid=[[-1]]), "the entry of task 'task_one' is"),
    (lambda t: t["task_one"]["pairs"][0]["top"][0].update(grid=[[12, 1]]), "the entry of task 'task_one' is"),
    (lambda t: t["task_one"]["pairs"][0].update(top=None), "the entry of task 'task_one' is"),
    (lambda t: t["task_one"].update(pairs=[7]), "the entry of task 'task_one' is"),
    (lambda t: t["task_two"].update(margin="0.5"), "a task's margin is"),
])
def test_votes_edited_by_hand_are_named_without_traceback(edit, where, voted, tmp_path, capsys):
    _, results = voted
    data = json.loads(results.read_text())
    edit(data["tasks"])
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    assert render(["--votes", str(edited), "--worst", "4", "--task", "task_one", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"render.py: error: {edited}: {where} not as vote.py --json writes it ("), err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()
