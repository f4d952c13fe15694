"""Tests of arc_data.dataset against tiny synthetic builds written in the build layout.

Every fixture row encodes its own index in its first two input tokens, so a test can tell from a
batch exactly which rows it holds; puzzle p carries identifier (puzzles - p), so identifiers are
distinguishable from puzzle indices.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from arc_data.dataset import (IGNORE_LABEL, DatasetError, EvalBatches, TrainBatches, _expect_tokens,
                              load_identifiers, load_split)

SEQ_LEN = 4


def write_build(root: Path, groups: list[list[int]], split: str = "train", vocab_size: int = 256) -> Path:
    """Write one split of a build: ``groups`` lists, per group, the example count of each puzzle.
    The row-index tokens run past ARC's 12, hence a vocabulary of 256 unless a test says otherwise."""
    sizes = [size for group in groups for size in group]
    num_puzzles, num_examples = len(sizes), sum(sizes)
    rows = np.arange(num_examples)
    inputs = np.zeros((num_examples, SEQ_LEN), dtype=np.uint8)
    inputs[:, 0], inputs[:, 1], inputs[:, 2:] = rows // 256, rows % 256, 2 + (rows % 10)[:, None]
    labels = np.zeros((num_examples, SEQ_LEN), dtype=np.uint8)  # [PAD, EOS, colour, PAD]
    labels[:, 1], labels[:, 2] = 1, 2 + rows % 10
    arrays = {
        "inputs": inputs,
        "labels": labels,
        "puzzle_identifiers": np.arange(num_puzzles, 0, -1, dtype=np.int32),
        "puzzle_indices": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32),
        "group_indices": np.concatenate([[0], np.cumsum([len(g) for g in groups])]).astype(np.int32),
    }
    directory = root / split
    directory.mkdir(parents=True, exist_ok=True)
    for field, values in arrays.items():
        np.save(directory / f"all__{field}.npy", values)
    metadata = dict(seq_len=SEQ_LEN, vocab_size=vocab_size, pad_id=0, ignore_label_id=0,
                    blank_identifier_id=0, num_puzzle_identifiers=num_puzzles + 1,
                    total_groups=len(groups), mean_puzzle_examples=num_examples / max(num_puzzles, 1),
                    sets=["all"])
    (directory / "dataset.json").write_text(json.dumps(metadata))
    names = ["<blank>"] + [f"puzzle{num_puzzles - i}" for i in range(1, num_puzzles + 1)]  # by index
    (root / "identifiers.json").write_text(json.dumps(names))
    return root


def row_ids(batch) -> np.ndarray:
    inputs = batch["inputs"].numpy()
    return inputs[:, 0].astype(np.int64) * 256 + inputs[:, 1]


def random_groups(seed: int, num_groups: int, max_puzzles: int = 4, max_examples: int = 5):
    rng = np.random.default_rng(seed)
    return [list(rng.integers(1, max_examples + 1, size=rng.integers(1, max_puzzles + 1)))
            for _ in range(num_groups)]


def run_iterations(reader: TrainBatches, iterations: int) -> list[list[dict]]:
    """Batches of each iteration, the way the trainer loops."""
    return [list(reader.iteration_batches()) for _ in range(iterations)]


def assert_same_batches(first, second):
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key


# ---------------------------------------------------------------------------------------------
# Loading


def test_load_split_memory_maps_and_reads_metadata(tmp_path):
    data = load_split(write_build(tmp_path, [[2, 3], [1]]), "train")
    assert isinstance(data.inputs, np.memmap) and isinstance(data.labels, np.memmap)
    assert (data.num_groups, data.num_puzzles, data.num_examples) == (2, 3, 6)
    assert data.metadata.total_groups == 2 and data.metadata.num_puzzle_identifiers == 4
    assert data.puzzles_of_rows(np.arange(6)).tolist() == [0, 0, 1, 1, 1, 2]
    assert load_identifiers(tmp_path) == ["<blank>", "puzzle2", "puzzle1", "puzzle0"]


def corrupt(directory: Path, field: str, values) -> None:
    np.save(directory / f"all__{field}.npy", np.asarray(values))


def edit_metadata(directory: Path, **changes) -> None:
    path = directory / "dataset.json"
    metadata = json.loads(path.read_text())
    metadata.update(changes)
    path.write_text(json.dumps(metadata))


# Each case damages a valid build (groups [[2, 3], [1]]: 3 puzzles, 6 examples) in one way; the
# error must name the file at fault.
BAD_BUILDS = {
    "missing dataset.json": ("dataset.json", lambda d: (d / "dataset.json").unlink()),
    "invalid json": ("dataset.json", lambda d: (d / "dataset.json").write_text("{seq_len: 4")),
    "metadata field missing": ("dataset.json", lambda d: (d / "dataset.json").write_text(
        json.dumps({k: v for k, v in json.loads((d / "dataset.json").read_text()).items()
                    if k != "seq_len"}))),
    "two sets": ("dataset.json", lambda d: edit_metadata(d, sets=["all", "more"])),
    "missing labels": ("all__labels.npy", lambda d: (d / "all__labels.npy").unlink()),
    "garbage npy": ("all__inputs.npy", lambda d: (d / "all__inputs.npy").write_bytes(b"not npy")),
    "inputs int32": ("all__inputs.npy", lambda d: corrupt(d, "inputs", np.zeros((6, 4), np.int32))),
    "inputs 1-d": ("all__inputs.npy", lambda d: corrupt(d, "inputs", np.zeros(24, np.uint8))),
    "seq_len differs": ("all__inputs.npy", lambda d: edit_metadata(d, seq_len=5)),
    "labels rows differ": ("all__labels.npy", lambda d: corrupt(d, "labels", np.zeros((5, 4), np.uint8))),
    "puzzle indices int64": ("all__puzzle_indices.npy",
                             lambda d: corrupt(d, "puzzle_indices", np.array([0, 2, 5, 6]))),
    "puzzle indices not monotone": ("all__puzzle_indices.npy",
                                    lambda d: corrupt(d, "puzzle_indices", np.int32([0, 4, 3, 6]))),
    "puzzle indices start": ("all__puzzle_indices.npy",
                             lambda d: corrupt(d, "puzzle_indices", np.int32([1, 2, 5, 6]))),
    "puzzle indices end": ("all__puzzle_indices.npy",
                           lambda d: corrupt(d, "puzzle_indices", np.int32([0, 2, 5, 5]))),
    "puzzle indices count": ("all__puzzle_indices.npy",
                             lambda d: corrupt(d, "puzzle_indices", np.int32([0, 2, 6]))),
    "group indices end": ("all__group_indices.npy",
                          lambda d: corrupt(d, "group_indices", np.int32([0, 2, 2]))),
    "group indices empty": ("all__group_indices.npy",
                            lambda d: corrupt(d, "group_indices", np.int32([]))),
    "empty group": ("all__group_indices.npy",
                    lambda d: corrupt(d, "group_indices", np.int32([0, 0, 3]))),
    "total_groups differs": ("all__group_indices.npy", lambda d: edit_metadata(d, total_groups=3)),
    "identifier too large": ("all__puzzle_identifiers.npy",
                             lambda d: corrupt(d, "puzzle_identifiers", np.int32([3, 2, 4]))),
    "blank identifier": ("all__puzzle_identifiers.npy",
                         lambda d: corrupt(d, "puzzle_identifiers", np.int32([3, 0, 1]))),
    # a token past the vocabulary failed only in the model's embedding or loss, naming no file
    "input token past vocab": ("all__inputs.npy", lambda d: (edit_metadata(d, vocab_size=12),
                                                             corrupt(d, "inputs", np.full((6, 4), 12, np.uint8)))),
    "label token past vocab": ("all__labels.npy", lambda d: (edit_metadata(d, vocab_size=12),
                                                             corrupt(d, "labels", np.full((6, 4), 99, np.uint8)))),
    "pad_id past vocab": ("dataset.json", lambda d: edit_metadata(d, pad_id=256)),
    # padding rows would carry 4, and evaluation trims rows by identifier 0: real rows lost or kept wrong
    "blank identifier not 0": ("dataset.json", lambda d: edit_metadata(d, blank_identifier_id=4)),
}


@pytest.mark.parametrize("case", BAD_BUILDS)
def test_bad_build_is_refused_naming_the_file(tmp_path, case):
    file_name, damage = BAD_BUILDS[case]
    write_build(tmp_path, [[2, 3], [1]])
    damage(tmp_path / "train")
    with pytest.raises(DatasetError, match=file_name.replace(".", r"\.")):
        load_split(tmp_path, "train")


def test_a_token_past_the_vocabulary_is_named_by_file_row_and_position(tmp_path):
    write_build(tmp_path, [[2, 3], [1]], vocab_size=12)
    inputs = np.load(tmp_path / "train" / "all__inputs.npy")
    inputs[4, 3] = 99                       # a hand-edited or damaged row
    np.save(tmp_path / "train" / "all__inputs.npy", inputs)
    path = tmp_path / "train" / "all__inputs.npy"
    with pytest.raises(DatasetError, match=rf"^{path}: row 4 holds token 99 at position 3, outside "
                                           rf"\[0, vocab_size=12\) of dataset.json$"):
        load_split(tmp_path, "train")
    # the same row found when the file is scanned in chunks (the row counted from the file's start)
    with pytest.raises(DatasetError, match=r": row 4 holds token 99 at position 3"):
        _expect_tokens(path, inputs, 12, allowed=None, chunk_rows=3)


def test_labels_may_hold_an_ignore_id_past_the_vocabulary(tmp_path):
    # the reader maps ignore_label_id to -100 before the loss, wherever it lies; any other value not
    write_build(tmp_path, [[2, 3], [1]], vocab_size=12)
    labels = np.load(tmp_path / "train" / "all__labels.npy")
    labels[:, 0] = 200
    np.save(tmp_path / "train" / "all__labels.npy", labels)
    edit_metadata(tmp_path / "train", ignore_label_id=200)
    batch = next(TrainBatches(load_split(tmp_path, "train"), global_batch_size=2, seed=0).iteration_batches())
    assert (batch["labels"][:, 0] == IGNORE_LABEL).all()
    labels[5, 2] = 201
    np.save(tmp_path / "train" / "all__labels.npy", labels)
    with pytest.raises(DatasetError, match=r"all__labels\.npy: row 5 holds token 201 at position 2, outside "
                                           r"\[0, vocab_size=12\) \(or the ignore label 200\)"):
        load_split(tmp_path, "train")


@pytest.mark.parametrize("content, message", [
    (b'{"seq_len": ', "not valid JSON (EOF while parsing"),          # a write cut short
    (b"\xff\xfe{}", "not valid JSON"),                                 # not UTF-8 text: was a bare UnicodeDecodeError
    (b"[1]", "expected a JSON object"),
    (None, "seq_len: Input should be a valid integer, unable to parse string as an integer (got 'x'); "
           "pad_id: Field required"),
])
def test_bad_dataset_json_is_one_line_naming_file_and_fields(tmp_path, content, message):
    # pretrain.py and predict.py print it as it is: pydantic's own text is lines per field, with URLs
    write_build(tmp_path, [[1]])
    path = tmp_path / "train" / "dataset.json"
    if content is None:
        metadata = json.loads(path.read_text())
        del metadata["pad_id"]
        path.write_text(json.dumps({**metadata, "seq_len": "x"}))
    else:
        path.write_bytes(content)
    with pytest.raises(DatasetError) as error:
        load_split(tmp_path, "train")
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_split_and_identifiers_are_named(tmp_path):
    with pytest.raises(DatasetError, match="test"):
        load_split(write_build(tmp_path, [[1]]), "test")
    (tmp_path / "identifiers.json").unlink()
    with pytest.raises(DatasetError, match="identifiers.json"):
        load_identifiers(tmp_path)


def test_an_unreadable_dataset_json_is_named(tmp_path, monkeypatch):
    """A dataset.json without read permission (a build copied by another user): a DatasetError naming
    it, which the trainer and predict.py report as a refusal, not a bare PermissionError traceback.
    (Tests may run as root, whom permissions do not stop: the refusal is simulated.)"""
    path = write_build(tmp_path, [[1]]) / "train" / "dataset.json"
    read_bytes = Path.read_bytes

    def refuse(self):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return read_bytes(self)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    with pytest.raises(DatasetError) as error:
        load_split(tmp_path, "train")
    assert str(error.value) == f"{path}: cannot read it (Permission denied)"


# ---------------------------------------------------------------------------------------------
# Batch content


def test_batch_dtypes_and_labels_pad_to_ignore(tmp_path):
    data = load_split(write_build(tmp_path, [[2], [2]]), "train")
    batch = next(TrainBatches(data, global_batch_size=4, seed=0).iteration_batches())
    assert batch["inputs"].dtype == torch.int32 and batch["inputs"].shape == (4, SEQ_LEN)
    assert batch["labels"].dtype == torch.int64 and batch["labels"].shape == (4, SEQ_LEN)
    assert batch["puzzle_identifiers"].dtype == torch.int32 and batch["puzzle_identifiers"].shape == (4,)
    for row, inputs, labels, identifier in zip(row_ids(batch), batch["inputs"], batch["labels"],
                                               batch["puzzle_identifiers"]):
        assert inputs.tolist() == [0, row, 2 + row, 2 + row]
        assert labels.tolist() == [IGNORE_LABEL, 1, 2 + row, IGNORE_LABEL]
        assert identifier == 2 - row // 2  # puzzle p = row // 2 has identifier 2 - p


# ---------------------------------------------------------------------------------------------
# Training packing


def slots_of(rows: np.ndarray) -> list[np.ndarray]:
    """Split a batch's rows into runs of one puzzle (fixture: puzzle p of [[3]]*n owns 3p..3p+2)."""
    puzzles = rows // 3
    cuts = np.flatnonzero(np.diff(puzzles)) + 1
    return np.split(rows, cuts)


def test_packing_truncates_and_drops_the_last_batch_by_hand(tmp_path):
    # Three groups of one 3-example puzzle, batches of 4: a batch is one whole slot plus one
    # example of the next slot, whose other two examples are dropped.
    data = load_split(write_build(tmp_path, [[3], [3], [3]]), "train")

    # One epoch per iteration: 9 examples give one batch (3 + 1); the third slot alone (3) does
    # not fill a batch and is dropped.
    reader = TrainBatches(data, global_batch_size=4, seed=5)
    batches = list(reader.iteration_batches())
    assert len(batches) == 1
    whole, partial = slots_of(row_ids(batches[0]))
    assert sorted(whole // 3) == [whole[0] // 3] * 3 and sorted(whole % 3) == [0, 1, 2]
    assert len(partial) == 1 and partial[0] // 3 != whole[0] // 3
    assert (reader.iteration, reader.epoch, reader.batch_in_iteration) == (1, 1, 0)

    # Two epochs per iteration: slots e0s0..e0s2, e1s0..e1s2 give three batches
    # [e0s0 + e0s1 (1)], [e0s2 + e1s0 (1)], [e1s1 + e1s2 (1)]; the second spans the epochs.
    reader = TrainBatches(data, global_batch_size=4, seed=5, epochs_per_iteration=2)
    positions = []
    batches = []
    for batch in reader.iteration_batches():
        batches.append(batch)
        positions.append((reader.epoch, reader.state_dict()["slot"], reader.batch_in_iteration))
    assert positions == [(0, 2, 1), (1, 1, 2), (2, 0, 0)]
    # Rows 0-2 of each batch: one whole slot; row 3: the first example of the next slot. (The
    # slots either side of the epoch boundary may hold the same group, so split by position.)
    slots = [(row_ids(batch)[:3], row_ids(batch)[3]) for batch in batches]
    for whole, _ in slots:
        assert sorted(whole // 3) == [whole[0] // 3] * 3 and sorted(whole % 3) == [0, 1, 2]
    epoch0 = [slots[0][0][0] // 3, slots[0][1] // 3, slots[1][0][0] // 3]
    epoch1 = [slots[1][1] // 3, slots[2][0][0] // 3, slots[2][1] // 3]
    assert sorted(epoch0) == sorted(epoch1) == [0, 1, 2]  # each epoch visits every group once
    assert reader.iteration == 1


def test_stopping_after_the_last_batch_before_a_dropped_tail_finishes_the_iteration(tmp_path):
    # As above: one batch, then 3 examples dropped. A consumer that stops right after that batch
    # (the trainer at max_steps) must see the iteration finished, or a resume evaluates it again.
    data = load_split(write_build(tmp_path, [[3], [3], [3]]), "train")
    reader = TrainBatches(data, global_batch_size=4, seed=5, epochs_per_iteration=1)
    first = next(reader.iteration_batches())
    assert (reader.iteration, reader.epoch, reader.batch_in_iteration) == (1, 1, 0)
    resumed = TrainBatches(data, global_batch_size=4, seed=5)
    resumed.load_state_dict(reader.state_dict())
    straight = TrainBatches(data, global_batch_size=4, seed=5)
    assert_same_batches([first] + list(resumed.iteration_batches()),
                        [batch for batches in run_iterations(straight, 2) for batch in batches])
    # a position inside the dropped tail (saved by an older reader) yields nothing and moves on
    old = TrainBatches(data, global_batch_size=4, seed=5)
    old.load_state_dict({**reader.state_dict(), "epoch": 0, "slot": 2, "batch_in_iteration": 1})
    assert list(old.iteration_batches()) == [] and old.iteration == 1


def test_exactly_filled_iteration_ends_at_the_next_iteration(tmp_path):
    data = load_split(write_build(tmp_path, [[2], [2]]), "train")
    reader = TrainBatches(data, global_batch_size=4, seed=1)
    assert len(list(reader.iteration_batches())) == 1
    assert reader.state_dict()["epoch"] == 1 and reader.state_dict()["slot"] == 0
    assert len(list(reader.iteration_batches())) == 1 and reader.iteration == 2


def test_each_group_fills_at_most_one_slot_per_epoch(tmp_path):
    groups = random_groups(seed=3, num_groups=14)
    data = load_split(write_build(tmp_path, groups), "train")
    group_of_puzzle = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    puzzle_sizes = np.diff(data.puzzle_indices)
    reader = TrainBatches(data, global_batch_size=6, seed=11)  # one epoch per iteration
    for epoch_batches in run_iterations(reader, 25):
        assert epoch_batches, "every epoch of this fixture fills at least one batch"
        seen_groups = []
        for batch in epoch_batches:
            rows = row_ids(batch)
            puzzles = data.puzzles_of_rows(rows)
            assert (batch["puzzle_identifiers"].numpy() == data.num_puzzles - puzzles).all()
            runs = np.split(np.arange(6), np.flatnonzero(np.diff(puzzles)) + 1)
            for index, run in enumerate(runs):
                puzzle = puzzles[run[0]]
                assert len(set(rows[run])) == len(run)           # no example twice
                if index < len(runs) - 1:                          # only the last run is cut
                    assert len(run) == puzzle_sizes[puzzle]
                seen_groups.append(group_of_puzzle[puzzle])
        assert len(seen_groups) == len(set(seen_groups))


def test_every_puzzle_of_a_group_gets_drawn(tmp_path):
    data = load_split(write_build(tmp_path, [[1, 1, 1, 1]]), "train")
    reader = TrainBatches(data, global_batch_size=1, seed=2)
    drawn = [int(row_ids(batches[0])[0]) for batches in run_iterations(reader, 200)]
    counts = np.bincount(drawn, minlength=4)
    assert counts.sum() == 200 and (counts > 25).all()  # uniform: 50 each


def test_same_seed_same_batches_other_seed_or_epoch_other_batches(tmp_path):
    data = load_split(write_build(tmp_path, random_groups(seed=4, num_groups=10)), "train")
    make = lambda seed: TrainBatches(data, global_batch_size=4, seed=seed, epochs_per_iteration=3)
    first, again, other = (run_iterations(make(seed), 2) for seed in (7, 7, 8))
    assert_same_batches(sum(first, []), sum(again, []))
    rows = lambda iterations: [row_ids(b).tolist() for it in iterations for b in it]
    assert rows(first) != rows(other)
    assert rows(first[:1]) != rows(first[1:2])[:len(first[0])]


def test_sampling_stream_is_pinned(tmp_path):
    # The draws define every saved position; changing them silently breaks resuming old runs.
    data = load_split(write_build(tmp_path, [[2, 3], [1, 1], [4], [2, 2, 2]]), "train")
    batch = next(TrainBatches(data, global_batch_size=6, seed=0).iteration_batches())
    # Slots: group 3 -> puzzle 7 (rows 15, 16), then group 2 -> puzzle 4 (rows 7..10), shuffled.
    assert row_ids(batch).tolist() == [15, 16, 8, 10, 7, 9]


def hrm_style_batches(data, global_batch_size: int, seed: int, epochs_per_iteration: int, iteration: int):
    """An independent re-statement of the packing, in plain loops: the iteration's slots (each
    epoch's draws as documented in _plan_epoch) form one stream, batches are filled slot by slot, a
    slot that does not fit is cut, the incomplete last batch dropped (HRM's puzzle_dataset.py)."""
    gi, pi = data.group_indices.tolist(), data.puzzle_indices.tolist()
    slots = []
    for epoch in range(iteration * epochs_per_iteration, (iteration + 1) * epochs_per_iteration):
        bits = np.random.PCG64(np.random.SeedSequence([seed, epoch]))
        keys = bits.random_raw(len(gi) - 1).tolist()
        order = sorted(range(len(gi) - 1), key=lambda g: (keys[g], g))
        draws = (bits.random_raw(len(gi) - 1) >> np.uint64(32)).tolist()
        puzzles = [gi[g] + (draw * (gi[g + 1] - gi[g]) >> 32) for g, draw in zip(order, draws)]
        row_keys = bits.random_raw(sum(pi[p + 1] - pi[p] for p in puzzles)).tolist()
        for p in puzzles:
            rows = list(range(pi[p], pi[p + 1]))
            mine, row_keys = row_keys[:len(rows)], row_keys[len(rows):]
            slots.append(sorted(rows, key=lambda r: (mine[r - pi[p]], r)))
    batches, current = [], []
    for rows in slots:
        current += rows[:global_batch_size - len(current)]
        if len(current) == global_batch_size:
            batches.append(current)
            current = []
    return batches


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batches_match_an_independent_statement_of_the_packing(tmp_path, seed):
    # puzzles without examples included (a build allows them): their slots add nothing
    rng = np.random.default_rng(seed)
    groups = [[int(n) for n in rng.integers(0, 5, size=rng.integers(1, 4))] for _ in range(6)]
    data = load_split(write_build(tmp_path, groups), "train")
    settings = dict(global_batch_size=4, seed=seed, epochs_per_iteration=2)
    ranks = [TrainBatches(data, rank=r, world_size=2, **settings) for r in range(2)]
    for iteration in range(3):
        halves = [list(reader.iteration_batches()) for reader in ranks]
        drawn = [row_ids(a).tolist() + row_ids(b).tolist() for a, b in zip(*halves)]
        assert drawn == hrm_style_batches(data, 4, seed, 2, iteration)


# ---------------------------------------------------------------------------------------------
# Sharding


@pytest.mark.parametrize("world_size", [2, 3])
def test_rank_slices_are_disjoint_and_make_up_the_global_batch(tmp_path, world_size):
    data = load_split(write_build(tmp_path, random_groups(seed=5, num_groups=12)), "train")
    settings = dict(global_batch_size=6, seed=3, epochs_per_iteration=2)
    single = sum(run_iterations(TrainBatches(data, **settings), 3), [])
    per_rank = [sum(run_iterations(TrainBatches(data, rank=rank, world_size=world_size, **settings), 3), [])
                for rank in range(world_size)]
    assert all(len(batches) == len(single) for batches in per_rank) and single
    for step, whole in enumerate(single):
        slices = [batches[step] for batches in per_rank]
        assert all(len(s["inputs"]) == 6 // world_size for s in slices)
        for key in whole:
            assert torch.equal(torch.cat([s[key] for s in slices]), whole[key])


def test_ranks_never_share_rows_within_an_epoch_batch(tmp_path):
    data = load_split(write_build(tmp_path, random_groups(seed=6, num_groups=12)), "train")
    per_rank = [sum(run_iterations(TrainBatches(data, global_batch_size=6, seed=9, rank=rank,
                                                world_size=2), 4), []) for rank in range(2)]
    for left, right in zip(*per_rank):
        assert not set(row_ids(left).tolist()) & set(row_ids(right).tolist())


def test_bad_sharding_is_refused(tmp_path):
    data = load_split(write_build(tmp_path, [[1]]), "train")
    with pytest.raises(ValueError, match="multiple"):
        TrainBatches(data, global_batch_size=5, seed=0, world_size=2)
    with pytest.raises(ValueError, match="rank"):
        EvalBatches(data, global_batch_size=4, rank=2, world_size=2)


# ---------------------------------------------------------------------------------------------
# Resuming


@pytest.mark.parametrize("resume_world_size", [1, 2])
def test_resume_from_any_position_yields_the_uninterrupted_batches(tmp_path, resume_world_size):
    data = load_split(write_build(tmp_path, random_groups(seed=7, num_groups=9)), "train")
    settings = dict(global_batch_size=4, seed=21, epochs_per_iteration=2)
    iterations = 3

    def train(reader, stop_after=None):
        """The trainer's loop; returns the batches seen and, when stopped early, the state."""
        seen = []
        while reader.iteration < iterations:
            for batch in reader.iteration_batches():
                seen.append(batch)
                if len(seen) == stop_after:
                    return seen, json.loads(json.dumps(reader.state_dict()))
        return seen, None

    uninterrupted, _ = train(TrainBatches(data, **settings))
    assert len(uninterrupted) > 6
    for cut in range(1, len(uninterrupted) + 1):
        head, state = train(TrainBatches(data, **settings), stop_after=cut)
        assert_same_batches(head, uninterrupted[:cut])
        tails = []
        for rank in range(resume_world_size):
            resumed = TrainBatches(data, rank=rank, world_size=resume_world_size, **settings)
            resumed.load_state_dict(state)
            tails.append(train(resumed)[0])
        merged = [{key: torch.cat([tail[i][key] for tail in tails]) for key in tails[0][i]}
                  for i in range(len(tails[0]))]
        assert_same_batches(merged, uninterrupted[cut:])


def test_state_for_other_settings_is_refused(tmp_path):
    data = load_split(write_build(tmp_path, [[2], [3], [1]]), "train")
    state = TrainBatches(data, global_batch_size=2, seed=1).state_dict()
    for other in [dict(global_batch_size=2, seed=2), dict(global_batch_size=4, seed=1),
                  dict(global_batch_size=2, seed=1, epochs_per_iteration=3)]:
        with pytest.raises(ValueError, match="other data or settings"):
            TrainBatches(data, **other).load_state_dict(state)
    with pytest.raises(ValueError, match="lacks"):
        TrainBatches(data, global_batch_size=2, seed=1).load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="out of range"):
        TrainBatches(data, global_batch_size=2, seed=1).load_state_dict({**state, "slot": 3})


# ---------------------------------------------------------------------------------------------
# Test split


def test_eval_batches_by_hand(tmp_path):
    # Puzzles of 2 and 3 examples (identifiers 2 and 1), global batches of 4 over two ranks.
    data = load_split(write_build(tmp_path, [[2, 3]], split="test"), "test")
    rank0, rank1 = (list(EvalBatches(data, global_batch_size=4, rank=r, world_size=2)) for r in (0, 1))
    assert len(rank0) == len(rank1) == len(EvalBatches(data, global_batch_size=4)) == 2
    assert row_ids(rank0[0]).tolist() == [0, 1] and rank0[0]["puzzle_identifiers"].tolist() == [2, 2]
    assert row_ids(rank1[0]).tolist() == [2, 3] and rank1[0]["puzzle_identifiers"].tolist() == [1, 1]
    assert rank0[1]["puzzle_identifiers"].tolist() == [1, 0] and row_ids(rank0[1])[0] == 4
    assert rank1[1]["puzzle_identifiers"].tolist() == [0, 0]
    pad_rows = [rank0[1], rank1[1], rank1[1]], [1, 0, 1]
    for batch, index in zip(*pad_rows):
        assert batch["inputs"][index].tolist() == [0] * SEQ_LEN
        assert batch["labels"][index].tolist() == [IGNORE_LABEL] * SEQ_LEN
    assert rank0[1]["labels"][0].tolist() == [IGNORE_LABEL, 1, 6, IGNORE_LABEL]


def test_an_eval_batch_larger_than_the_split_is_cut_to_it(tmp_path):
    """5 test rows: a batch of 10**6 would be padding alone past them (and fill the memory); it is
    cut to the split, rounded up to the world size, and still covers every row once."""
    data = load_split(write_build(tmp_path, [[2, 3]], split="test"), "test")
    assert EvalBatches(data, global_batch_size=10**6).local_batch_size == 5
    ranks = [EvalBatches(data, global_batch_size=10**6, rank=r, world_size=2) for r in (0, 1)]
    assert [b.local_batch_size for b in ranks] == [3, 3] and [len(b) for b in ranks] == [1, 1]
    rows = [row_ids(batch)[batch["puzzle_identifiers"].numpy() != 0].tolist() for b in ranks for batch in b]
    assert rows == [[0, 1, 2], [3, 4]]
    assert EvalBatches(data, global_batch_size=4).local_batch_size == 4     # smaller: as asked


@pytest.mark.parametrize("global_batch_size", [4, 8])
def test_a_test_split_smaller_than_the_world_is_covered_once(tmp_path, global_batch_size):
    """2 test rows over 4 ranks: one batch of one row each, the rows on ranks 0 and 1, padding alone on
    ranks 2 and 3 (which still yield it: every rank must reach the evaluation's all-reduce)."""
    data = load_split(write_build(tmp_path, [[2]], split="test"), "test")
    ranks = [list(EvalBatches(data, global_batch_size=global_batch_size, rank=r, world_size=4)) for r in range(4)]
    assert [len(batches) for batches in ranks] == [1, 1, 1, 1]
    assert [batches[0]["puzzle_identifiers"].tolist() for batches in ranks] == [[1], [1], [0], [0]]
    assert [row_ids(batches[0])[0] for batches in ranks[:2]] == [0, 1]


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("global_batch_size", [6, 12, 24])
def test_eval_covers_every_example_exactly_once(tmp_path, world_size, global_batch_size):
    data = load_split(write_build(tmp_path, random_groups(seed=8, num_groups=5), split="test"), "test")
    covered = []
    lengths = set()
    for rank in range(world_size):
        batches = list(EvalBatches(data, global_batch_size=global_batch_size, rank=rank,
                                   world_size=world_size))
        lengths.add(len(batches))
        for batch in batches:
            whole_split = -(-data.num_examples // world_size) * world_size     # a larger batch is cut to it
            assert batch["inputs"].shape[0] == min(global_batch_size, whole_split) // world_size
            real = batch["puzzle_identifiers"].numpy() != 0
            rows = row_ids(batch)[real]
            covered += rows.tolist()
            assert (batch["puzzle_identifiers"].numpy()[real]
                    == data.num_puzzles - data.puzzles_of_rows(rows)).all()
            assert (batch["labels"][~torch.from_numpy(real)] == IGNORE_LABEL).all()
    assert len(lengths) == 1
    assert sorted(covered) == list(range(data.num_examples))
