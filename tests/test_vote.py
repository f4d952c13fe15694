"""The vote protocol on hand-made predictions whose pass@K is known by construction."""
import json
from pathlib import Path

import numpy as np
import pytest
from vote_fixtures import AUGS, TASKS, TWO, WRONG, WRONG2, Predictions, make_build, truth

from arc_data.augment import augment_grid, augmentation_name
from arc_data.encoding import encode_grid
from evaluate.build_reader import load_test_split
from evaluate.scoring import pair_stats, pass_at_k
from evaluate.voting import vote

@pytest.fixture
def build(tmp_path):
    return make_build(tmp_path / "build", TASKS, {name: AUGS for name in TASKS},
                      training_tasks={"train_only": TASKS["task_one"]})


def score(build, *files, ks=(1, 2, 3, 10)):
    split = load_test_split(build)
    votes = vote(list(files), split)
    stats = pair_stats(votes)
    return votes, stats, pass_at_k(stats, split.task_pair_start, ks)


def test_ties_in_votes_are_broken_by_confidence(build, tmp_path):
    # task_one: right and wrong answer 2 votes each; the wrong one is more confident -> rank 2
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"), q=0.0, count=2)
    p.add("task_one", 0, WRONG, q=2.0, count=2)
    # task_three: the same tie, but the right answer is the more confident -> rank 1
    p.add("task_three", 0, truth("task_three"), q=1.0, count=2).add("task_three", 0, WRONG, q=-1.0, count=2)
    _, stats, res = score(build, p.save(tmp_path / "p.npz"))
    assert stats.correct_rank[[0, 3]].tolist() == [1, 0]            # pairs: one, two[0], two[1], three
    assert res[1]["tasks_solved"] == 1 and res[2]["tasks_solved"] == 2
    assert res[1]["task"] == 0.25 and res[2]["task"] == 0.5


def test_more_votes_beat_higher_confidence(build, tmp_path):
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"), q=-3.0, count=3)
    p.add("task_one", 0, WRONG, q=5.0, count=2)
    p.add("task_three", 0, truth("task_three"), q=5.0, count=2).add("task_three", 0, WRONG, q=-3.0, count=3)
    _, stats, res = score(build, p.save(tmp_path / "p.npz"))
    assert stats.correct_rank[[0, 3]].tolist() == [0, 1]
    assert stats.votes[[0, 3]].tolist() == [5, 5] and stats.candidates[[0, 3]].tolist() == [2, 2]
    assert res[1]["tasks_solved"] == 1 and res[2]["tasks_solved"] == 2


def test_task_with_one_wrong_test_input_scores_zero_but_half_pair_credit(build, tmp_path):
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"), count=2)
    p.add("task_two", 0, truth("task_two", 0), count=3)
    p.add("task_two", 1, WRONG, count=3).add("task_two", 1, WRONG2)    # right answer never predicted
    _, stats, res = score(build, p.save(tmp_path / "p.npz"))
    assert stats.correct_rank[:3].tolist() == [0, 0, -1]
    for k in (1, 2, 3, 10):
        assert res[k]["tasks_solved"] == 1 and res[k]["task"] == 1 / 4
        assert res[k]["pairs_solved"] == 2
        # ARC Prize credit per task: one 1, two 1/2, three and four 0 -> mean 1.5 / 4
        assert res[k]["pair"] == pytest.approx(1.5 / 4)


def test_pass_at_k_ladder_and_unpredicted_task(build, tmp_path):
    p = Predictions(build, TASKS)
    p.add("task_one", 0, truth("task_one"), count=4).add("task_one", 0, WRONG, count=1)   # rank 1
    p.add("task_two", 0, truth("task_two", 0), count=2).add("task_two", 0, WRONG, count=3)  # rank 2
    p.add("task_two", 1, truth("task_two", 1), count=5)                                     # rank 1
    p.add("task_three", 0, truth("task_three"), count=1).add("task_three", 0, WRONG, count=3)
    p.add("task_three", 0, WRONG2, count=2)                                                  # rank 3
    _, stats, res = score(build, p.save(tmp_path / "p.npz"))          # task_four: no predictions
    assert stats.correct_rank.tolist() == [0, 1, 0, 2, -1] and stats.votes[4] == 0
    assert [res[k]["task"] for k in (1, 2, 3, 10)] == [0.25, 0.5, 0.75, 0.75]
    assert [res[k]["pair"] for k in (1, 2, 3, 10)] == pytest.approx([1.5 / 4, 2 / 4, 3 / 4, 3 / 4])


def test_every_dihedral_transform_and_colour_map_is_undone(build, tmp_path):
    p = Predictions(build, TASKS)
    for t, m in AUGS:
        p.add("task_one", 0, truth("task_one"), t=t, colour_map=m)     # right, in each puzzle's frame
        p.add("task_two", 1, truth("task_two", 1), t=t, colour_map=m)
    # the right answer left in the original frame on rotated/recoloured puzzles is a wrong answer
    p.add("task_two", 0, truth("task_two", 0), count=3)
    for t, m in AUGS[1:4]:
        name = augmentation_name("task_two", t, m)
        p.add_raw(p.names.index(name), encode_grid(augment_grid(TWO["test"][0][0], t, m)),
                  encode_grid(truth("task_two", 0)))
    votes, stats, _ = score(build, p.save(tmp_path / "p.npz"))
    c = votes.candidates
    assert stats.votes[[0, 2]].tolist() == [8, 8] and stats.candidates[[0, 2]].tolist() == [1, 1]
    assert stats.correct_rank[[0, 2]].tolist() == [0, 0]
    # pair two[0]: 3 right votes from the original puzzle, 3 wrong ones that were not undone by the
    # caller and now decode to three different grids
    assert stats.votes[1] == 6 and stats.correct_votes[1] == 3 and stats.candidates[1] == 4
    first = c.pair_start[0]
    assert np.array_equal(votes.grid(first), truth("task_one"))


def test_padding_rows_are_ignored(build, tmp_path):
    rng = np.random.default_rng(0)
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"), q=1.0, count=1)
    for _ in range(5):      # garbage that would fail the input check if it were read
        p.add_raw(0, rng.integers(0, 12, 900), rng.integers(0, 12, 900), q=9.0)
    p.add("task_one", 0, WRONG, t=2, colour_map=AUGS[2][1], count=1)
    votes, stats, res = score(build, p.save(tmp_path / "p.npz"))
    assert votes.rows == 7 and votes.padding_rows == 5
    assert stats.votes[0] == 2 and stats.candidates[0] == 2
    assert res[1]["tasks_solved"] == 1


def test_rank_files_are_voted_together(build, tmp_path):
    right = Predictions(build, TASKS).add("task_one", 0, truth("task_one"), t=3, colour_map=AUGS[3][1], count=2)
    wrong = Predictions(build, TASKS).add("task_one", 0, WRONG, count=2, q=1.0)
    wrong.add("task_one", 0, truth("task_one"), t=6, colour_map=AUGS[6][1])
    votes, stats, res = score(build, right.save(tmp_path / "rank_0.npz"), wrong.save(tmp_path / "rank_1.npz"))
    assert stats.votes[0] == 5 and stats.correct_votes[0] == 3 and stats.correct_rank[0] == 0
    assert votes.rows == 5


def test_compressed_prediction_files_vote_the_same(build, tmp_path):
    p = Predictions(build, TASKS).add("task_one", 0, truth("task_one"), t=5, colour_map=AUGS[5][1], count=2)
    p.add("task_one", 0, WRONG, count=1, q=3.0)
    path = tmp_path / "compressed.npz"
    np.savez_compressed(path, **p.arrays())
    votes, stats, _ = score(build, path)
    assert stats.votes[0] == 3 and stats.correct_votes[0] == 2 and stats.correct_rank[0] == 0


ARC_EVALUATION = Path(__file__).resolve().parents[1].parent / "shared/data/ARC-AGI-1/evaluation"


@pytest.mark.skipif(not ARC_EVALUATION.is_dir(), reason="official ARC-AGI-1 files not beside the project")
def test_real_task_shapes_right_answers_under_every_transform(tmp_path):
    # six real evaluation tasks (two with two test inputs), read in place, never copied
    names = ["00576224", "009d5c81", "0934a4d8", "12997ef3", "1d398264", "3b4c2228"]
    tasks = {}
    for name in names:
        raw = json.loads((ARC_EVALUATION / f"{name}.json").read_text())
        tasks[name] = {k: [(np.array(p["input"], np.uint8), np.array(p["output"], np.uint8)) for p in raw[k]]
                       for k in ("train", "test")}
    build = make_build(tmp_path / "build", tasks, {name: AUGS for name in names})
    p = Predictions(build, tasks)
    for name, task in tasks.items():
        for i, (_, answer) in enumerate(task["test"]):
            for t, m in AUGS:          # right in every frame; one shared wrong answer, more confident
                p.add(name, i, answer, t=t, colour_map=m, q=-1.0)
            wrong = answer.copy()
            wrong[0, 0] = (wrong[0, 0] + 1) % 10
            p.add(name, i, wrong, count=7, q=5.0)
    votes, stats, res = score(build, p.save(tmp_path / "p.npz"), ks=(1, 2))
    assert stats.votes.tolist() == [15] * len(stats.votes) and (stats.correct_votes == 8).all()
    assert res[1]["task"] == 1.0 and res[1]["pair"] == 1.0


def test_exact_ties_are_ranked_the_same_whatever_the_order_of_the_rows(build, tmp_path):
    """Two answers with the same votes and the same confidences are an exact tie, ordered by hash
    (README): however their rows are ordered (another world size, other rank files), the ranking
    must not change, though a float sum of the same confidences in another order can differ."""
    import itertools

    def sigmoid(q):
        return 0.5 * (1.0 + np.tanh(0.5 * np.float64(np.float32(q))))
    rng = np.random.default_rng(0)
    while True:      # three logits whose sigmoids add up differently in another order
        qs = rng.normal(size=3).astype(np.float32)
        if len({sum(sigmoid(qs[i]) for i in order) for order in itertools.permutations(range(3))}) > 1:
            break
    ranks, confidences = set(), set()
    for right_order, wrong_order in itertools.product(itertools.permutations(qs), repeat=2):
        p = Predictions(build, TASKS)
        for q in right_order:
            p.add("task_one", 0, truth("task_one"), q=float(q))
        for q in wrong_order:
            p.add("task_one", 0, WRONG, q=float(q))
        votes, stats, _ = score(build, p.save(tmp_path / "p.npz"))
        ranks.add(int(stats.correct_rank[0]))
        confidences.update(votes.candidates.confidence[:2].tolist())
    assert len(ranks) == 1 and len(confidences) == 1
